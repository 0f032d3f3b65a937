"""minibert/support/files.py: atomic writes, and input files that are pipes, read once."""

import os
import subprocess
import sys
import threading

import pytest

from helpers import error_line, run_script_in_process
from minibert.commands.train_mlm import text_files
from minibert.support import MiniBertError
from minibert.support.files import atomic_write, not_a_file, process_is_alive, read_once, remove_leftovers
from minibert.tasks import make_task


# ==============================================================================
# minibert.support.files: a file is written whole or not at all, never onto
# a link, FIFO or device, and a full disk is one line naming the file.
# ==============================================================================

def test_a_symbolic_link_is_refused_and_left_pointing_where_it_did(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(MiniBertError, match="link.json: a symbolic link; give the path of a regular file"):
        with atomic_write(tmp_path / "link.json", "w") as f:
            f.write("new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "{}"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_or_a_device_is_refused_without_being_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    for target in (tmp_path / "pipe", "/dev/null", tmp_path):
        with pytest.raises(MiniBertError, match="not a regular file|a folder"):
            with atomic_write(target, "w") as f:
                f.write("x")
    assert (tmp_path / "pipe").is_fifo() and os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]           # no temporary file left


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_file_size_limit_is_one_line_and_keeps_the_previous_file(tmp_path):
    (tmp_path / "out.bin").write_bytes(b"old")
    program = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"          # so the write fails with EFBIG, as a full disk does
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "from minibert.support import MiniBertError\n"
        "from minibert.support.files import atomic_write\n"
        "try:\n"
        f"    with atomic_write({str(tmp_path / 'out.bin')!r}) as f:\n"
        "        f.write(bytes(5000))\n"
        "except MiniBertError as e:\n"
        "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"{tmp_path / 'out.bin'}: cannot write it (File too large); the previous file is unchanged"
    assert (tmp_path / "out.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_temporary_files_of_dead_writers_are_removed_and_those_of_live_ones_kept(tmp_path):
    finished = subprocess.Popen([sys.executable, "-c", "None"])
    finished.wait()                                                     # its PID is no process now
    assert process_is_alive(os.getpid()) and not process_is_alive(finished.pid)
    dead = tmp_path / f".checkpoint.pt.{finished.pid}.0badc0de.tmp"
    live = tmp_path / f".checkpoint.pt.{os.getpid()}.0000cafe.tmp"
    other = tmp_path / f".other.pt.{finished.pid}.0badc0de.tmp"          # not this checkpoint's
    for path in (dead, live, other):
        path.write_bytes(b"part of a file")
    assert remove_leftovers(tmp_path / "checkpoint.pt") == [dead.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_a_file_written_again_removes_what_a_killed_writer_of_that_file_left(tmp_path):
    from minibert.support.files import write_json
    finished = subprocess.Popen([sys.executable, "-c", "None"])
    finished.wait()
    dead = tmp_path / f".results.json.{finished.pid}.0badc0de.tmp"        # a --json killed with -9
    live = tmp_path / f".results.json.{os.getpid()}.0000cafe.tmp"
    for path in (dead, live):
        path.write_text("half")
    write_json(tmp_path / "results.json", {"accuracy": 1.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["results.json", live.name])


# ==============================================================================
# minibert/support/files.py: an input that is a pipe is read once (copied to
# a regular file the run reads as often as it needs), and a path that is no
# file is named for what it is: missing, a folder, a pipe.
# ==============================================================================

SST2 = b"sentence\tlabel\na good film\t1\nan awful film\t0\n"


def fifo_fed_with(path, data):
    """A FIFO at `path` that a thread fills with `data` once, then closes: what `<(...)` gives."""
    os.mkfifo(path)

    def write():
        with open(path, "wb") as f:
            f.write(data)
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


def test_a_pipe_is_copied_once_and_the_copy_reads_the_same_every_time(tmp_path):
    writer = fifo_fed_with(tmp_path / "train.tsv", SST2)
    copy = read_once(tmp_path / "train.tsv", "--train")
    writer.join(timeout=10)
    assert copy.is_file() and copy.name.startswith("train-") and copy.name.endswith("-train.tsv") and copy.read_bytes() == SST2
    assert read_once(tmp_path / "train.tsv", "--train") == copy        # named twice: the copy, no second read
    examples = make_task("sst2").read(copy)        # the format check and the reading each open the file
    assert [(e.text_a, e.label) for e in examples] == [("a good film", "1"), ("an awful film", "0")]
    regular = tmp_path / "dev.tsv"
    regular.write_bytes(SST2)
    assert read_once(regular, "--eval") == regular and read_once(None, "--eval") is None


def test_a_process_substitution_pipe_reads_as_its_bytes(tmp_path):
    read_end, write_end = os.pipe()                # what bash's <(...) gives: /dev/fd/N of a pipe
    os.write(write_end, SST2)
    os.close(write_end)
    try:
        copy = read_once(f"/proc/self/fd/{read_end}", "--train")
    finally:
        os.close(read_end)
    assert copy.read_bytes() == SST2 and len(make_task("sst2").read(copy)) == 2


def test_a_path_that_is_no_file_is_named_for_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    assert not_a_file(tmp_path / "missing", "--train") == f"--train {tmp_path / 'missing'}: no such file"
    assert not_a_file(tmp_path / "folder", "--train") == f"--train {tmp_path / 'folder'}: a folder; expected a file"
    assert not_a_file(tmp_path / "fifo", "--train") == f"--train {tmp_path / 'fifo'}: a pipe (FIFO); expected a file"
    assert not_a_file(tmp_path / "folder", "--corpus", folders=True) is None
    with pytest.raises(MiniBertError, match=r"--corpus .*fifo: a pipe \(FIFO\); expected a file or a folder"):
        text_files([tmp_path / "fifo"], "--corpus")          # train_mlm.py copies it first (read_once)
    with pytest.raises(MiniBertError, match=r"--corpus .*missing: no such file or folder"):
        text_files([tmp_path / "missing"], "--corpus")


def test_distill_names_a_folder_given_as_train_file(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    code, captured = run_script_in_process(capsys, "distill.py", "--task", "sst2", "--no-teacher", "--train",
                                           tmp_path / "folder", "--output", tmp_path / "student", "--quiet")
    assert code == 1 and f"--train {tmp_path / 'folder'}: a folder; expected a file" in error_line(code, captured)


def test_an_error_about_a_piped_input_names_the_path_given_not_the_copy(tmp_path, capsys):
    from minibert.support.cli import run
    writer = fifo_fed_with(tmp_path / "train.tsv", b"sentence\tlabel\na good film\tmaybe\n")

    def main(argv):
        copy = read_once(tmp_path / "train.tsv", "--train")
        make_task("sst2").read(copy)          # line 2's label is no label of SST-2

    with pytest.raises(SystemExit) as exit_info:
        run(main, [])
    writer.join(timeout=10)
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1
    assert f"{tmp_path / 'train.tsv'}: line 2: unknown sst2 label 'maybe'" in err and "minibert-inputs-" not in err


def test_a_pipe_is_named_as_given_and_hashed_through_its_copy(tmp_path):
    from minibert.support.files import copy_for
    from minibert.support.outputs import file_identity
    writer = fifo_fed_with(tmp_path / "piped.tsv", SST2)
    copy = read_once(tmp_path / "piped.tsv", "--train")
    writer.join(timeout=10)
    regular = tmp_path / "regular.tsv"
    regular.write_bytes(SST2)
    assert copy_for(tmp_path / "piped.tsv") == copy and copy_for(regular) == regular
    assert file_identity(copy) == file_identity(tmp_path / "piped.tsv") == file_identity(regular).replace(
        str(regular), str(tmp_path / "piped.tsv"))


@pytest.mark.parametrize("script", ["finetune.py", "distill.py"])
def test_a_run_on_pipes_records_their_names_and_resumes(tmp_path, capsys, script):
    import json
    from tiny_models import write_toy_sst2
    train, dev = write_toy_sst2(tmp_path)
    args = {"finetune.py": ["--task", "sst2", "--model", tmp_path / "base", "--epochs", "2", "--batch-size", "32",
                            "--max-seq-len", "32"],
            "distill.py": ["--task", "sst2", "--no-teacher", "--epochs", "2", "--embedding-dim", "8",
                           "--hidden-size", "4", "--fc-size", "4"]}[script]
    record = {"finetune.py": "task.json", "distill.py": "student.json"}[script]
    for again in ([], ["--resume"]):
        for name in ("train-pipe", "dev-pipe"):
            (tmp_path / name).unlink(missing_ok=True)        # a new pipe of the same name, as bash's <(...) gives
        fifo_fed_with(tmp_path / "train-pipe", train.read_bytes())
        fifo_fed_with(tmp_path / "dev-pipe", dev.read_bytes())
        stop = [] if again else ["--max-minutes", "1e-9"]             # the first run stops after one step
        code, captured = run_script_in_process(
            capsys, script, *args, "--train", tmp_path / "train-pipe", "--eval", tmp_path / "dev-pipe",
            "--output", tmp_path / "out", "--json", tmp_path / "out.json", "--quiet", *stop, *again)
        assert code == 0, captured.err
    written = (tmp_path / "out" / record).read_text()
    assert json.dumps(str(tmp_path / "dev-pipe")) in written and "minibert-inputs" not in written
    assert "minibert-inputs" not in (tmp_path / "out.json").read_text()      # (a copy's name would say it)


def test_distill_names_a_folder_given_as_pos_file_and_reads_a_piped_one_twice(tmp_path, capsys):
    from distill_helpers import make_distillation_data
    root = make_distillation_data(tmp_path)
    (tmp_path / "folder").mkdir()
    args = ["--teacher", root / "teacher", "--task", "sst2", "--train", root / "train.tsv", "--n-iter", "2",
            "--epochs", "1", "--embedding-dim", "8", "--hidden-size", "4", "--fc-size", "4", "--quiet",
            "--cache-dir", tmp_path / "cache"]
    code, captured = run_script_in_process(capsys, "distill.py", *args, "--pos-file", tmp_path / "folder",
                                           "--output", tmp_path / "s1")
    assert code == 1 and f"--pos-file {tmp_path / 'folder'}: a folder; expected a file" in error_line(code, captured)
    fifo_fed_with(tmp_path / "pos-pipe", (root / "pos.txt").read_bytes())   # read for the lexicon and the cache key
    code, captured = run_script_in_process(capsys, "distill.py", *args, "--pos-file", tmp_path / "pos-pipe",
                                           "--output", tmp_path / "s2")
    assert code == 0, captured.err
    code, captured = run_script_in_process(capsys, "distill.py", *args, "--pos-file", root / "pos.txt",
                                           "--output", tmp_path / "s3")
    assert code == 0 and len(list((tmp_path / "cache").iterdir())) == 1, captured.err   # the same lexicon, one key


def test_the_copies_a_killed_run_left_are_removed_by_the_next_run_that_copies_a_pipe(tmp_path, monkeypatch):
    import subprocess
    import sys
    import tempfile

    from minibert.support import files
    finished = subprocess.Popen([sys.executable, "-c", "None"])
    finished.wait()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(files, "_copies", [])
    (tmp_path / f"minibert-inputs-{finished.pid}-abcd").mkdir()               # killed: atexit never ran
    (tmp_path / f"minibert-inputs-{finished.pid}-abcd" / "train-0-train.tsv").write_bytes(SST2)
    (tmp_path / f"minibert-inputs-{os.getpid()}-live").mkdir()               # a live run's
    (tmp_path / "fifo-dir").mkdir()
    writer = fifo_fed_with(tmp_path / "fifo-dir" / "train.tsv", SST2)
    copy = read_once(tmp_path / "fifo-dir" / "train.tsv", "--train")
    writer.join(timeout=10)
    assert copy.read_bytes() == SST2 and copy.parent.name.startswith(f"minibert-inputs-{os.getpid()}-")
    names = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("minibert-inputs-"))
    assert f"minibert-inputs-{finished.pid}-abcd" not in names and f"minibert-inputs-{os.getpid()}-live" in names
    assert len(names) == 2


def test_a_missing_input_file_is_one_line_naming_its_flag(tmp_path):
    from minibert.support import MiniBertError
    from minibert.support.files import read_once
    with pytest.raises(MiniBertError) as info:
        read_once(tmp_path / "trian.tsv", "--train")
    assert str(info.value) == f"--train {tmp_path / 'trian.tsv'}: no such file or folder"
    assert read_once(None, "--eval") is None                 # a flag not given stays not given


def test_a_folder_given_for_a_file_flag_is_one_line_naming_the_flag_and_the_file_in_it(tmp_path):
    from minibert.support.files import check_file_flags
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "vocab.txt").write_text("[PAD]\n")
    assert not_a_file(model, "--config") == f"--config {model}: a folder; expected a file ({model / 'config.json'} " \
                                            f"is there: give that)"
    assert not_a_file(model, "--vocab").endswith(f"({model / 'vocab.txt'} is there: give that)")
    assert not_a_file(tmp_path, "--config") == f"--config {tmp_path}: a folder; expected a file"   # none there
    for flag in ("--config", "--vocab", "--train", "--eval", "--predict", "--text", "--fit-head", "--pos-file"):
        with pytest.raises(MiniBertError, match=f"^{flag} .*: a folder; expected a file"):
            check_file_flags({"--corpus": [tmp_path], flag: model})
    # folders where folders belong, paths that do not exist yet (the reader says so), and no value
    check_file_flags({"--corpus": [tmp_path], "--heldout-corpus": [model], "--model": model, "--teacher": model,
                      "--config": tmp_path / "missing.json", "--vocab": None})


@pytest.mark.parametrize("script, args, expected", [
    ("train_mlm.py", ["--corpus", "{c}", "--config", "{m}", "--output", "{o}"],
     "--config {m}: a folder; expected a file ({m}/config.json is there: give that)"),
    ("train_mlm.py", ["--corpus", "{c}", "--vocab", "{m}", "--output", "{o}"],
     "--vocab {m}: a folder; expected a file ({m}/vocab.txt is there: give that)"),
    ("finetune.py", ["--task", "sst2", "--model", "{m}", "--train", "{m}", "--output", "{o}"],
     "--train {m}: a folder; expected a file"),
    ("finetune.py", ["--model", "{m}", "--predict", "{m}", "--output", "{o}"], "--predict {m}: a folder; expected a file"),
    ("probe.py", ["--model", "{m}", "--text", "{m}"], "--text {m}: a folder; expected a file"),
    ("probe.py", ["--model", "{m}", "--fit-head", "{m}"], "--fit-head {m}: a folder; expected a file"),
    ("duplicate.py", ["--model", "{m}", "--duplicate", "0", "--output", "{o}", "--probe", "--text", "{m}"],
     "--text {m}: a folder; expected a file"),
    ("distill.py", ["--student", "{m}", "--eval", "{m}"], "--eval {m}: a folder; expected a file"),
])
def test_each_scripts_file_flags_refuse_a_folder_in_one_line(script, args, expected, tmp_path, capsys):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "vocab.txt").write_text("[PAD]\n")
    (tmp_path / "corpus.txt").write_text("a line of text.\n")
    names = {"c": tmp_path / "corpus.txt", "m": model, "o": tmp_path / "out"}
    code, captured = run_script_in_process(capsys, script, *[a.format(**names) for a in args])
    assert error_line(code, captured) == "error: " + expected.format(**names) and code == 1
