"""minibert/support/folders.py: a JSON record, written atomically, read
back with one-line errors; a model folder written as one unit, so that a
writer killed at any point leaves one whole folder (the old or the new)
with the run's checkpoint, and its leftovers are put right by the next run."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from minibert.support.errors import MiniBertError
from minibert.support.folders import read_record, recover_folder, write_folder, write_record


def test_a_record_round_trips_and_a_missing_file_or_field_is_one_line(tmp_path):
    write_record(tmp_path, "task.json", {"task": "sst2", "max_seq_len": 32})
    assert json.loads((tmp_path / "task.json").read_text()) == {"task": "sst2", "max_seq_len": 32}
    assert read_record(tmp_path, "task.json", required=("task",)) == {"task": "sst2", "max_seq_len": 32}
    with pytest.raises(MiniBertError, match=r"task.json: field 'labels' is missing"):
        read_record(tmp_path, "task.json", required=("task", "labels"))
    with pytest.raises(MiniBertError, match=r": no student.json \(not a student folder\)$"):
        read_record(tmp_path, "student.json", missing_hint="not a student folder")


# ----------------------------------------------------------------------------
# A model folder written as one unit
# ----------------------------------------------------------------------------


def write_files(**files):
    """A write_into that writes these files (name=text)."""
    def write_into(staging):
        for name, text in files.items():
            (staging / name.replace("_", ".")).write_text(text)
    return write_into


def dead_pid():
    """The id of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_new_folder_replaces_the_old_one_whole_and_keeps_its_other_files(tmp_path):
    folder = tmp_path / "run"
    write_folder(folder, write_files(model_safetensors="epoch 1", task_json="1", tokenizer_json="another model's"))
    (folder / "checkpoint.pt").write_text("the run's checkpoint")
    write_folder(folder, write_files(model_safetensors="epoch 2", task_json="2"), leave_behind=("tokenizer.json",))
    assert {p.name: p.read_text() for p in folder.iterdir()} == {
        "model.safetensors": "epoch 2", "task.json": "2", "checkpoint.pt": "the run's checkpoint"}
    assert [p.name for p in tmp_path.iterdir()] == ["run"]                 # nothing left beside it


def test_a_write_that_fails_leaves_the_old_folder_as_it_was(tmp_path):
    folder = tmp_path / "run"
    write_folder(folder, write_files(model_safetensors="epoch 1", task_json="1"))

    def fail_half_way(staging):
        (staging / "model.safetensors").write_text("epoch 2")
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_folder(folder, fail_half_way)
    assert {p.name: p.read_text() for p in folder.iterdir()} == {"model.safetensors": "epoch 1", "task.json": "1"}
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_the_working_directory_or_a_file_is_refused_as_a_model_folder(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(MiniBertError, match=r"file: is a file, not a folder$"):
        write_folder(tmp_path / "file", write_files())
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MiniBertError, match=r"holds the current working directory"):
        write_folder(".", write_files())


def test_leftovers_of_a_dead_writer_are_put_right_and_a_live_one_is_left_alone(tmp_path):
    folder, dead, live = tmp_path / "run", dead_pid(), os.getpid()
    folder.mkdir()
    (folder / "task.json").write_text("1")
    (folder / f".model.safetensors.{dead}.00ff.tmp").write_text("half a file")
    (folder / f".checkpoint.pt.{live}.00ff.tmp").write_text("being written now")
    (tmp_path / f".run.{dead}.0a0b.tmp").mkdir()                            # a new folder, half written
    (tmp_path / f".run.{dead}.0a0b.tmp" / "model.safetensors").write_text("epoch 2")
    assert recover_folder(folder) == [f".run.{dead}.0a0b.tmp", f"run/.model.safetensors.{dead}.00ff.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in folder.iterdir()) == [f".checkpoint.pt.{live}.00ff.tmp", "task.json"]


def test_an_old_folder_renamed_away_comes_back_or_gives_its_other_files_to_the_new_one(tmp_path):
    folder, dead = tmp_path / "run", dead_pid()
    old = tmp_path / f".run.{dead}.0a0b.old"
    old.mkdir()
    (old / "task.json").write_text("1")
    (old / "checkpoint.pt").write_text("checkpoint")
    recover_folder(folder)                                # killed between the two renames: the old one is back
    assert {p.name: p.read_text() for p in folder.iterdir()} == {"task.json": "1", "checkpoint.pt": "checkpoint"}
    os.rename(folder, old)
    folder.mkdir()
    (folder / "task.json").write_text("2")
    recover_folder(folder)                                # killed after the new one arrived: it keeps the checkpoint
    assert {p.name: p.read_text() for p in folder.iterdir()} == {"task.json": "2", "checkpoint.pt": "checkpoint"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from minibert.support import folders
    folder, kill_at = Path(sys.argv[1]), sys.argv[2]
    replaced = []

    def replace(source, target):            # os.replace, with a kill before the chosen rename
        if len(replaced) == {"before the old folder moves": 0, "between the two renames": 1}.get(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        replaced.append(target)
        real_replace(source, target)

    def write_into(staging):
        (staging / "model.safetensors").write_text("epoch 2")
        if kill_at == "while writing":
            os.kill(os.getpid(), signal.SIGKILL)
        (staging / "task.json").write_text("2")

    real_replace, folders.os.replace = os.replace, replace
    if kill_at == "before the checkpoint is carried over":
        folders.carry_over = lambda old, new, leave_behind=(): os.kill(os.getpid(), signal.SIGKILL)
    folders.write_folder(folder, write_into)
""")


@pytest.mark.parametrize("kill_at, survivor", [("while writing", "1"), ("before the old folder moves", "1"),
                                               ("between the two renames", "1"),
                                               ("before the checkpoint is carried over", "2")])
def test_a_writer_killed_at_any_point_leaves_one_whole_folder_and_its_checkpoint(tmp_path, kill_at, survivor):
    folder = tmp_path / "run"
    write_folder(folder, write_files(model_safetensors="epoch 1", task_json="1"))
    (folder / "checkpoint.pt").write_text("checkpoint")
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(folder), kill_at], capture_output=True)
    assert killed.returncode == -9, killed.stderr.decode()
    recover_folder(folder)                                                 # what the next run does first
    epoch = {"1": "epoch 1", "2": "epoch 2"}[survivor]
    assert {p.name: p.read_text() for p in folder.iterdir()} == {
        "model.safetensors": epoch, "task.json": survivor, "checkpoint.pt": "checkpoint"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_link_to_a_folder_keeps_pointing_at_the_new_folder(tmp_path):
    write_folder(tmp_path / "real", write_files(task_json="1"))
    (tmp_path / "link").symlink_to(tmp_path / "real")
    write_folder(tmp_path / "link", write_files(task_json="2"))
    assert (tmp_path / "link").is_symlink() and (tmp_path / "link" / "task.json").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_a_folder_that_cannot_be_written_is_a_one_line_error(tmp_path):
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0o500)
    try:
        if os.access(tmp_path / "locked", os.W_OK):
            pytest.skip("running as a user who may write anywhere")
        with pytest.raises(MiniBertError, match=r"locked/run: cannot write a folder here \(Permission denied\)$"):
            write_folder(tmp_path / "locked" / "run", write_files(task_json="1"))
    finally:
        (tmp_path / "locked").chmod(0o700)


def test_a_full_disk_inside_write_folder_is_one_line_and_keeps_the_old_folder(tmp_path):
    import errno
    folder = tmp_path / "model"
    write_folder(folder, lambda staging: (staging / "config.json").write_text("old"))

    def fills_the_disk(staging):
        (staging / "config.json").write_text("new")
        raise OSError(errno.ENOSPC, "No space left on device", str(staging / "vocab.txt"))
    with pytest.raises(MiniBertError) as caught:
        write_folder(folder, fills_the_disk)
    assert str(caught.value) == (f"{folder}: cannot write it (No space left on device, vocab.txt); "
                                 f"the previous folder is unchanged")
    assert (folder / "config.json").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_full_disk_in_an_atomic_write_inside_write_folder_names_the_folder_not_its_staging(tmp_path):
    import errno
    from minibert.support.fileio import atomic_write
    folder = tmp_path / "model"

    def fills_the_disk(staging):
        with atomic_write(staging / "model.safetensors") as f:
            f.write(b"half")
            raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(MiniBertError) as caught:
        write_folder(folder, fills_the_disk)
    assert str(caught.value) == (f"{folder}: cannot write it (No space left on device, model.safetensors); "
                                 f"nothing was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ---- every writing script, killed at each rename of write_folder -------------------------------


@pytest.fixture(scope="module")
def writer_data(tmp_path_factory):
    from tiny_models import save_tiny_model
    data = tmp_path_factory.mktemp("writers")
    save_tiny_model(data / "model")
    (data / "corpus.txt").write_text("the cat sat on the mat .\n" * 20)
    (data / "train.tsv").write_text("sentence\tlabel\nthe cat sat\t1\nthe mat\t0\n")
    return data


def writer_args(script, data):
    """The smallest run of each writing script; the second run on one --output writes over the first."""
    return {"train_mlm.py": ["--corpus", data / "corpus.txt", "--vocab", data / "model" / "vocab.txt", "--steps",
                             "1", "--layers", "1", "--hidden", "16", "--heads", "2", "--intermediate", "32",
                             "--batch-size", "2", "--max-seq-len", "16", "--eval-every", "0", "--device", "cpu",
                             "--quiet", "--force"],
            "duplicate.py": ["--model", data / "model", "--duplicate", "0", "--force"],
            "finetune.py": ["--task", "sst2", "--model", data / "model", "--train", data / "train.tsv", "--epochs",
                            "1", "--max-seq-len", "32", "--device", "cpu", "--quiet", "--resume"],
            "distill.py": ["--no-teacher", "--task", "sst2", "--train", data / "train.tsv", "--epochs", "1",
                           "--device", "cpu", "--quiet", "--resume"]}[script]


def read_model(script, folder):
    """What a reader of the script's folder loads: the weights, by name."""
    if script == "finetune.py":
        from minibert.commands.finetune import load_task_model
        from minibert.tasks import make_task
        return load_task_model(folder, make_task)[0].state_dict()
    if script == "distill.py":
        from minibert.commands.distill import load_student
        return load_student(folder)[0].state_dict()
    from minibert.checkpoints import load_pretrained
    return load_pretrained(folder).state_dict()


@pytest.mark.parametrize("signal_name, at", [("SIGKILL", 0), ("SIGKILL", 1), ("SIGINT", 1), ("SIGTERM", 1)])
@pytest.mark.parametrize("script", ["train_mlm.py", "duplicate.py", "finetune.py", "distill.py"])
def test_a_writer_killed_at_each_rename_loses_no_folder_and_the_next_run_leaves_nothing_behind(
        writer_data, tmp_path, capsys, script, signal_name, at):
    import torch
    from helpers import run_killed_at_rename, run_script_in_process
    output, args = tmp_path / "out", writer_args(script, writer_data)
    code, captured = run_script_in_process(capsys, script, *args, "--output", output)
    assert code == 0, captured.err
    before = read_model(script, output)
    files = sorted(p.name for p in output.iterdir())
    killed = run_killed_at_rename(script, [*args, "--output", output], at, signal_name)
    if signal_name in ("SIGINT", "SIGTERM"):     # the live process put the old folder back before it ended
        status, line = (130, "error: interrupted\n") if signal_name == "SIGINT" else (143, "error: terminated\n")
        assert killed.returncode == status and killed.stderr.endswith(line), killed.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    else:
        assert killed.returncode == -9, killed.stderr
        assert output.exists() == (at == 0)      # between the renames the folder is missing: a reader restores it
    after = read_model(script, output)
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    left = sorted(p.name for p in output.iterdir())       # with the killed run's checkpoint and token cache
    assert [name for name in left if name not in ("checkpoint.pt", "cache")] == files, left
    code, captured = run_script_in_process(capsys, script, *args, "--output", output)   # the next run cleans up
    assert code == 0, captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_reader_puts_back_a_folder_a_killed_write_left_renamed_away_or_says_how(tmp_path):
    from minibert.support.folders import restore_interrupted
    folder, dead = tmp_path / "run", dead_pid()
    old = tmp_path / f".run.{dead}.0a0b.old"
    old.mkdir()
    (old / "task.json").write_text("1")
    assert restore_interrupted(folder) is True and (folder / "task.json").read_text() == "1"
    assert restore_interrupted(folder) is False and sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    live = tmp_path / f".gone.{os.getpid()}.0a0b.old"          # a writer still between its two renames
    live.mkdir()
    with pytest.raises(MiniBertError, match=rf"gone: missing while the run with PID {os.getpid()} replaces it .*"
                                            rf"mv {live} {tmp_path / 'gone'}$"):
        restore_interrupted(tmp_path / "gone", wait_seconds=0.2)
    assert restore_interrupted(tmp_path / "never-written") is False


def test_a_folder_put_right_after_a_kill_keeps_the_run_files_of_the_old_one_but_none_of_its_model(tmp_path):
    folder, dead = tmp_path / "run", dead_pid()
    folder.mkdir()
    (folder / "model.safetensors").write_text("new model")
    old = tmp_path / f".run.{dead}.0a0b.old"
    old.mkdir()
    for name, text in (("model.safetensors", "old model"), ("tokenizer.json", "old model's"),
                       ("checkpoint.pt", "checkpoint"), ("notes.txt", "a user's")):
        (old / name).write_text(text)
    recover_folder(folder)
    assert {p.name: p.read_text() for p in folder.iterdir()} == {
        "model.safetensors": "new model", "checkpoint.pt": "checkpoint", "notes.txt": "a user's"}


def test_a_folder_replaced_at_every_read_is_one_line_after_three_reads(tmp_path):
    from minibert.support.folders import read_as_one
    reads = []

    def read_while_a_run_replaces_it():
        reads.append(1)
        write_folder(tmp_path / "m", write_files(task_json=str(len(reads))))
        return len(reads)
    write_folder(tmp_path / "m", write_files(task_json="0"))
    with pytest.raises(MiniBertError, match=r"m: replaced by another run each time it was read \(3 times\); try "
                                            r"again when that run has ended$"):
        read_as_one(tmp_path / "m", read_while_a_run_replaces_it)
    assert len(reads) == 3 and read_as_one(tmp_path / "m", lambda: "steady") == "steady"
