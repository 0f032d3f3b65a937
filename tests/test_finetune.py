"""finetune.py's command line on a tiny model and tiny data, in seconds:
fine-tuning, predictions in their formats, evaluation, --split-eval, two
processes, and one-line errors. (The library, minibert/finetuning.py:
test_finetuning.py.)"""

import json

import numpy as np
import pytest
import torch

from helpers import run_script, run_script_in_process
from minibert.checkpoints import save_pretrained
from minibert.model import BertModel
from tiny_models import FILLER, NEGATIVE, POSITIVE, sentiment_rows, tiny_config, write_sst2, write_vocab


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune")
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)             # Google's initialisation; no pooler, like the bundled model
    save_pretrained(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False), root / "base")
    train = write_sst2(root / "train.tsv", sentiment_rows(320, seed=0))
    dev = write_sst2(root / "dev.tsv", sentiment_rows(64, seed=1))
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
    assert {"config.json", "model.safetensors", "vocab.txt", "head.safetensors"} <= {p.name for p in folder.iterdir()}


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
# Bad input: one line, exit 1
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r: ["--task", "sst2", "--model", r / "base", "--train", r / "train.tsv"], "needs --train FILE and --output"),
    (lambda r: ["--task", "snli", "--model", r / "base", "--train", r / "train.tsv", "--output", r / "x"],
     "not an SNLI"),
    (lambda r: ["--model", r / "base", "--eval", r / "dev.tsv"], "not a fine-tuned model folder"),
    (lambda r: ["--model", r / "run", "--eval", r / "dev.tsv", "--predict", r / "dev.tsv"], "give one of"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "y", "--lr", "nan"], "--lr"),
    (lambda r: ["--task", "sst2", "--train", r / "train.tsv", "--output", r / "run"], "already holds"),
])
def test_bad_command_lines_are_one_line_errors(tuned, setup, capsys, make_args, fragment):
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
    from minibert.tasks.readers import read_sst2, split_examples
    kept, held_out = split_examples(read_sst2(train), 0.25, 0, group=lambda e: e.text_a)
    assert not {e.text_a for e in kept} & {e.text_a for e in held_out}

    # Evaluating the fine-tuned folder with the same --split-eval scores the same held-out part.
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", tmp_path / "out", "--eval", train,
                                           "--split-eval", "0.25", "--json", tmp_path / "again.json", "--quiet")
    assert code == 0, captured.err
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["evaluated_on"] == metrics["evaluated_on"] and again["accuracy"] == metrics["accuracy"]


def test_two_gloo_processes_match_one_process_with_the_same_global_batch(setup, tmp_path):
    import os
    import subprocess
    import sys
    from helpers import REPO
    root, train, dev = setup
    base = tmp_path / "base"                      # without dropout: the processes draw other masks than one would
    base.mkdir()
    vocab_size = write_vocab(base, [" ".join(POSITIVE + NEGATIVE + FILLER)])
    config = tiny_config(vocab_size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    save_pretrained(BertModel(config, with_pooler=False, with_pair_head=False), base)
    args = ["--task", "sst2", "--model", base, "--train", train, "--eval", dev, "--max-steps", "4",
            "--batch-size", "16", "--max-seq-len", "32", "--lr", "3e-3", "--seed", "2", "--device", "cpu", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = {"one": [sys.executable, str(REPO / "finetune.py")],
            "two": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                    str(REPO / "finetune.py")]}
    for name, command in runs.items():
        done = subprocess.run([*command, *map(str, args), "--output", str(tmp_path / name)], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    a = torch.load(tmp_path / "one" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "two" / "checkpoint.pt", weights_only=True)["model"]
    assert a.keys() == b.keys()
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-5, name
