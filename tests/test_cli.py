"""minibert.support.cli: every flag is checked when the command line is read, and a
bad value is a usage error (argparse's usage line, then one `error:` line
naming the flag and the allowed values, exit 2); an error met while running
is one `error:` line, exit 1."""

import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import error_line, run_script_in_process
from minibert.support import cli
from minibert.support.cli import format_metrics, json_safe


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


def test_every_bad_train_mlm_flag_is_a_usage_error_naming_the_flag(tmp_path, capsys):
    """All refused while the command line is read (usage line, error line,
    exit 2): nothing is trained, made or written."""
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
        assert code == 2 and error_line(code, captured).startswith("error: argument "), (extra, captured.err)
        assert expected in error_line(code, captured), (extra, captured.err)
    assert not output.exists()


def test_seeds_outside_what_torch_takes_are_refused():
    assert cli.seed("0") == 0 and cli.seed(str(2**63 - 1)) == 2**63 - 1
    for text in (str(2**63), str(2**64), "-1"):
        message = "expected an integer in [0, 9223372036854775807]"
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            cli.seed(text)


def test_usage_errors_exit_2_with_the_usage_line_and_run_errors_exit_1_in_one_line(capsys):
    from minibert.support import MiniBertError
    parser = cli.ArgumentParser(prog="tool.py")
    parser.add_argument("--n", type=cli.positive_int, required=True)

    def main(argv):
        args = parser.parse_args(argv)
        if args.n == 3:
            parser.error("--n 3 does not go with the others")         # flags that do not go together
        raise MiniBertError(f"data.txt: line {args.n}: bad\nvalue")     # a bad file, met while running
    for argv, status, message in [(["--n", "1", "--bogus"], 2, "unrecognized arguments: --bogus"),
                                  ([], 2, "the following arguments are required: --n"),
                                  (["--n", "0"], 2, "argument --n: expected an integer >= 1, got 0"),
                                  (["--n", "3"], 2, "--n 3 does not go with the others"),
                                  (["--n", "2"], 1, "error: data.txt: line 2: bad value")]:
        with pytest.raises(SystemExit) as exit_info:
            cli.run(main, argv)
        lines = capsys.readouterr().err.strip().splitlines()
        assert exit_info.value.code == status and message in lines[-1], (argv, lines)
        if status == 2:
            assert lines[0] == "usage: tool.py [-h] --n N" and lines[-1].endswith("(see tool.py --help)")
        else:
            assert len(lines) == 1


def test_a_lessons_parameter_error_is_one_line_naming_the_flag_from_the_table(capsys):
    from minibert.support import MiniBertError, ParameterError
    assert cli.FLAGS["layer_order"] == "--order"
    for error, line in [(ParameterError("layer_order: empty; expected at least\none layer index"),
                         "error: --order: empty; expected at least one layer index"),
                        (ParameterError("k 998: would make a model of 1,001 layers"),
                         "error: --repeat 998: would make a model of 1,001 layers"),
                        (ParameterError("layer_orders: a name the table does not hold"),
                         "error: layer_orders: a name the table does not hold"),
                        (MiniBertError("tied: a file, not a parameter"), "error: tied: a file, not a parameter")]:
        def main(argv):
            raise error
        with pytest.raises(SystemExit) as exit_info:
            cli.run(main, [])
        assert exit_info.value.code == 1 and capsys.readouterr().err == line + "\n"


def test_checked_turns_a_refused_value_into_a_usage_error(tmp_path):
    (tmp_path / "file").write_text("x")
    parser = cli.ArgumentParser(prog="tool.py")
    assert cli.checked(parser, "--output", cli.output_folder, str(tmp_path / "run")) == tmp_path / "run"
    with pytest.raises(cli.UsageError, match=re.escape(f"argument --output: {tmp_path / 'file'} is a file; expected "
                                                       f"a folder (see tool.py --help)")):
        cli.checked(parser, "--output", cli.output_folder, str(tmp_path / "file"))


@pytest.mark.parametrize("table, row", [("albert", "albert.embeddings.word_embeddings.weight"),
                                        ("deberta-v1", "deberta.encoder.layer.0.attention.self.in_proj.weight"),
                                        ("task-heads", "qa_outputs.weight")])
def test_the_name_map_command_prints_its_table_without_a_warning(table, row):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "minibert.checkpoints.name_maps", table], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert row in done.stdout


def test_the_name_map_command_names_its_tables_for_an_unknown_one():
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "minibert.checkpoints.name_maps", "roberta"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("name_maps: unknown table 'roberta'; expected one of bert, albert, deberta-v1, deberta-v3, "
                           "task-heads\n")


@pytest.mark.parametrize("script", ["train_mlm.py", "probe.py", "duplicate.py", "finetune.py", "distill.py"])
def test_a_script_main_called_from_python_returns_instead_of_exiting(script, capsys):
    # What a notebook does: import the script and call main(argv). --help returns 0,
    # a bad flag is an exception to read; only run (the command line) exits.
    import importlib.util
    from helpers import REPO
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_script", REPO / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith(f"usage: {script}")      # its own name, not the kernel's
    with pytest.raises(cli.UsageError, match=re.escape(f"(see {script} --help)")):
        module.main(["--bogus"])
    with pytest.raises(SystemExit) as exit_info:                         # the command line keeps its statuses
        cli.run(module.main, ["--help"])
    assert exit_info.value.code == 0


@pytest.mark.parametrize("script", ["train_mlm.py", "probe.py", "duplicate.py", "finetune.py", "distill.py"])
def test_help_and_a_usage_error_answer_before_torch_is_imported(script):
    # A command reads its flags first and imports torch and the lessons only to run (--device is read
    # last, support/cli.DeviceName): --help, an unknown flag and a bad value answer at once.
    import subprocess
    import sys
    from helpers import REPO
    program = ("import runpy, sys\n"
               "sys.argv = sys.argv[1:]\n"
               "try:\n"
               "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
               "except SystemExit as e:\n"
               "    print('exit', e.code, 'torch' in sys.modules, file=sys.stderr)\n")
    for flags, status in ((["--help"], 0), (["--bogus"], 2), (["--batch-size", "0"], 2)):
        done = subprocess.run([sys.executable, "-c", program, str(REPO / script), *flags], capture_output=True,
                              text=True, cwd=REPO, timeout=120)
        assert done.stderr.splitlines()[-1] == f"exit {status} False", (flags, done.stderr[-1000:])


@pytest.mark.parametrize("script", ["train_mlm.py", "finetune.py", "distill.py"])
def test_every_training_script_shows_how_to_run_it_under_torchrun(script, capsys):
    import importlib.util
    from helpers import REPO
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_script", REPO / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"torchrun --standalone --nproc_per_node 2 {script}" in text
    assert "the first process alone prints and writes" in text


def test_under_torchrun_only_the_main_process_speaks(monkeypatch, capsys):
    from minibert.support import MiniBertError
    from minibert.support.outputs import is_main_process

    @cli.script_main
    def main(argv):
        print("saved to out")
        print("warning: one", file=sys.stderr)
        if argv:
            raise MiniBertError(argv[0])
        return 0
    monkeypatch.delenv("RANK", raising=False)
    assert is_main_process() and is_main_process(0) and not is_main_process(1)
    assert main([]) == 0 and capsys.readouterr() == ("saved to out\n", "warning: one\n")
    monkeypatch.setenv("RANK", "1")                  # torchrun's second process
    assert not is_main_process()
    assert main([]) == 0 and capsys.readouterr() == ("", "")
    with pytest.raises(SystemExit):                  # its error still reaches the terminal, from `run`
        cli.run(main, ["bad file"])
    assert capsys.readouterr() == ("", "error: bad file\n")
    monkeypatch.setenv("RANK", "0")
    assert main([]) == 0 and capsys.readouterr().out == "saved to out\n"


def test_a_script_main_releases_its_output_lock_when_it_returns(tmp_path):
    from minibert.support.outputs import HELD_LOCKS, safe_run

    @cli.script_main
    def main(argv):
        safe_run(folder=tmp_path / argv[0])
        assert len(HELD_LOCKS) == 1
        return 3
    assert main(["out"]) == 3 and main(["out"]) == 3      # the second call is not refused by the first's lock
    assert not HELD_LOCKS and not (tmp_path / ".out.lock").exists()


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A tiny model with a toy SST-2 split, a fine-tuned folder and a student made from it."""
    from helpers import run_script
    from tiny_models import write_toy_sst2
    root = tmp_path_factory.mktemp("toy")
    write_toy_sst2(root)
    for script, args in (("finetune.py", ["--task", "sst2", "--model", root / "base", "--epochs", "1",
                                          "--max-seq-len", "32", "--output", root / "tuned"]),
                         ("distill.py", ["--task", "sst2", "--no-teacher", "--epochs", "1", "--embedding-dim", "8",
                                         "--hidden-size", "4", "--fc-size", "4", "--output", root / "student"])):
        done = run_script(script, *args, "--train", root / "train.tsv", "--quiet")
        assert done.returncode == 0, done.stderr[-2000:]
    return root


def full_disk_cases(root, out):
    # (limit in bytes, script and arguments, what the error line says); each written file is over its limit
    folder = "cannot write it (File too large, {}); nothing was written"
    return {
        "finetune.py checkpoint": (20_000, ["finetune.py", "--task", "sst2", "--model", root / "base", "--train",
                                            root / "train.tsv", "--epochs", "1", "--max-seq-len", "32", "--output",
                                            out, "--quiet"],
                                   f"{out / 'checkpoint.pt'}: cannot write it (File too large)"),
        "finetune.py model folder": (20_000, ["finetune.py", "--task", "sst2", "--model", root / "base", "--train",
                                              root / "train.tsv", "--eval", root / "dev.tsv", "--epochs", "1",
                                              "--max-seq-len", "32", "--output", out, "--quiet"],
                                     f"{out}: " + folder.format("model.safetensors")),   # the best epoch, saved first
        "finetune.py predictions": (300, ["finetune.py", "--model", root / "tuned", "--predict", root / "dev.tsv",
                                          "--output", out, "--quiet"], f"{out}: cannot write it (File too large)"),
        "finetune.py --json": (50, ["finetune.py", "--model", root / "tuned", "--eval", root / "dev.tsv", "--json",
                                    out, "--quiet"], f"{out}: cannot write it (File too large)"),
        "distill.py student folder": (1_000, ["distill.py", "--task", "sst2", "--no-teacher", "--train",
                                              root / "train.tsv", "--eval", root / "dev.tsv", "--epochs", "1",
                                              "--embedding-dim", "8",
                                              "--hidden-size", "4", "--fc-size", "4", "--output", out, "--quiet"],
                                      f"{out}: " + folder.format("student.safetensors")),
        "distill.py predictions": (300, ["distill.py", "--student", root / "student", "--predict", root / "dev.tsv",
                                         "--output", out, "--quiet"], f"{out}: cannot write it (File too large)"),
        "distill.py --json": (50, ["distill.py", "--student", root / "student", "--eval", root / "dev.tsv", "--json",
                                   out, "--quiet"], f"{out}: cannot write it (File too large)"),
        "duplicate.py model folder": (300, ["duplicate.py", "--model", root / "base", "--duplicate", "0", "--output",
                                            out], f"{out}: " + folder.format("model.safetensors")),
        "probe.py --json": (300, ["probe.py", "--model", root / "base", "--max-sentences", "3", "--json", out],
                            f"{out}: cannot write it (File too large)"),
        "walkthrough --json": (300, ["minibert/walkthrough.py", "a good film", "--model", root / "base", "--json",
                                     out], f"{out}: cannot write it (File too large)"),
    }


@pytest.mark.skipif(os.name == "nt", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("case", ["finetune.py checkpoint", "finetune.py model folder", "finetune.py predictions",
                                  "finetune.py --json",
                                  "distill.py student folder", "distill.py predictions", "distill.py --json",
                                  "duplicate.py model folder", "probe.py --json", "walkthrough --json"])
def test_a_full_disk_is_one_error_line_naming_what_was_not_written(toy, tmp_path, case):
    # RLIMIT_FSIZE stands in for a full disk: a write past it fails with EFBIG as one past the disk's end with ENOSPC
    import subprocess
    import sys
    from helpers import REPO
    out = tmp_path / "out"
    limit, (script, *args), message = full_disk_cases(toy, out)[case]
    program = ("import resource, runpy, signal, sys\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
               "sys.argv = sys.argv[1:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", program, str(REPO / script), *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = [line for line in done.stderr.splitlines() if line.startswith("error") or "Error" in line]
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), done.stderr[-2000:]
    assert not out.is_file() and not (out / "model.safetensors").exists() and not (out / "student.json").exists()
    assert [p.name for p in tmp_path.rglob(".*") if not p.name.endswith(".lock")] == []   # no temporary file left


def test_an_argument_list_from_python_may_hold_paths_and_numbers(tmp_path):
    parser = cli.ArgumentParser(prog="tool.py")
    parser.add_argument("--model")
    parser.add_argument("--steps", type=cli.positive_int)
    parser.add_argument("--lr", type=cli.positive_float)
    args = parser.parse_args(["--model", tmp_path / "model", "--steps", 3, "--lr", 0.5])
    assert (args.model, args.steps, args.lr) == (str(tmp_path / "model"), 3, 0.5)
    with pytest.raises(cli.UsageError, match=r"the argument list holds None \(NoneType\); expected strings, paths or "
                                             r"numbers \(see tool.py --help\)"):
        parser.parse_args(["--model", None])


def test_a_script_main_takes_a_path_as_a_notebook_passes_it(tmp_path):
    # get_model_path() in the notebook returns a Path: the script reads it as the folder it names.
    import importlib.util
    from helpers import REPO
    from minibert.support import MiniBertError
    spec = importlib.util.spec_from_file_location("probe_script", REPO / "probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(MiniBertError, match=re.escape(f"model {tmp_path / 'missing'}: no such file or folder")):
        module.main(["--model", tmp_path / "missing"])


def test_quiet_turns_the_download_progress_bars_off_until_the_script_returns():
    from huggingface_hub.utils import are_progress_bars_disabled
    parser = cli.ArgumentParser(prog="tool.py")
    parser.add_argument("--quiet", action="store_true")
    seen = []

    @cli.script_main
    def main(argv):
        parser.parse_args(argv)
        seen.append(are_progress_bars_disabled())

    assert not are_progress_bars_disabled()
    main(["--quiet"])
    main([])
    assert seen == [True, False] and not are_progress_bars_disabled()


@pytest.mark.parametrize("script", ["train_mlm.py", "probe.py", "duplicate.py", "finetune.py", "distill.py"])
def test_every_script_sets_its_threads_once_the_command_line_is_read_and_says_so(script, monkeypatch, capsys):
    # --threads wins; without it OMP_NUM_THREADS does, which the tests set (and say so); --quiet says nothing.
    import importlib
    import torch
    module = importlib.import_module("minibert.commands." + Path(script).stem)
    parse = module.parse_args if script == "train_mlm.py" else module.parser.parse_args
    required = {"train_mlm.py": ["--corpus", "c.txt", "--output", "out"], "duplicate.py": ["--duplicate", "0",
                "--output", "out"]}.get(script, [])
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        assert parse(required + ["--threads", "2"]).threads == 2 and torch.get_num_threads() == 2
        assert capsys.readouterr().out == "threads: 2 (--threads)\n"
        assert parse(required).threads == 1 and torch.get_num_threads() == 1
        assert capsys.readouterr().out == "threads: 1 (OMP_NUM_THREADS=1 in the environment)\n"
        if script != "duplicate.py" and script != "probe.py":       # their add_device has no --quiet
            parse(required + ["--quiet"])
            assert capsys.readouterr().out == ""
    finally:
        torch.set_num_threads(before)
    with pytest.raises(cli.UsageError, match="argument --threads: expected an integer >= 1, got 0"):
        parse(required + ["--threads", "0"])


# ==============================================================================
# minibert/support/cli.py: the metrics table the scripts print and
# results made ready for JSON.
# ==============================================================================

def test_metrics_print_as_a_table_of_percentages_without_nested_values():
    table = format_metrics({"accuracy": 91.25, "steps": 20, "per_type": {"PER": 90.0}}, "sst2 on dev")
    assert table.splitlines() == ["sst2 on dev", "-" * 18, "accuracy     91.25", "steps           20"]


def test_wide_figures_and_figures_followed_by_words_line_up_on_their_last_digit():
    table = format_metrics({"accuracy": 82.45, "parameters": "22,713,216", "  paper": "962,302 (0.96M) w/o embeddings",
                            "best epoch": 2}, "distil")
    assert table.splitlines()[2:] == ["accuracy         82.45",
                                      "parameters  22,713,216",
                                      "  paper        962,302 (0.96M) w/o embeddings",
                                      "best epoch           2"]


def test_numpy_scalars_become_plain_floats():
    values = json_safe({"f1": np.float32(0.5), "history": [{"loss": np.float64(1.25)}]})
    assert values == {"f1": 0.5, "history": [{"loss": 1.25}]} and type(values["f1"]) is float
    assert json.dumps(values)
