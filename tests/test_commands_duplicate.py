"""minibert.commands.duplicate: duplicate.py's deeper model (the lesson's
checks, shown with the flags), the folder written and the layer order that
probe.py reads back from it (minibert.commands.probe)."""

import json
from pathlib import Path

import pytest

from minibert import duplication
from minibert.checkpoints import load_pretrained
from minibert.commands.duplicate import deeper_model, write_model
from minibert.commands.probe import recorded_layer_order
from minibert.support import MiniBertError
from tiny_models import save_tiny_model


@pytest.fixture
def bert(tmp_path):
    save_tiny_model(tmp_path / "bert", num_hidden_layers=4)
    return load_pretrained(tmp_path / "bert")


def test_deeper_model_leaves_the_checks_to_the_lesson_whose_errors_the_script_shows_as_flags(bert, tmp_path):
    from minibert.support.cli import one_line
    save_tiny_model(tmp_path / "albert2", model_type="albert", num_hidden_layers=4, num_hidden_groups=2)
    albert2 = load_pretrained(tmp_path / "albert2")
    for call, message, line in [
        (lambda: deeper_model(bert, duplicate=[0, 7]), "duplicate: layer index 7 is out of range",
         "--duplicate: layer index 7 is out of range; the model has 4 layers (indices 0..3)"),
        (lambda: deeper_model(bert, order=[]), "layer_order: empty", "--order: empty"),
        (lambda: deeper_model(bert, order=[0] * 60000), "layer_order: would make a model of 60,000 layers",
         "--order: would make a model of 60,000 layers; the limit is 1,000"),
        (lambda: deeper_model(bert, repeat=2), "k: only an ALBERT", "--repeat: only an ALBERT"),
        (lambda: deeper_model(albert2, repeat=998), "k 998: would make", "--repeat 998: would make a model of 1,002"),
        (lambda: deeper_model(albert2, duplicate=[0], tied=True), "tied: ALBERT", "--tied: ALBERT"),
    ]:
        with pytest.raises(MiniBertError, match=message) as raised:
            call()
        assert one_line(raised.value).startswith(line)


def test_deeper_model_returns_the_model_and_the_order_it_runs(bert, tmp_path):
    deeper, layer_order = deeper_model(bert, duplicate=[0, 2])
    assert layer_order == [0, 0, 1, 2, 2, 3] and deeper.config.num_hidden_layers == 6
    deeper, layer_order = deeper_model(bert, order=[3, 3, 0], tied=True)
    assert layer_order == [3, 3, 0] and deeper.config.layer_order == [0, 0, 1]
    save_tiny_model(tmp_path / "albert", model_type="albert")
    deeper, layer_order = deeper_model(load_pretrained(tmp_path / "albert"), repeat=2)
    assert layer_order is None and deeper.config.num_hidden_layers == 5


def test_recorded_layer_order_reads_duplication_json_only_when_it_fits(bert, tmp_path):
    folder = tmp_path / "deeper"
    folder.mkdir()
    assert recorded_layer_order(folder, bert.config) is None                       # no duplication.json
    for layers_run, expected in (([0, 0, 1, 2], [0, 0, 1, 2]), ([0, 1], None), ("0,1,2,3", None)):
        (folder / "duplication.json").write_text(json.dumps({"layers_run": layers_run}))
        assert recorded_layer_order(folder, bert.config) == expected
    (folder / "duplication.json").write_text("{not json")
    assert recorded_layer_order(folder, bert.config) is None


def test_write_model_never_writes_into_the_source_folder(bert, tmp_path):
    deeper = duplication.deepen(bert, [0, 0, 1, 2, 3])
    with pytest.raises(MiniBertError, match="is inside the folder of the model being copied"):
        write_model(deeper, bert.source_dir / "deeper", source_dir=bert.source_dir, force=True)
    assert not (bert.source_dir / "deeper").exists()


def test_write_model_replaces_an_old_model_whole_or_not_at_all(bert, tmp_path, monkeypatch):
    import minibert.checkpoints
    out = tmp_path / "out"
    out.mkdir()
    old_files = {"config.json": "{}", "task.json": "{}", "metrics.json": "{}", "checkpoint.pt": "old run",
                 "model.safetensors": "old", "notes.txt": "mine"}
    for name, text in old_files.items():
        (out / name).write_text(text)                    # a fine-tuned folder, and a file of the user's
    deeper = duplication.deepen(bert, [0, 1, 1, 2, 3])

    def full_disk(model, directory, **kwargs):
        (Path(directory) / "model.safetensors").write_text("half")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(minibert.checkpoints, "save_pretrained", full_disk)
    with pytest.raises(MiniBertError, match="out: cannot write it \\(No space left on device.*; the previous folder is unchanged"):
        write_model(deeper, out, source_dir=bert.source_dir, force=True)
    assert {p.name: p.read_text() for p in out.iterdir()} == old_files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert", "out"]
    monkeypatch.undo()
    write_model(deeper, out, source_dir=bert.source_dir, record={"duplicated": [1]}, force=True)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "duplication.json", "model.safetensors", "notes.txt", "vocab.txt"} <= names
    assert not names & {"task.json", "metrics.json", "checkpoint.pt"}                   # no stale record
    assert load_pretrained(out).config.num_hidden_layers == 5
