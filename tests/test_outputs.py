"""minibert.support.outputs: a run is made safe by one call, safe_run. No run
writes over a model folder of any kind, nor over what it reads, unless it is
the same run resuming in its own folder; one run per folder; a dead writer's
leftovers put right; pipes read once. (The scripts' use of it: below,
test_finetune.py and test_distill.py.)
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from minibert.support import MiniBertError
from minibert.support.outputs import (check_output_folder, enclosing_model_folder, file_identity, model_files,
                                      read_record, recover_folder, safe_run, write_folder, write_record)


def checked(**given):
    """safe_run(**given), its lock released at once: what it returns, or its refusal."""
    with safe_run(**given) as run:
        return run


def make_folder(path, *names):
    path.mkdir(parents=True)
    for name in names:
        (path / name).write_text("{}")
    return path


def test_model_folders_are_recognised_by_their_files_not_by_a_lone_json(tmp_path):
    assert model_files(make_folder(tmp_path / "hf", "config.json", "model.safetensors", "vocab.txt")) == \
        ["config.json", "model.safetensors"]
    assert model_files(make_folder(tmp_path / "tf", "bert_config.json", "vocab.txt")) == ["bert_config.json"]
    assert model_files(make_folder(tmp_path / "st", "student.json", "student.safetensors")) == \
        ["student.json", "student.safetensors"]
    assert model_files(make_folder(tmp_path / "results", "student.json", "config.json")) == []   # any program's JSON
    assert model_files(tmp_path / "missing") == []
    assert enclosing_model_folder(tmp_path / "hf" / "a" / "b") == (tmp_path / "hf").resolve()
    assert enclosing_model_folder(tmp_path / "results" / "x") is None


@pytest.mark.parametrize("files,resume,fragment", [
    (("config.json", "model.safetensors", "vocab.txt"), False, "holds a pretrained model"),
    (("config.json", "model.safetensors", "vocab.txt"), True, "holds a pretrained model"),
    (("student.json", "student.safetensors", "vocab.txt"), True, "holds a distilled student"),
    (("task.json", "config.json", "model.safetensors"), False, "already holds a fine-tuned model"),
    (("checkpoint.pt",), False, "holds the checkpoint.pt of an earlier run"),
])
def test_a_training_output_that_holds_a_model_is_refused(tmp_path, files, resume, fragment):
    output = make_folder(tmp_path / "out", *files)
    with pytest.raises(MiniBertError, match=fragment):
        checked(folder=output, record="task.json", resume=resume)


def test_the_same_run_may_resume_in_its_own_folder(tmp_path):
    first_epoch = make_folder(tmp_path / "a", "task.json", "config.json", "model.safetensors", "vocab.txt")
    assert checked(folder=first_epoch, record="task.json", resume=True).resume is False   # no checkpoint yet
    checkpoint_only = make_folder(tmp_path / "b", "checkpoint.pt")
    assert checked(folder=checkpoint_only, record="task.json", resume=True).resume is True
    assert checked(folder=tmp_path / "new", record="task.json").folder == tmp_path / "new"


def test_outputs_apart_from_the_inputs_and_outside_model_folders(tmp_path):
    model = make_folder(tmp_path / "model", "config.json", "model.safetensors", "vocab.txt")
    data = tmp_path / "dev.tsv"
    data.write_text("sentence\tlabel\n")
    inputs = {"--model": model, "--predict": data, "--eval": None, "--teacher": "a-hub-name"}
    for output, fragment in [(model, "is the --model"), (model / "sub", "lies inside the --model folder"),
                             (data, "is the --predict")]:
        with pytest.raises(MiniBertError, match=fragment):
            checked(inputs=inputs, folder=output, record="task.json") if output != data else \
                checked(inputs=inputs, files={"--output": output})
    with pytest.raises(MiniBertError, match="lies inside the model folder"):
        checked(files={"--json": model / "config.json"})
    checked(inputs=inputs, files={"--output": tmp_path / "preds.jsonl"})


def test_a_model_folder_is_written_into_a_new_or_empty_folder_unless_forced(tmp_path):
    make_folder(tmp_path / "full", "x")
    with pytest.raises(MiniBertError, match="--output .*full: folder exists and is not empty; pass --force"):
        check_output_folder(tmp_path / "full")
    assert check_output_folder(tmp_path / "full", force=True) == tmp_path / "full"
    assert check_output_folder(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "file").write_text("x")
    with pytest.raises(MiniBertError, match="file: exists and is not a folder"):
        check_output_folder(tmp_path / "file", force=True)


def test_never_the_folder_of_the_model_copied_nor_inside_or_around_it_even_forced(tmp_path):
    source = make_folder(tmp_path / "models" / "bert", "config.json", "model.safetensors")
    for output, where in ((source, "is"), (source / "deeper", "is inside"), (tmp_path / "models", "holds")):
        with pytest.raises(MiniBertError, match=f": {where} the folder of the model being copied"):
            check_output_folder(output, force=True, source=source)
    with pytest.raises(MiniBertError, match="is the folder of the model being copied"):   # --model FILE too
        check_output_folder(source, force=True, source=source / "config.json")
    assert check_output_folder(tmp_path / "apart", source="a-hub-name") == tmp_path / "apart"


def test_a_resumable_run_keeps_its_checkpoint_for_resume_and_ignores_what_it_says(tmp_path):
    keep = ("cache",)                                         # as train_mlm.py's token cache
    with_checkpoint = make_folder(tmp_path / "run", "checkpoint.pt", "cache")
    assert check_output_folder(with_checkpoint, resume=True, keep=keep) == with_checkpoint
    with pytest.raises(MiniBertError, match="holds the checkpoint of an earlier run; pass --resume"):
        check_output_folder(with_checkpoint, resume=False, keep=keep)
    assert check_output_folder(make_folder(tmp_path / "early", "cache", ".x.1.ab.tmp"), resume=False, keep=keep)
    with pytest.raises(MiniBertError, match=r"folder is not empty \(a, b, c, ...\) and holds no checkpoint"):
        check_output_folder(make_folder(tmp_path / "other", "a", "b", "c", "d", "cache"), resume=False, keep=keep)


def test_file_identity_changes_with_the_content_at_the_same_path(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text("a\t1\n")
    before = file_identity(path)
    path.write_text("a\t0\n")
    assert before.startswith(f"{path} (4 bytes, sha256 ") and file_identity(path) != before
    assert file_identity(None) is None


# ---- every script's --json and --plot, through the same check ---------------


def script_cases(tmp_path):
    from tiny_models import save_tiny_model
    model = tmp_path / "model"
    save_tiny_model(model)
    (tmp_path / "sentences.txt").write_text("the cat sat on the mat .\n")
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat .\n" * 50)
    out = tmp_path / "out"
    return {
        "probe --json over the model's config": (
            "probe.py", ["--model", model, "--json", model / "config.json"], model / "config.json",
            "lies inside the --model folder"),
        "probe --json over its sentences": (
            "probe.py", ["--model", model, "--text", tmp_path / "sentences.txt", "--json", tmp_path / "sentences.txt"],
            tmp_path / "sentences.txt", "is the --text"),
        "duplicate --json over the source model": (
            "duplicate.py", ["--model", model, "--duplicate", "0", "--output", out, "--probe", "--json",
                             model / "config.json"], model / "config.json", "lies inside the --model folder"),
        "duplicate --json into the model it writes": (
            "duplicate.py", ["--model", model, "--duplicate", "0", "--output", out, "--probe", "--json",
                             out / "config.json"], None, "lies inside the --output folder"),
        "train_mlm --json over its corpus": (
            "train_mlm.py", ["--corpus", tmp_path / "corpus.txt", "--output", out, "--json", tmp_path / "corpus.txt"],
            tmp_path / "corpus.txt", "is the --corpus"),
        "train_mlm --json into the model it writes": (
            "train_mlm.py", ["--corpus", tmp_path / "corpus.txt", "--output", out, "--json", out / "config.json"],
            None, "lies inside the --output folder"),
        "train_mlm --json over its vocabulary": (
            "train_mlm.py", ["--corpus", tmp_path / "corpus.txt", "--vocab", model / "vocab.txt", "--output", out,
                             "--json", model / "vocab.txt"], model / "vocab.txt", "is the --vocab"),
        "probe --plot over the model's config": (
            "probe.py", ["--model", model, "--plot", model / "config.json"], model / "config.json",
            "lies inside the --model folder"),
        "duplicate --plot over its sentences": (
            "duplicate.py", ["--model", model, "--duplicate", "0", "--output", out, "--probe", "--text",
                             tmp_path / "sentences.txt", "--plot", tmp_path / "sentences.txt"],
            tmp_path / "sentences.txt", "is the --text"),
        "train_mlm --plot into the model it writes": (
            "train_mlm.py", ["--corpus", tmp_path / "corpus.txt", "--output", out, "--plot", out / "config.json"],
            None, "lies inside the --output folder"),
        "walkthrough --json over the vocabulary": (
            "minibert/walkthrough.py", ["the cat", "--model", model, "--json", model / "vocab.txt"], model / "vocab.txt",
            "lies inside the --model folder"),
    }


@pytest.mark.parametrize("case", ["probe --json over the model's config", "probe --json over its sentences",
                                  "duplicate --json over the source model", "duplicate --json into the model it writes",
                                  "train_mlm --json over its corpus", "train_mlm --json into the model it writes",
                                  "walkthrough --json over the vocabulary", "train_mlm --json over its vocabulary",
                                  "probe --plot over the model's config", "duplicate --plot over its sentences",
                                  "train_mlm --plot into the model it writes"])
def test_no_script_writes_its_json_over_an_input_or_a_model(tmp_path, capsys, case):
    from helpers import run_script_in_process
    script, args, kept, message = script_cases(tmp_path)[case]
    before = kept.read_bytes() if kept else None
    code, captured = run_script_in_process(capsys, script, *args)
    assert code == 1 and captured.err.count("\n") == 1 and message in captured.err, captured.err
    assert (kept.read_bytes() == before) if kept else not (tmp_path / "out").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_json_path_that_is_a_fifo_or_a_link_is_refused_before_the_work(tmp_path, capsys):
    from helpers import run_script_in_process
    from tiny_models import save_tiny_model
    save_tiny_model(tmp_path / "model")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    for target, what in ((tmp_path / "pipe", "not a regular file"), (tmp_path / "link.json", "a symbolic link")):
        code, captured = run_script_in_process(capsys, "probe.py", "--model", tmp_path / "model", "--json", target)
        assert code == 1 and f"--json {target}: {what}" in captured.err, captured.err
    assert (tmp_path / "pipe").is_fifo() and (tmp_path / "link.json").is_symlink()


def test_no_model_is_written_into_what_the_run_reads_or_inside_another_model(tmp_path, capsys):
    from helpers import run_script_in_process
    from tiny_models import save_tiny_model
    save_tiny_model(tmp_path / "model")
    (tmp_path / "model" / "task.json").write_text("{}")                      # a fine-tuned folder
    model_names = [p.name for p in (tmp_path / "model").iterdir()]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "book.txt").write_text("the cat sat on the mat .\n" * 50)
    cases = [("train_mlm.py", ["--corpus", corpus, "--output", corpus, "--force"], "is the --corpus"),
             ("train_mlm.py", ["--corpus", corpus, "--output", tmp_path / "model" / "sub"],
              "lies inside the model folder"),
             ("train_mlm.py", ["--corpus", corpus, "--output", tmp_path / "out", "--cache-dir",
                               tmp_path / "model" / "cache"], "--cache-dir"),
             ("train_mlm.py", ["--corpus", corpus, "--output", tmp_path / "out", "--cache-dir",
                               tmp_path / "model"], "--cache-dir"),
             ("duplicate.py", ["--model", tmp_path / "bare", "--duplicate", "0", "--output",
                               tmp_path / "model" / "deeper"], "lies inside the model folder")]
    save_tiny_model(tmp_path / "bare")
    for script, args, message in cases:
        code, captured = run_script_in_process(capsys, script, *args)
        assert code == 1 and message in captured.err and captured.err.count("\n") == 1, (args, captured.err)
    assert sorted(p.name for p in corpus.iterdir()) == ["book.txt"]
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == sorted(model_names)
    assert not (tmp_path / "model" / "sub").exists() and not (tmp_path / "model" / "deeper").exists()


def test_two_outputs_of_one_run_are_never_one_file_and_a_plot_has_a_format(tmp_path, capsys):
    from helpers import run_script_in_process
    from tiny_models import save_tiny_model
    save_tiny_model(tmp_path / "model")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nthe cat sat\t1\n")
    cases = [("probe.py", ["--model", tmp_path / "model", "--json", tmp_path / "both.png", "--plot",
                           tmp_path / "both.png"], "--plot", "is also the --json this run writes"),
             ("train_mlm.py", ["--corpus", tmp_path / "dev.tsv", "--output", tmp_path / "run", "--json",
                               tmp_path / "both.png", "--plot", tmp_path / "both.png"], "--plot", "is also the --json"),
             ("finetune.py", ["--model", tmp_path / "model", "--predict", tmp_path / "dev.tsv", "--output",
                              tmp_path / "both.png", "--json", tmp_path / "both.png"], "--json",
              "is also the --output"),
             ("probe.py", ["--model", tmp_path / "model", "--plot", tmp_path / "figure.out"], "--plot",
              ".out is no format matplotlib writes")]
    for script, args, flag, message in cases:
        code, captured = run_script_in_process(capsys, script, *args)
        assert code == 1 and captured.err.count("\n") == 1 and f"error: {flag} " in captured.err, captured.err
        assert message in captured.err, captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.tsv", "model"]


def test_an_output_folder_never_holds_a_file_the_run_reads_even_forced(tmp_path, capsys):
    from helpers import run_script_in_process
    from tiny_models import save_tiny_model, write_vocab
    folder = tmp_path / "D"
    folder.mkdir()
    write_vocab(folder)
    (folder / "vocab.txt").write_bytes((folder / "vocab.txt").read_bytes().replace(b"\n", b"\r\n"))   # CRLF stays
    (folder / "config.json").write_text('{"model_type": "bert", "hidden_size": 16, "kept": 1}')
    for place in (folder, tmp_path):
        (place / "corpus.txt").write_text("the cat sat on the mat .\n" * 50)
    (folder / "sentences.txt").write_text("the cat sat on the mat .\n")
    save_tiny_model(tmp_path / "model")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    corpus = ["--corpus", tmp_path / "corpus.txt"]
    cases = [("train_mlm.py", [*corpus, "--vocab", folder / "vocab.txt", "--output", folder, "--force"], "--vocab"),
             ("train_mlm.py", [*corpus, "--config", folder / "config.json", "--output", folder, "--force"],
              "--config"),
             ("train_mlm.py", ["--corpus", folder / "corpus.txt", "--output", folder, "--force"], "--corpus"),
             ("duplicate.py", ["--model", tmp_path / "model", "--duplicate", "0", "--text", folder / "sentences.txt",
                               "--output", folder, "--force"], "--text")]
    for script, args, flag in cases:
        code, captured = run_script_in_process(capsys, script, *args)
        assert code == 1 and captured.err.count("\n") == 1, captured.err
        assert f"--output {folder}: holds the {flag} {folder}/" in captured.err, captured.err
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    data = make_folder(tmp_path / "data", "train.tsv")        # finetune.py and distill.py: the same check
    with pytest.raises(MiniBertError, match=r"--output .*data: holds the --train .*data/train.tsv this run reads"):
        checked(inputs={"--train": data / "train.tsv", "--model": None}, folder=data, record="task.json")
    cache = make_folder(data / "cache")              # a cache the run fills may live in its output
    assert checked(folder=data, record="task.json", caches={"--cache-dir": cache}).folder == data


def test_no_run_writes_into_the_package_or_its_bundled_model_even_forced(tmp_path, capsys):
    from pathlib import Path

    import minibert
    from helpers import run_script_in_process
    package = Path(minibert.__file__).resolve().parent
    bundled = package / "pretrained" / "minibert-gutenberg"
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in bundled.iterdir()}
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat .\n" * 50)
    cases = [("train_mlm.py", ["--corpus", tmp_path / "corpus.txt", "--output", bundled, "--force"], "lies inside"),
             ("duplicate.py", ["--duplicate", "0", "--output", bundled, "--force"], "lies inside"),
             ("duplicate.py", ["--duplicate", "0", "--output", package.parent, "--force"], "holds"),
             ("probe.py", ["--json", package / "probe.json"], "lies inside")]
    for script, args, where in cases:
        code, captured = run_script_in_process(capsys, script, *args)
        assert code == 1 and captured.err.count("\n") == 1, captured.err
        assert f"{where} the minibert package" in captured.err and "--force does not allow" in captured.err
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in bundled.iterdir()} == before
    assert not (package / "probe.json").exists()


# ---- one run per output folder ---------------------------------------------

HOLDER = ("import sys, time\nfrom minibert.support.outputs import safe_run\n"
          "safe_run(folder=sys.argv[1])\nprint('locked', flush=True)\ntime.sleep(60)")


def hold(folder):
    """Another process that holds `folder` (safe_run's lock) until it is killed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


def test_a_second_run_on_a_locked_folder_stops_with_one_line_and_the_lock_goes_at_the_end(tmp_path):
    from minibert.support.outputs import HELD_LOCKS, release_locks
    holder = hold(tmp_path / "out")
    try:
        with pytest.raises(MiniBertError, match=rf"--output .*out: another run \(PID {holder.pid}\) is writing this "
                                                r"folder; wait for it to end, or choose another folder"):
            safe_run(folder=tmp_path / "out")
    finally:
        holder.kill()
        holder.wait()
    safe_run(folder=tmp_path / "out")            # the system released the dead run's lock
    assert len(HELD_LOCKS) == 1 and (tmp_path / ".out.lock").read_text() == f"{os.getpid()}\n"
    release_locks()
    assert HELD_LOCKS == [] and not (tmp_path / ".out.lock").exists()


@pytest.mark.parametrize("script", ["train_mlm.py", "duplicate.py", "finetune.py", "distill.py"])
def test_two_runs_on_one_output_the_second_stops_before_any_work(tmp_path, capsys, script):
    from helpers import run_script_in_process
    from tiny_models import save_tiny_model
    save_tiny_model(tmp_path / "model")
    (tmp_path / "corpus.txt").write_text("the cat sat on the mat .\n" * 50)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nthe cat sat\t1\nthe mat\t0\n")
    args = {"train_mlm.py": ["--corpus", tmp_path / "corpus.txt", "--steps", "1"],
            "duplicate.py": ["--model", tmp_path / "model", "--duplicate", "0"],
            "finetune.py": ["--task", "sst2", "--model", tmp_path / "model", "--train", tmp_path / "train.tsv"],
            "distill.py": ["--no-teacher", "--task", "sst2", "--train", tmp_path / "train.tsv"]}[script]
    holder = hold(tmp_path / "out")
    try:
        code, captured = run_script_in_process(capsys, script, *args, "--output", tmp_path / "out")
    finally:
        holder.kill()
        holder.wait()
    assert code == 1 and f"another run (PID {holder.pid}) is writing this folder" in captured.err, captured.err
    assert not (tmp_path / "out").exists()                     # the second run wrote nothing


def test_the_lock_is_filelocks_so_any_filelock_user_and_a_run_exclude_each_other(tmp_path):
    """The lock is filelock's (an flock here, msvcrt's on Windows): a process holding
    `.out.lock` through filelock keeps a run out, and a run's lock keeps filelock out."""
    import filelock
    from minibert.support.outputs import release_locks
    other = filelock.FileLock(tmp_path / ".out.lock", timeout=0)
    holder = subprocess.Popen([sys.executable, "-c", "import filelock, sys, time\n"
                               "held = filelock.FileLock(sys.argv[1], timeout=0)\nheld.acquire()\n"
                               "print('locked', flush=True)\n"
                               "time.sleep(60)", str(tmp_path / ".out.lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(MiniBertError, match=r"another run \(PID unknown\) is writing this folder"):
            safe_run(folder=tmp_path / "out")        # filelock's holder wrote no PID
    finally:
        holder.kill()
        holder.wait()
    safe_run(folder=tmp_path / "out")
    try:
        with pytest.raises(filelock.Timeout):
            other.acquire()
    finally:
        release_locks()
    assert not (tmp_path / ".out.lock").exists()


def test_a_folder_named_through_a_link_has_the_same_lock(tmp_path):
    from minibert.support.outputs import HELD_LOCKS, release_locks
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    safe_run(folder=tmp_path / "link")
    try:
        with pytest.raises(MiniBertError, match=f"another run \\(PID {os.getpid()}\\) is writing this folder"):
            safe_run(folder=tmp_path / "sub" / ".." / "real")
    finally:
        release_locks()
    assert HELD_LOCKS == [] and sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_a_lock_that_cannot_be_written_on_a_full_disk_is_one_line_and_leaves_no_lock_file(tmp_path, monkeypatch):
    import errno
    from minibert.support import outputs

    def full_disk(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(outputs.os, "write", full_disk)
    with pytest.raises(MiniBertError) as caught:
        outputs.safe_run(folder=tmp_path / "out")
    monkeypatch.undo()
    assert str(caught.value) == (f"--output {tmp_path / 'out'}: cannot write its lock file {tmp_path / '.out.lock'} "
                                 f"(No space left on device); free some space there, or choose another folder")
    assert outputs.HELD_LOCKS == [] and sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_refused_run_frees_its_folder_at_once(tmp_path):
    from minibert.support.outputs import HELD_LOCKS
    make_folder(tmp_path / "out", "task.json", "config.json", "model.safetensors")
    with pytest.raises(MiniBertError, match="already holds a fine-tuned model"):
        safe_run(folder=tmp_path / "out", record="task.json")
    assert HELD_LOCKS == [] and not (tmp_path / ".out.lock").exists()


# ---- a new script gets every guarantee from the one call ---------------------

NEW_SCRIPT = '''
"""A script that writes: it reads --model and --data, writes --output and --json."""
import argparse, sys, time
from pathlib import Path
from minibert.support.cli import run, script_main
from minibert.support.outputs import safe_run


@script_main
def main(argv=None):
    p = argparse.ArgumentParser()
    for flag in ("--model", "--data", "--output", "--json", "--plot"):
        p.add_argument(flag)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--wait", action="store_true")
    args = p.parse_args(argv)
    safe = safe_run(inputs={"--model": args.model}, data={"--data": args.data}, folder=args.output,
                    record="task.json", resume=args.resume, files={"--json": args.json, "--plot": args.plot})
    if args.wait:
        print("working", flush=True)
        time.sleep(60)
    data = safe.data["--data"]
    first, second = Path(data).read_text(), Path(data).read_text()       # read twice, as a run does
    (Path(args.output) / "task.json").parent.mkdir(parents=True, exist_ok=True)
    (Path(args.output) / "task.json").write_text(f"read {first!r} then {second!r}, resume {safe.resume}")

run(main)
'''


def test_a_new_script_that_calls_safe_run_gets_every_guarantee(tmp_path):
    from pathlib import Path

    import minibert
    from helpers import REPO
    from tiny_models import save_tiny_model
    script = tmp_path / "new_script.py"
    script.write_text(NEW_SCRIPT)
    model, data = tmp_path / "model", tmp_path / "data.txt"
    save_tiny_model(model)
    data.write_text("the cat sat")
    bundled = Path(minibert.__file__).resolve().parent / "pretrained" / "minibert-gutenberg"
    env = {**os.environ, "PYTHONPATH": str(REPO)}          # this checkout's minibert

    def new_script(*args, stdin=None):
        given = ["--model", model, "--data", data, *args]
        done = subprocess.run([sys.executable, script, *map(str, given)], input=stdin, capture_output=True,
                              text=True, timeout=60, env=env)
        return done.returncode, done.stderr
    for args, message in [
            (["--output", tmp_path / "out", "--json", data], f"--json {data}: is the --data {data} this run reads"),
            (["--output", model], f"--output {model}: is the --model {model} this run reads"),
            (["--output", model / "sub"], f"--output {model / 'sub'}: lies inside the --model folder {model}"),
            (["--output", bundled / "sub"], f"--output {bundled / 'sub'}: lies inside the minibert package"),
            (["--output", tmp_path / "out", "--json", tmp_path / "r.png", "--plot", tmp_path / "r.png"],
             f"--plot {tmp_path / 'r.png'}: is also the --json this run writes"),
            (["--output", tmp_path / "out", "--json", tmp_path / "out" / "r.json"],
             f"--json {tmp_path / 'out' / 'r.json'}: lies inside the --output folder")]:
        code, err = new_script(*args)
        assert code == 1 and err.startswith(f"error: {message}") and err.count("\n") == 1, (args, err)
    assert not (tmp_path / "out").exists() and not (model / "sub").exists() and data.read_text() == "the cat sat"

    holder = subprocess.Popen([sys.executable, script, "--model", model, "--data", data, "--output",
                               tmp_path / "out", "--wait"], stdout=subprocess.PIPE, text=True, env=env)
    try:                                                   # a second run on the same folder, while the first works
        assert holder.stdout.readline() == "working\n"
        code, err = new_script("--output", tmp_path / "out")
    finally:
        holder.kill()
        holder.wait()
    assert code == 1 and f"another run (PID {holder.pid}) is writing this folder" in err, err

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(dead.stdout)                                 # a writer that was killed left these
    (tmp_path / f".out.{dead}.0a0b.tmp").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / f".task.json.{dead}.00ff.tmp").write_text("half")
    code, err = new_script("--output", tmp_path / "out", "--data", "/dev/stdin", stdin="piped text")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt", "model", "new_script.py", "out"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["task.json"]
    assert (tmp_path / "out" / "task.json").read_text() == "read 'piped text' then 'piped text', resume False"

    (tmp_path / "out" / "checkpoint.pt").write_text("")         # a run stopped early: --resume continues it
    code, err = new_script("--output", tmp_path / "out")
    assert code == 1 and "holds the checkpoint.pt of an earlier run; choose another folder (or --resume" in err, err
    code, err = new_script("--output", tmp_path / "out", "--resume")
    assert code == 0 and (tmp_path / "out" / "task.json").read_text().endswith("resume True"), err


def test_a_model_folders_kind_is_named_by_the_files_that_mark_it(tmp_path):
    from minibert.support.outputs import describe_model_folder, model_folder_kind
    pretrained = make_folder(tmp_path / "base", "config.json", "model.safetensors", "vocab.txt")
    tuned = make_folder(tmp_path / "tuned", "config.json", "model.safetensors", "vocab.txt")
    (tuned / "task.json").write_text('{"task": "sst2", "max_seq_len": 32}')
    student = make_folder(tmp_path / "student", "student.json", "student.safetensors", "vocab.txt")
    damaged = make_folder(tmp_path / "damaged", "config.json", "model.safetensors")
    (damaged / "task.json").write_text("{not json")
    plain = make_folder(tmp_path / "plain", "notes.txt")
    assert [model_folder_kind(f) for f in (pretrained, tuned, student, damaged, plain, tmp_path / "none")] == [
        "pretrained", "fine-tuned", "student", "fine-tuned", None, None]
    assert describe_model_folder(tuned) == "a fine-tuned sst2 model (finetune.py's, task.json)"
    assert describe_model_folder(damaged) == "a fine-tuned model (finetune.py's, task.json)"    # the kind still
    assert describe_model_folder(student) == "a distilled student (distill.py's BiLSTM, student.json)"
    assert describe_model_folder(pretrained) == "a pretrained model"
    assert describe_model_folder(plain) == "not a model folder"


# ==============================================================================
# minibert/support/outputs.py: a JSON record, written atomically, read
# back with one-line errors; a model folder written as one unit, so that a
# writer killed at any point leaves one whole folder (the old or the new)
# with the run's checkpoint, and its leftovers are put right by the next run.
# ==============================================================================

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
    from minibert.support import outputs
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

    real_replace, outputs.os.replace = os.replace, replace
    if kill_at == "before the checkpoint is carried over":
        outputs.carry_over = lambda old, new, leave_behind=(): os.kill(os.getpid(), signal.SIGKILL)
    outputs.write_folder(folder, write_into)
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
    from minibert.support.files import atomic_write
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
    from minibert.support.outputs import restore_interrupted
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
    from minibert.support.outputs import read_as_one
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
