"""minibert/support/inputs.py: an input that is a pipe is read once (copied to
a regular file the run reads as often as it needs), and a path that is no
file is named for what it is: missing, a folder, a pipe."""

import os
import threading

import pytest

from helpers import error_line, run_script_in_process
from minibert.runs.pretraining import text_files
from minibert.support.errors import MiniBertError
from minibert.support.inputs import not_a_file, read_once
from minibert.tasks import make_task

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
