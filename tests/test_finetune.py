"""finetune.py and minibert/finetuning.py on a tiny model and tiny data, in
seconds: batching, the sentence(-pair) classification task end to end,
predictions in their formats, ensembles, resume, and one-line errors."""

import json
import random

import numpy as np
import pytest
import torch

from minibert import finetuning
from minibert.tasks import make_task
from minibert.tasks.classification import ClassificationTask
from helpers import run_script_in_process
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


def tune(setup, output, **kwargs):
    root, train, dev = setup
    task = ClassificationTask("sst2")
    options = dict(epochs=3, batch_size=16, learning_rate=3e-3, warmup=0.1, seed=0, progress=False, max_seq_len=32)
    options.update(kwargs)
    return finetuning.fine_tune(task, root / "base", task.read(train), task.read(dev), output, **options)


@pytest.fixture(scope="module")
def tuned(setup):
    root, _, _ = setup
    summary = tune(setup, root / "run", epochs=4)
    return root / "run", summary


# ----------------------------------------------------------------------------
# Batching
# ----------------------------------------------------------------------------


def test_length_grouped_batches_cover_every_feature_once_per_epoch_with_little_padding():
    rng = random.Random(0)
    features = [{"input_ids": [1] * rng.randint(3, 60), "token_type_ids": [0], "labels": 0, "example": i}
                for i in range(500)]
    for f in features:
        f["token_type_ids"] = [0] * len(f["input_ids"])
    batches = finetuning.LengthGroupedBatches(features, batch_size=10, seed=3, pad_id=0, group_size=5)
    assert len(batches) == 50
    seen = sorted(i for b in batches.epoch_batches(0) for i in b)
    assert seen == list(range(500))
    grouped = sum(int(batches[i]["attention_mask"].numel()) for i in range(50))
    shuffled = sum(10 * max(len(features[j]["input_ids"]) for j in range(i, i + 10)) for i in range(0, 500, 10))
    assert grouped < 0.7 * shuffled                        # far less padding than plain shuffled batches
    assert batches.epoch_batches(1) != batches.epoch_batches(0)           # a new order each epoch
    assert batches.epoch_batches(1) == finetuning.LengthGroupedBatches(
        features, 10, 3, 0, group_size=5).epoch_batches(1)               # ... a function of (seed, epoch)


def test_collate_pads_ids_with_pad_id_and_token_targets_with_minus_100():
    batch = finetuning.collate([{"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "labels": [-100, 1, -100],
                                 "example": 0, "_private": "x"},
                                {"input_ids": [2, 3], "token_type_ids": [0, 0], "labels": [-100, -100],
                                 "example": 1, "_private": "y"}], pad_id=0)
    assert batch["input_ids"].tolist() == [[2, 7, 3], [2, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[-100, 1, -100], [-100, -100, -100]]
    assert "_private" not in batch and "example" not in batch


# ----------------------------------------------------------------------------
# Classification end to end
# ----------------------------------------------------------------------------


def test_fine_tuning_learns_the_toy_task_and_keeps_the_best_epoch(tuned):
    folder, summary = tuned
    accuracies = [epoch["accuracy"] for epoch in summary["epochs_history"]]
    assert len(accuracies) == 4
    assert max(accuracies) >= 90.0
    assert summary["best"]["accuracy"] == max(accuracies)
    record = json.loads((folder / "task.json").read_text())
    assert record["task"] == "sst2" and record["labels"] == ["0", "1"] and record["metrics"]["accuracy"] == max(accuracies)
    assert {"config.json", "model.safetensors", "vocab.txt", "head.safetensors"} <= {p.name for p in folder.iterdir()}


def test_a_checkpoint_without_pooler_gets_a_fresh_one_named_in_the_load_report(setup):
    root, _, _ = setup
    from minibert.checkpoints import load_pretrained
    encoder = load_pretrained(root / "base")
    assert encoder.pooler is None
    assert finetuning.add_pooler_if_missing(encoder) is True
    assert encoder.pooler is not None
    assert ("pooler.dense", "not in the checkpoint: freshly initialised for fine-tuning") in encoder.load_report.skipped
    assert finetuning.add_pooler_if_missing(encoder) is False          # a second call keeps the first pooler


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
    folder, summary = tuned
    _, _, dev = setup
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", folder, "--eval", dev,
                                           "--json", tmp_path / "m.json", "--quiet")
    assert code == 0 and "accuracy" in captured.out
    assert json.loads((tmp_path / "m.json").read_text())["accuracy"] == pytest.approx(summary["best"]["accuracy"])


def test_an_ensemble_of_two_averages_the_members_probabilities(tuned, setup, tmp_path):
    folder, _ = tuned
    root, _, dev = setup
    other = root / "run_seed1"
    if not other.exists():
        tune(setup, other, seed=1, epochs=1)
    task_a, examples, single_a = finetuning.predict([folder], dev, make_task, progress=False)
    _, _, single_b = finetuning.predict([other], dev, make_task, progress=False)
    _, _, both = finetuning.predict([folder, other], dev, make_task, progress=False)
    for (_, a), (_, b), (label, averaged) in zip(single_a, single_b, both):
        assert np.allclose(averaged, (a + b) / 2, atol=1e-6)
        assert label == task_a.labels[int(np.argmax(averaged))]


def test_killed_and_resumed_run_ends_with_the_same_weights(setup, tmp_path):
    straight = tune(setup, tmp_path / "straight", epochs=1)
    tune(setup, tmp_path / "resumed", epochs=1, max_minutes=1e-9)         # stops after its first step
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["step"] == 1
    tune(setup, tmp_path / "resumed", epochs=1, resume=True)
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["model"]
    assert straight["end_step"] == 20
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sentence_pairs_are_packed_as_two_segments(setup):
    root, _, _ = setup
    from minibert.tasks.readers import ClassificationExample
    from minibert.tokenization import load_tokenizer
    task = ClassificationTask("mrpc")
    example = ClassificationExample("good film", "bad plot", "1", None, 2)
    (feature,) = task.features([example], load_tokenizer(root / "base"), max_seq_len=16)
    assert feature["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1] and feature["labels"] == 1


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
