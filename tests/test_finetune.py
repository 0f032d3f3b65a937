"""finetune.py's command line on a tiny model and tiny data, in seconds:
fine-tuning, predictions in their formats, evaluation, --split-eval, two
processes, and one-line errors. (The library, minibert/finetuning.py:
test_finetuning.py.)"""

import json
import os
import re

import numpy as np
import pytest
import torch

from helpers import assert_the_main_process_alone_reports, one_and_two_process_runs, run_script, run_script_in_process
from minibert.checkpoints import save_pretrained
from minibert.model import BertModel
from minibert.support.files import tokenizer_fingerprint
from minibert.tokenization import load_tokenizer
from tiny_models import FILLER, NEGATIVE, POSITIVE, tiny_config, write_sst2, write_toy_sst2, write_vocab


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    train, dev = write_toy_sst2(root)
    return root, train, dev


@pytest.fixture(scope="module")
def tuned(setup):
    """A fine-tuned folder made by the command line, and its metrics.json."""
    root, train, dev = setup
    done = run_script("finetune.py", "--task", "sst2", "--model", root / "base", "--train", train, "--eval", dev,
                      "--epochs", "3", "--batch-size", "16", "--lr", "3e-3", "--max-seq-len", "32", "--device", "cpu",
                      "--output", root / "run", "--quiet")
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run", json.loads((root / "run" / "metrics.json").read_text())


def test_fine_tuning_writes_the_folder_and_prints_the_best_epoch(tuned):
    folder, metrics = tuned
    assert metrics["task"] == "sst2" and metrics["accuracy"] >= 90.0
    record = json.loads((folder / "task.json").read_text())
    assert record["metrics"]["accuracy"] == metrics["accuracy"] and record["max_seq_len"] == 32
    assert {"config.json", "model.safetensors", "vocab.txt", "task.json"} <= {p.name for p in folder.iterdir()}


def test_predictions_are_jsonl_in_file_order_with_label_and_probs(tuned, setup, tmp_path, capsys):
    folder, _ = tuned
    _, _, dev = setup
    code, _ = run_script_in_process(capsys, "finetune.py", "--model", folder, "--predict", dev,
                                    "--output", tmp_path / "preds.jsonl", "--quiet")
    assert code == 0
    lines = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert len(lines) == 64
    assert all(set(line) == {"label", "probs"} and line["label"] in ("0", "1") for line in lines)
    assert all(abs(sum(line["probs"]) - 1) < 1e-4 for line in lines)
    assert all(line["label"] == str(int(np.argmax(line["probs"]))) for line in lines)


def test_evaluate_command_reports_the_same_accuracy_as_the_best_epoch(tuned, setup, tmp_path, capsys):
    folder, best = tuned
    _, _, dev = setup
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", folder, "--eval", dev,
                                           "--json", tmp_path / "m.json", "--quiet")
    assert code == 0 and "accuracy" in captured.out
    assert json.loads((tmp_path / "m.json").read_text())["accuracy"] == pytest.approx(best["accuracy"])


# ----------------------------------------------------------------------------
# Bad input: a usage error (usage line, exit 2) or one line (exit 1)
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv"],
     "needs --train FILE and --output"),
    (lambda r: ["--model", r / "run", "--eval", r / "dev.tsv", "--predict", r / "dev.tsv"], "give one of"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "y", "--lr", "nan"], "--lr"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "y", "--bogus"], "unrecognized"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "y", "--seed", str(2**64)],
     "--seed: expected an integer in [0, 9223372036854775807]"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "train.tsv"],
     "train.tsv is a file; expected a folder"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "train.tsv" / "x"], "is a file, not"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", "/proc/minibert-run"], "cannot write in"),
    (lambda r: ["--model", r / "run", "--predict", r / "dev.tsv", "--output", r], "is a folder; expected a file"),
    (lambda r: ["--model", r / "run", "--predict", r / "dev.tsv", "--output", r / "dev.tsv" / "p"], "is a file, not"),
    (lambda r: ["--model", r / "run", "--predict", r / "dev.tsv", "--output", "/proc/p.jsonl"], "cannot write in"),
])
def test_usage_errors_print_the_usage_line_and_exit_2(tuned, setup, capsys, make_args, fragment):
    root, _, _ = setup
    code, captured = run_script_in_process(capsys, "finetune.py", *make_args(root), "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 2 and lines[0].startswith("usage: "), captured.err
    assert lines[-1].startswith("error:") and fragment.lower() in lines[-1].lower(), captured.err


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r: ["--task", "snli", "--model", r / "base", "--train", r / "train.tsv", "--output", r / "x"],
     "not an SNLI"),
    (lambda r: ["--model", r / "base", "--eval", r / "dev.tsv"], "not a fine-tuned model folder"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "run"], "already holds"),
])
def test_bad_files_are_one_line_errors_with_exit_1(tuned, setup, capsys, make_args, fragment):
    root, _, _ = setup
    code, captured = run_script_in_process(capsys, "finetune.py", *make_args(root), "--quiet")
    assert code == 1
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment.lower() in lines[0].lower(), captured.err


def test_unknown_label_names_the_file_and_line(setup, tmp_path, capsys):
    root, _, _ = setup
    bad = write_sst2(tmp_path / "bad.tsv", [("a good film", "1"), ("an awful film", "7")])
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "sst2", "--model", root / "base",
                                           "--train", bad, "--output", tmp_path / "out", "--quiet")
    assert code == 1 and str(bad) in captured.err and "line 3" in captured.err


def test_split_eval_holds_out_part_of_the_training_file_and_names_it(setup, tmp_path, capsys):
    root, train, _ = setup
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "sst2", "--model", root / "base",
                                           "--train", train, "--split-eval", "0.25", "--epochs", "1",
                                           "--max-seq-len", "32", "--lr", "3e-3", "--output", tmp_path / "out",
                                           "--quiet")
    assert code == 0, captured.err
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["evaluated_on"] == f"held-out 25% of {train} (seed 0)" and "accuracy" in metrics
    assert f"held-out 25% of {train}" in captured.out
    from minibert.support.task_files import split_examples
    from minibert.tasks.classification import read_sst2
    kept, held_out = split_examples(read_sst2(train), 0.25, 0, group=lambda e: e.text_a)
    assert not {e.text_a for e in kept} & {e.text_a for e in held_out}

    # Evaluating the fine-tuned folder with the same --split-eval scores the same held-out part.
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", tmp_path / "out", "--eval", train,
                                           "--split-eval", "0.25", "--json", tmp_path / "again.json", "--quiet")
    assert code == 0, captured.err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["evaluated_on"] == metrics["evaluated_on"] and again["accuracy"] == metrics["accuracy"]


def test_two_gloo_processes_match_one_process_with_the_same_global_batch(setup, tmp_path):
    root, train, dev = setup
    base = tmp_path / "base"                      # without dropout: the processes draw other masks than one would
    base.mkdir()
    vocab_size = write_vocab(base, [" ".join(POSITIVE + NEGATIVE + FILLER)])
    config = tiny_config(vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    save_pretrained(BertModel(config, with_pooler=False, with_pair_head=False), base)
    args = ["--task", "sst2", "--model", base, "--train", train, "--eval", dev, "--max-steps", "4",
            "--batch-size", "16", "--max-seq-len", "32", "--lr", "3e-3", "--seed", "2", "--device", "cpu", "--quiet",
            "--keep-checkpoint"]                  # the final weights, to compare
    runs = one_and_two_process_runs("finetune.py", args, tmp_path)
    a, b = runs["one"].weights, runs["two"].weights
    assert a.keys() == b.keys()
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-5, name
    assert_the_main_process_alone_reports(runs["two"], tmp_path / "two.json")     # the run acts once
    assert runs["two"].summary["tokens_seen"] == runs["one"].summary["tokens_seen"] > 0


# ----------------------------------------------------------------------------
# No run writes over a model, its own input or a folder it does not own
# ----------------------------------------------------------------------------


def fake_student(folder):
    """The files that make a distill.py student folder (their contents do not matter here)."""
    folder.mkdir()
    for name in ("student.json", "student.safetensors", "vocab.txt"):
        (folder / name).write_text("{}")
    return folder


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r, t: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv", "--output", r / "base"],
     "is the --model"),
    (lambda r, t: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "base"], "holds a pretrained model"),
    (lambda r, t: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv", "--output",
                   fake_student(t / "student")], "holds a distilled student"),
    (lambda r, t: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv", "--output", r / "run" / "sub"],
     "lies inside the model folder"),
    (lambda r, t: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv", "--output", r / "base" / "x"],
     "lies inside the --model folder"),
    (lambda r, t: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv", "--output", t / "new",
                   "--json", r / "base" / "config.json"], "--json"),
    (lambda r, t: ["--model", r / "run", "--predict", r / "dev.tsv", "--output", r / "dev.tsv"], "is the --predict"),
    (lambda r, t: ["--model", r / "run", "--predict", r / "dev.tsv", "--output", r / "run" / "task.json"],
     "lies inside the --model folder"),
    (lambda r, t: ["--model", r / "run", "--predict", r / "dev.tsv", "--output", r / "base" / "config.json"],
     "lies inside the model folder"),
    (lambda r, t: ["--model", r / "run", "--eval", r / "dev.tsv", "--json", r / "run" / "metrics.json"],
     "lies inside the --model folder"),
])
def test_no_output_may_write_over_a_model_or_an_input(tuned, setup, tmp_path, capsys, make_args, fragment):
    root, _, _ = setup
    watched = [root / "base" / "config.json", root / "base" / "model.safetensors", root / "dev.tsv",
               root / "run" / "task.json", root / "run" / "model.safetensors"]
    before = [p.read_bytes() for p in watched]
    code, captured = run_script_in_process(capsys, "finetune.py", *make_args(root, tmp_path), "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and fragment in lines[0], captured.err
    assert [p.read_bytes() for p in watched] == before


def test_the_same_run_may_resume_in_its_own_folder_even_before_its_first_checkpoint(setup, tmp_path, capsys):
    """A run killed before checkpoint.pt was written (its folder may hold the
    first best epoch already) is restarted from step 0 by --resume."""
    root, train, dev = setup
    args = ["--task", "sst2", "--model", root / "base", "--train", train, "--eval", dev, "--max-steps", "2",
            "--batch-size", "16", "--max-seq-len", "32", "--output", tmp_path / "out", "--quiet"]
    code, captured = run_script_in_process(capsys, "finetune.py", *args, "--keep-checkpoint")
    assert code == 0, captured.err
    (tmp_path / "out" / "checkpoint.pt").unlink()          # as if killed while writing it
    code, captured = run_script_in_process(capsys, "finetune.py", *args, "--resume")
    assert code == 0 and "holds no checkpoint.pt (the run stopped before its first one" in captured.out, captured.err


# ----------------------------------------------------------------------------
# --resume refuses a run whose settings differ from the checkpoint's
# ----------------------------------------------------------------------------


def test_resume_with_a_changed_setting_names_the_flag_and_both_values(setup, tmp_path, capsys):
    root, train, dev = setup
    data = tmp_path / "train.tsv"
    data.write_bytes(train.read_bytes())
    args = ["--task", "sst2", "--model", root / "base", "--train", data, "--epochs", "1", "--batch-size", "16",
            "--max-seq-len", "32", "--lr", "3e-3", "--output", tmp_path / "out", "--quiet"]
    code, captured = run_script_in_process(capsys, "finetune.py", *args, "--max-minutes", "1e-9")
    assert code == 0, captured.err                      # stopped after its first step, with a checkpoint
    changed = [(["--lr", "1e-3"], "--lr 0.003, this run has --lr 0.001"),
               (["--warmup", "0.2"], "--warmup 0.1, this run has --warmup 0.2"),
               (["--weight-decay", "0"], "--weight-decay 0.01, this run has --weight-decay 0.0"),
               (["--optimizer", "bert-adam"], "--optimizer 'adamw', this run has --optimizer 'bert-adam'"),
               (["--max-train-examples", "300"], "--max-train-examples None, this run has --max-train-examples 300"),
               (["--sift"], "--sift None, this run has --sift {"),
               (["--bf16"], "--bf16 False, this run has --bf16 True"),
               (["--batch-size", "8"], "--batch-size 16, this run has --batch-size 8"),
               (["--epochs", "2"], "--epochs 1, this run has --epochs 2")]
    for extra, message in changed:
        code, captured = run_script_in_process(capsys, "finetune.py", *args, *extra, "--resume")
        assert code == 1 and message in captured.err, (extra, captured.err)
    data.write_text(data.read_text().replace("\t1\n", "\t0\n", 1))     # the same path, another content
    code, captured = run_script_in_process(capsys, "finetune.py", *args, "--resume")
    assert code == 1 and f"was made with --train '{data} (" in captured.err, captured.err
    assert "this run has --train" in captured.err


# ----------------------------------------------------------------------------
# Bad files and folders: one line, never a traceback
# ----------------------------------------------------------------------------


def copy_of(folder, destination):
    """A fine-tuned folder's model files (not its checkpoint), to tamper with."""
    import shutil
    shutil.copytree(folder, destination, ignore=shutil.ignore_patterns("checkpoint.pt"))
    return destination


def test_an_unlabelled_training_file_is_refused(setup, tmp_path, capsys):
    root, _, _ = setup
    unlabelled = tmp_path / "test.tsv"                # a GLUE test file: index<TAB>sentence
    unlabelled.write_text("index\tsentence\n0\ta good film\n1\tan awful film\n")
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "sst2", "--model", root / "base",
                                           "--train", unlabelled, "--output", tmp_path / "out", "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and f"--train {unlabelled}: not every example has its label" in lines[0]


@pytest.mark.parametrize("labels", [5, [["0"], ["1"]], [], "01"])
def test_task_json_labels_of_the_wrong_type_are_refused(tuned, setup, tmp_path, capsys, labels):
    folder, _ = tuned
    copy = copy_of(folder, tmp_path / "copy")
    record = json.loads((copy / "task.json").read_text())
    (copy / "task.json").write_text(json.dumps({**record, "labels": labels}))
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", copy, "--eval", setup[2], "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "task.json: field 'labels' must be a list of label names" in lines[0]


def test_a_vocabulary_longer_than_the_model_is_refused(tuned, setup, tmp_path, capsys):
    folder, _ = tuned
    copy = copy_of(folder, tmp_path / "copy")
    with open(copy / "vocab.txt", "a") as f:
        f.write("extra1\nextra2\n")
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", copy, "--eval", setup[2], "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "its tokenizer has 66 tokens but config.json says vocab_size 64" \
        in lines[0], captured.err


def test_ensemble_members_must_share_their_vocabulary_not_only_its_size(tuned, setup, tmp_path, capsys):
    folder, _ = tuned
    copy = copy_of(folder, tmp_path / "copy")
    tokens = (copy / "vocab.txt").read_text().splitlines()
    tokens[-1], tokens[-2] = tokens[-2], tokens[-1]              # the same size, two ids swapped
    (copy / "vocab.txt").write_text("\n".join(tokens) + "\n")
    (copy / "tokenizer.json").unlink()        # else the tokenizer loader sees vocab.txt disagree with it first
    code, captured = run_script_in_process(capsys, "finetune.py", "--ensemble", folder, copy, "--eval", setup[2],
                                           "--quiet")
    assert code == 1 and f"{copy}: its tokenizer files (vocab.txt, ...) are not the vocabulary" in captured.err
    record = json.loads((copy / "task.json").read_text())
    del record["vocabulary_fingerprint"]                         # without it the vocabulary cannot be checked
    (copy / "task.json").write_text(json.dumps(record))
    code, captured = run_script_in_process(capsys, "finetune.py", "--ensemble", folder, copy, "--eval", setup[2],
                                           "--quiet")
    assert code == 1 and f"{copy / 'task.json'}: field 'vocabulary_fingerprint' is missing" in captured.err, \
        captured.err
    record["vocabulary_fingerprint"] = tokenizer_fingerprint(load_tokenizer(copy))   # its own, but not the other's
    (copy / "task.json").write_text(json.dumps(record))
    code, captured = run_script_in_process(capsys, "finetune.py", "--ensemble", folder, copy, "--eval", setup[2],
                                           "--quiet")
    assert code == 1 and "has another vocabulary than" in captured.err, captured.err


def test_a_foreign_smaller_vocabulary_in_a_fine_tuned_folder_is_refused(tuned, setup, tmp_path, capsys):
    folder, _ = tuned
    copy = copy_of(folder, tmp_path / "copy")
    tokens = (copy / "vocab.txt").read_text().splitlines()
    (copy / "vocab.txt").write_text("\n".join(tokens[:-3]) + "\n")
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", copy, "--eval", setup[2], "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "its tokenizer has 61 tokens but config.json says vocab_size 64" \
        in lines[0], captured.err


def test_a_loss_that_becomes_nan_stops_the_run_and_saves_nothing(setup, tmp_path, capsys):
    root, train, dev = setup
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "sst2", "--model", root / "base",
                                           "--train", train, "--eval", dev, "--epochs", "1", "--batch-size", "16",
                                           "--max-seq-len", "32", "--lr", "1e30", "--output", tmp_path / "out",
                                           "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "training stopped at step" in lines[0], captured.err
    assert "lower learning rate" in lines[0]
    assert not (tmp_path / "out" / "model.safetensors").exists() and not (tmp_path / "out" / "checkpoint.pt").exists()


def test_json_and_predictions_in_a_missing_folder_are_written_there(tuned, setup, tmp_path, capsys):
    folder, _ = tuned
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", folder, "--predict", setup[2],
                                           "--output", tmp_path / "new" / "p.jsonl", "--quiet")
    assert code == 0 and (tmp_path / "new" / "p.jsonl").is_file(), captured.err
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", folder, "--eval", setup[2],
                                           "--json", tmp_path / "other" / "m.json", "--quiet")
    assert code == 0 and (tmp_path / "other" / "m.json").is_file(), captured.err


def test_a_squad_training_file_with_most_answers_misaligned_is_refused(setup, tmp_path, capsys):
    root, _, _ = setup
    context = "Super Bowl 50 was played in Santa Clara."
    data = {"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": "Where?", "answers": [{"answer_start": 3, "text": "Santa Clara"}]}
        for i in range(3)]}]}]}
    path = tmp_path / "train.json"
    path.write_text(json.dumps(data))
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "squad", "--model", root / "base",
                                           "--train", path, "--output", tmp_path / "out", "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1, captured.err
    assert f"{path}: 3 of 3 answers are not at their answer_start in the context (questions q0, q1, q2" in lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_the_squad_alignment_warning_names_a_piped_file_as_given(setup, tmp_path, capsys):
    import threading
    root, _, _ = setup
    context = "Super Bowl 50 was played in Santa Clara."
    answers = [3, context.index("Santa"), context.index("Santa")]               # q0 misaligned, q1 and q2 right
    data = {"version": "1.1", "data": [{"title": "T", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": "Where?", "answers": [{"answer_start": start, "text": "Santa Clara"}]}
        for i, start in enumerate(answers)]}]}]}
    pipe = tmp_path / "train.json"
    os.mkfifo(pipe)
    writer = threading.Thread(target=lambda: pipe.write_text(json.dumps(data)), daemon=True)
    writer.start()
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "squad", "--model", root / "base",
                                           "--train", pipe, "--max-steps", "1", "--max-seq-len", "64",
                                           "--doc-stride", "16", "--output", tmp_path / "out", "--quiet")
    writer.join(timeout=10)
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert code == 0 and warnings and warnings[0].startswith(f"warning: {pipe}: 1 of 3 answers"), captured.err


# ----------------------------------------------------------------------------
# What a finished run leaves, and what it prints
# ----------------------------------------------------------------------------


def test_a_finished_run_removes_its_checkpoint_unless_keep_checkpoint(setup, tmp_path, capsys):
    root, train, dev = setup
    args = ["--task", "sst2", "--model", root / "base", "--train", train, "--eval", dev, "--max-steps", "2",
            "--batch-size", "16", "--max-seq-len", "32", "--quiet"]
    for name, extra in (("removed", []), ("kept", ["--keep-checkpoint"]), ("stopped", ["--max-minutes", "1e-9"])):
        code, captured = run_script_in_process(capsys, "finetune.py", *args, "--output", tmp_path / name, *extra)
        assert code == 0, captured.err
        # stopped at step 1 of 2, before its epoch ended: no evaluation, so no best epoch to save yet
        assert (tmp_path / name / "model.safetensors").is_file() == (name != "stopped")
    assert not (tmp_path / "removed" / "checkpoint.pt").exists()
    assert torch.load(tmp_path / "kept" / "checkpoint.pt", weights_only=True)["step"] == 2
    assert torch.load(tmp_path / "stopped" / "checkpoint.pt", weights_only=True)["step"] == 1   # to --resume


def test_each_evaluation_line_names_the_eval_file_and_prints_percentages(setup, tmp_path, capsys):
    root, train, dev = setup
    args = ["--task", "sst2", "--model", root / "base", "--train", train, "--max-steps", "2", "--batch-size", "16",
            "--max-seq-len", "32", "--quiet"]
    code, captured = run_script_in_process(capsys, "finetune.py", *args, "--eval", dev, "--output", tmp_path / "a")
    assert code == 0, captured.err
    lines = [line for line in captured.out.splitlines() if line.startswith("step ")]
    assert len(lines) == 1 and re.fullmatch(r"step 2: dev\.tsv accuracy \d+\.\d\d", lines[0]), captured.out
    code, captured = run_script_in_process(capsys, "finetune.py", *args, "--split-eval", "0.25",
                                           "--output", tmp_path / "b")
    assert code == 0, captured.err
    lines = [line for line in captured.out.splitlines() if line.startswith("step ")]
    assert len(lines) == 1 and re.fullmatch(r"step 2: held-out accuracy \d+\.\d\d", lines[0]), captured.out


def test_plot_names_a_model_given_as_a_long_path_by_its_folder(setup, tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (pip install -e '.[plot]')")
    from minibert.support import plots
    root, train, dev = setup
    folder = tmp_path / "a-folder-with-a-long-name" / "experiments" / "seed-0" / "tiny-bert"
    folder.parent.mkdir(parents=True)
    folder.symlink_to(root / "base", target_is_directory=True)
    drawn, plot_epochs = {}, plots.plot_epochs
    monkeypatch.setattr(plots, "plot_epochs", lambda *args: drawn.update(figure=plot_epochs(*args)))
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "sst2", "--model", folder, "--train", train,
                                           "--eval", dev, "--max-steps", "2", "--batch-size", "16", "--max-seq-len",
                                           "32", "--output", tmp_path / "run", "--plot", tmp_path / "sst2.png",
                                           "--quiet")
    assert code == 0, captured.err
    figure = drawn["figure"]
    assert figure.get_suptitle() == "sst2: fine-tuning tiny-bert"
    assert [axes.get_title() for axes in figure.axes] == ["training loss per epoch", "accuracy after each epoch"]
    assert (tmp_path / "sst2.png").read_bytes()[:4] == b"\x89PNG"


def test_finetune_py_names_a_distilled_student_given_as_its_model(tmp_path, capsys):
    from helpers import error_line
    student = tmp_path / "student"
    student.mkdir()
    for name in ("student.json", "student.safetensors", "vocab.txt"):
        (student / name).write_text("{}")
    write_sst2(tmp_path / "train.tsv", [("a good film", "1"), ("a bad plot", "0")])
    for args, expected in [
            (["--task", "sst2", "--model", student, "--train", tmp_path / "train.tsv", "--output", tmp_path / "out"],
             "not a BERT-family encoder; expected a BERT, ALBERT or DeBERTa model folder"),
            (["--model", student, "--eval", tmp_path / "train.tsv"],
             "not a fine-tuned BERT-family model; finetune.py reads finetune.py's folders: evaluate or predict "
             f"with a student through distill.py --student {student}")]:
        code, captured = run_script_in_process(capsys, "finetune.py", *args)
        line = error_line(code, captured)
        assert code == 1 and "a distilled student (distill.py's BiLSTM, student.json)" in line and expected in line
