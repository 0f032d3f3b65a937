"""minibert.support.cli: every flag is checked when the command line is read, and a
bad value is one `error:` line naming the flag and the allowed values, exit 1."""

import argparse
import os
import re

import pytest

from minibert.support import cli
from helpers import run_script_in_process


@pytest.mark.parametrize("helper,text,message", [
    (cli.positive_int, "0", "expected an integer >= 1, got 0"),
    (cli.positive_int, "-2", "expected an integer >= 1, got -2"),
    (cli.positive_int, "1.5", "expected an integer >= 1, got '1.5'"),
    (cli.non_negative_int, "-5", "expected an integer >= 0, got -5"),
    (cli.positive_float, "-1", "expected a number > 0, got -1"),
    (cli.positive_float, "0", "expected a number > 0, got 0"),
    (cli.positive_float, "nan", "expected a number > 0, got 'nan'"),
    (cli.positive_float, "inf", "expected a number > 0, got 'inf'"),
    (cli.non_negative_float, "-0.1", "expected a number >= 0, got -0.1"),
    (cli.finite_float, "nan", "expected a finite number, got 'nan'"),
    (cli.probability(), "0", "expected a probability in (0, 1], got 0"),
    (cli.probability(), "1.5", "expected a probability in (0, 1], got 1.5"),
    (cli.probability(), "-0.1", "expected a probability in (0, 1], got -0.1"),
    (cli.probability(), "NaN", "expected a probability in (0, 1], got 'NaN'"),
    (cli.probability(include_zero=True, include_one=False), "1", "expected a probability in [0, 1), got 1"),
    (cli.device, "bogus", "'bogus': expected auto, cpu, cuda, cuda:N or mps"),
])
def test_flag_types_refuse_values_outside_their_range(helper, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        helper(text)


def test_flag_types_return_the_checked_value():
    assert cli.positive_int("3") == 3 and cli.non_negative_int("0") == 0
    assert cli.positive_float("1e-3") == 1e-3 and cli.non_negative_float("0") == 0.0
    assert cli.probability()("1") == 1.0 and cli.probability(include_zero=True, include_one=False)("0") == 0.0
    assert cli.int_at_least(4, " (room for [CLS])")("4") == 4
    assert cli.device("cpu").type == "cpu"


def test_output_types_refuse_files_for_folders_and_folders_for_files(tmp_path):
    (tmp_path / "file").write_text("x")
    assert cli.output_folder(str(tmp_path / "new" / "run")) == tmp_path / "new" / "run"   # made later
    assert cli.output_file(str(tmp_path / "new" / "summary.json")) == tmp_path / "new" / "summary.json"
    for helper, path, message in [(cli.output_folder, tmp_path / "file", "is a file; expected a folder"),
                                  (cli.output_folder, tmp_path / "file" / "run", "file is a file, not a folder"),
                                  (cli.output_file, tmp_path, "is a folder; expected a file name"),
                                  (cli.output_file, tmp_path / "file" / "x.json", "file is a file, not a folder")]:
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            helper(str(path))


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_output_types_refuse_a_place_where_nobody_can_write():
    """Nobody, not even root, may make files in /proc: tried for real, not judged by permissions."""
    for helper, path in [(cli.output_folder, "/proc/minibert-run"), (cli.output_file, "/proc/summary.json")]:
        with pytest.raises(argparse.ArgumentTypeError, match="cannot write in /proc"):
            helper(path)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs file permissions that apply (not root)")
def test_output_types_refuse_a_folder_that_cannot_be_written(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(argparse.ArgumentTypeError, match="cannot write in"):
            cli.output_folder(str(locked / "run"))
    finally:
        locked.chmod(0o700)


def test_every_bad_train_mlm_flag_is_one_line_naming_the_flag(tmp_path, capsys):
    """All refused while the command line is read: nothing is trained, made or written."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("Some text.\n", encoding="utf-8")
    (tmp_path / "file").write_text("x")
    output = tmp_path / "run"
    cases = [
        (["--batch-size", "0"], "--batch-size: expected an integer >= 1, got 0"),
        (["--batch-size", "-3"], "--batch-size: expected an integer >= 1, got -3"),
        (["--lr", "-1"], "--lr: expected a number > 0, got -1"),
        (["--lr", "nan"], "--lr: expected a number > 0, got 'nan'"),
        (["--dropout", "1.5"], "--dropout: expected a probability in [0, 1), got 1.5"),
        (["--device", "bogus"], "--device: 'bogus': expected auto"),
        (["--output", tmp_path / "file"], "--output: " + str(tmp_path / "file") + " is a file; expected a folder"),
        (["--output", tmp_path / "file" / "run"], "--output: " + str(tmp_path / "file") + " is a file, not a folder"),
        (["--json", tmp_path], "--json: " + str(tmp_path) + " is a folder"),
        (["--cache-dir", tmp_path / "file"], "--cache-dir: "),
        (["--steps", "-5"], "--steps: expected an integer >= 0, got -5"),
        (["--grad-accum", "0"], "--grad-accum: expected an integer >= 1, got 0"),
        (["--mask-prob", "0"], "--mask-prob: expected a probability in (0, 1], got 0"),
        (["--mask-prob", "1.5"], "--mask-prob: expected a probability in (0, 1], got 1.5"),
        (["--mask-prob", "-0.1"], "--mask-prob: expected a probability in (0, 1], got -0.1"),
        (["--mask-prob", "nan"], "--mask-prob: expected a probability in (0, 1], got 'nan'"),
        (["--warmup", "-1"], "--warmup: expected an integer >= 0, got -1"),
        (["--checkpoint-every", "-1"], "--checkpoint-every: expected an integer >= 0, got -1"),
        (["--eval-every", "-1"], "--eval-every: expected an integer >= 0, got -1"),
        (["--eval-batches", "0"], "--eval-batches: expected an integer >= 1, got 0"),
        (["--num-workers", "-1"], "--num-workers: expected an integer >= 0, got -1"),
        (["--max-minutes", "-1"], "--max-minutes: expected a number > 0, got -1"),
        (["--weight-decay", "-0.01"], "--weight-decay: expected a number >= 0, got -0.01"),
        (["--max-grad-norm", "inf"], "--max-grad-norm: expected a number >= 0, got 'inf'"),
        (["--layers", "0"], "--layers: expected an integer >= 1, got 0"),
        (["--vocab-size", "5"], "--vocab-size: expected an integer >= 6 (the 5 special tokens and one more)"),
        (["--max-seq-len", "2"], "--max-seq-len: expected an integer >= 4 (room for [CLS], one token and two [SEP]), "
                                 "got 2"),
        (["--max-seq-len", "100000"], "--max-seq-len: 100000 is longer than max_position_embeddings (512)"),
    ]
    for extra, expected in cases:
        code, captured = run_script_in_process(capsys, "train_mlm.py", "--corpus", corpus, "--output", output,
                                               "--quiet", *extra)
        lines = captured.err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and lines[0].startswith("error: argument "), (extra, captured.err)
        assert expected in lines[0], (extra, lines[0])
    assert not output.exists()
