"""minibert.commands.probe: what probe.py and duplicate.py --probe do around
the lesson: the sentences read, the model checked, the sentences cut counted,
and the tables, JSON and plot."""

import json

import pytest

from minibert.checkpoints import load_pretrained
from minibert.commands import probe as probe_command
from minibert.support import MiniBertError
from minibert.tokenization import load_tokenizer
from tiny_models import SENTENCES, save_tiny_model


def test_outputs_table_chart_examples_json_and_plot(tmp_path):
    save_tiny_model(tmp_path / "m")
    model, tokenizer = load_pretrained(tmp_path / "m"), load_tokenizer(tmp_path / "m")
    result = probe_command.probe(model, tokenizer, SENTENCES, show=2, mask_prob=0.2)
    assert len(result.examples) == 2
    assert result.examples[0]["input"] == "the cat sat on the mat."
    assert len(result.examples[0]["layers"]) == 4
    assert result.examples[0]["layers"][0].split()[:2] == ["the", "cat"]    # layer 0 reads the input back
    table = probe_command.format_table(result).splitlines()
    assert len(table) == 2 + 4 + 1 and "masked LM" in table[-1]
    assert table[0].split()[-2:] == ["xent", "(nats)"] and table[-1].endswith(" nats")        # the unit, named
    assert float(table[2].split()[-1]) == pytest.approx(result.layers[0].cross_entropy, abs=5e-4)
    chart = probe_command.format_chart(result).splitlines()
    assert len(chart) == 1 + 4 and all(line.count("|") == 2 for line in chart[1:])
    probe_command.save_json(result, tmp_path / "probe.json")
    values = json.loads((tmp_path / "probe.json").read_text())
    assert [layer["layer"] for layer in values["layers"]] == [0, 1, 2, 3] and values["masked"]["mask_prob"] == 0.2
    # accuracies in percent, as every script reports them, and named so
    assert [layer["top1_percent"] for layer in values["layers"]] == [100 * r.top1 for r in result.layers]
    assert values["masked"]["top5_percent"] == 100 * result.masked["top5"] and "top1" not in values["layers"][0]
    pytest.importorskip("matplotlib")
    probe_command.save_plot({"tiny": result}, tmp_path / "probe.png")
    assert (tmp_path / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sentences_longer_than_the_model_are_cut_and_the_header_says_how_many(tmp_path):
    save_tiny_model(tmp_path)                          # max_position_embeddings 64
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    long = " ".join(SENTENCES)                         # about 110 tokens
    result = probe_command.probe(model, tokenizer, [long, SENTENCES[0], long], batch_size=2)
    assert result.truncated == 2 and result.max_length == 64
    header = probe_command.format_header(result).splitlines()
    assert header[-1] == "note: 2 of 3 sentences are longer than the model's 64 tokens and were cut to fit"
    assert "note:" not in probe_command.format_header(probe_command.probe(model, tokenizer, SENTENCES[:2]))


def test_bad_sentence_files_raise(tmp_path):
    with pytest.raises(MiniBertError, match="missing.txt: file not found"):
        probe_command.read_sentences(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("\n  \n")
    with pytest.raises(MiniBertError, match="no sentences"):
        probe_command.read_sentences(tmp_path / "empty.txt")
    assert probe_command.read_sentences(None, max_sentences=3) == probe_command.read_sentences()[:3]


def test_the_shipped_sentences_are_many_and_varied():
    sentences = probe_command.read_sentences()
    assert len(sentences) >= 100 and len(set(sentences)) == len(sentences)
    assert any(any(c.isdigit() for c in s) for s in sentences) and any("?" in s for s in sentences)


def test_a_missing_head_and_an_empty_fitting_text_name_the_flag_before_anything_is_probed(tmp_path):
    save_tiny_model(tmp_path / "bare", with_mlm_head=False, with_pair_head=False)
    model, tokenizer = load_pretrained(tmp_path / "bare"), load_tokenizer(tmp_path / "bare")
    for call, message in [
            (lambda: probe_command.probe(model, tokenizer, SENTENCES, model_name="bare"),
             "bare: has no MLM head .*; give --fit-head TEXTFILE to fit one on its last layer first"),
            (lambda: probe_command.fit_head(model, tokenizer, ["[CLS] [SEP]"], progress=False),
             "--fit-head: the text has no tokens besides \\[CLS\\]/\\[SEP\\]")]:
        with pytest.raises(MiniBertError, match=message):
            call()


def test_a_tokenizer_with_more_tokens_than_the_model_is_refused(tmp_path):
    import dataclasses
    from minibert.model import BertModel
    model = save_tiny_model(tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    smaller = BertModel(dataclasses.replace(model.config, vocab_size=tokenizer.vocab_size - 1))
    for call in (lambda: probe_command.probe(smaller, tokenizer, SENTENCES),
                 lambda: probe_command.fit_head(smaller, tokenizer, SENTENCES, progress=False)):
        with pytest.raises(MiniBertError, match="expected the tokenizer files of this model"):
            call()


def write_student_folder(folder):
    """The files that mark distill.py's student folder (their contents do not matter here)."""
    folder.mkdir()
    for name in ("student.json", "student.safetensors", "vocab.txt"):
        (folder / name).write_text("{}")
    return folder


def test_probe_py_on_a_fine_tuned_or_a_student_folder_says_what_the_folder_is_and_what_to_give(tmp_path, capsys):
    from helpers import error_line, run_script_in_process
    save_tiny_model(tmp_path / "tuned", with_mlm_head=False, with_pair_head=False)
    (tmp_path / "tuned" / "task.json").write_text(json.dumps({"task": "sst2", "base_model": "runs/base"}))
    code, captured = run_script_in_process(capsys, "probe.py", "--model", tmp_path / "tuned")
    line = error_line(code, captured)
    assert code == 1 and "tuned: a fine-tuned sst2 model (finetune.py's, task.json)" in line
    assert "give the model it was fine-tuned from (runs/base, its task.json says)" in line
    assert "--fit-head TEXTFILE to fit an MLM head on this folder's encoder" in line and "BertModel" not in line

    code, captured = run_script_in_process(capsys, "probe.py", "--model", write_student_folder(tmp_path / "student"))
    line = error_line(code, captured)
    assert code == 1 and "a distilled student (distill.py's BiLSTM, student.json), not a BERT-family encoder" in line
    assert "expected a BERT, ALBERT or DeBERTa model folder" in line


def test_without_a_record_a_model_with_no_head_is_told_to_fit_one(tmp_path):
    save_tiny_model(tmp_path / "bare", with_mlm_head=False, with_pair_head=False)
    model = load_pretrained(tmp_path / "bare")
    assert probe_command.no_head_message(model, "bare").startswith("bare: has no MLM head")
    (tmp_path / "bare" / "task.json").write_text("{damaged")      # the kind is still told, without the base model
    message = probe_command.no_head_message(model, "bare")
    assert "a fine-tuned model (finetune.py's, task.json)" in message and "fine-tuned from," in message
