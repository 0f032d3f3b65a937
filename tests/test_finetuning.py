"""minibert/finetuning.py and its run (minibert/commands/finetune.py) on a tiny
model and tiny data, in seconds: the run's steps are training.training_step, batching with its collate hook, run_model,
the best-epoch rule, the sentence classification run end to end, the saved
folder, ensembles and resume. (finetune.py's command line: test_finetune.py.)"""

import copy
import json
import random
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from minibert import finetuning
from minibert.commands import finetune as finetune_command
from minibert import heads
from minibert.checkpoints import load_pretrained
from minibert.heads import IGNORE_INDEX
from minibert.model import BertModel
from minibert.support import MiniBertError
from minibert.support.runtime import seed_from
from minibert.tasks import make_task
from minibert.tasks.classification import ClassificationTask
from minibert.training import make_optimizer, training_step, warmup_then_linear_decay
from minibert.commands.trainer import TrainingConfig, setup_context, train
from tiny_models import random_batch, tiny_config, write_toy_sst2


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetuning")
    train_file, dev = write_toy_sst2(root)
    return root, train_file, dev


def tune(setup, output, **kwargs):
    root, train_file, dev = setup
    task = ClassificationTask("sst2")
    options = dict(epochs=3, batch_size=16, learning_rate=3e-3, warmup=0.1, seed=0, progress=False, max_seq_len=32)
    options.update(kwargs)
    return finetune_command.fine_tune(task, root / "base", task.read(train_file), task.read(dev), output, **options)


@pytest.fixture(scope="module")
def tuned(setup):
    root, _, _ = setup
    summary = tune(setup, root / "run", epochs=4)
    return root / "run", summary


def tiny_classifier(seed=0, vocab_size=40):
    torch.manual_seed(seed)
    base_model = BertModel(tiny_config(vocab_size), with_mlm_head=False, with_pair_head=False)
    task = ClassificationTask("sst2")
    return finetuning.TaskModel(base_model, task.make_head(base_model.config)), task


def sst2_batches(count, seed=0, vocab_size=40):
    batches = []
    for i in range(count):
        input_ids, attention_mask, token_type_ids = random_batch(vocab_size, batch=3, length=11, seed=seed + i)
        batches.append({"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                        "labels": torch.tensor([0, 1, 1])})
    return batches


# ----------------------------------------------------------------------------
# The step written out
# ----------------------------------------------------------------------------


def test_three_training_steps_by_hand_give_the_weights_the_run_gives():
    # The run (commands.trainer.train) takes the lesson's training_step once per
    # step: three calls by hand, with the run's dropout seeds, give its weights.
    looped, task = tiny_classifier()
    stepped = copy.deepcopy(looped)
    batches = sst2_batches(3)
    config = TrainingConfig(total_steps=3, learning_rate=1e-3, weight_decay=0.01, warmup_steps=1, seed=5)
    with tempfile.TemporaryDirectory() as folder:
        train(looped, batches, finetuning.Objective(task), config, setup_context("cpu"),
              Path(folder) / "checkpoint.pt", progress=False)

    optimizer = make_optimizer(stepped, learning_rate=1e-3, weight_decay=0.01)
    scheduler = warmup_then_linear_decay(optimizer, warmup_steps=1, total_steps=3)
    losses = []
    for step, batch in enumerate(batches):
        torch.manual_seed(seed_from(5, "dropout", step, 0))        # commands.trainer.train's dropout seed of this step
        stats = training_step(stepped, [batch], finetuning.Objective(task), optimizer, scheduler, max_grad_norm=1.0)
        losses.append(stats["classification"][0].item() / 3)         # the summed loss over the batch's 3 sentences

    assert all(np.isfinite(losses)) and losses[0] == pytest.approx(np.log(2), abs=0.1)   # a fresh head: about ln 2
    for (name, a), (_, b) in zip(looped.named_parameters(), stepped.named_parameters()):
        assert torch.equal(a, b), name
    assert any((a != b).any() for a, b in zip(looped.parameters(), tiny_classifier()[0].parameters()))  # it moved


# ----------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------


def test_the_task_model_drops_what_fine_tuning_does_not_train():
    base_model = BertModel(tiny_config(40), with_pooler=True, with_mlm_head=True, with_pair_head=True)
    model = finetuning.TaskModel(base_model, ClassificationTask("sst2").make_head(base_model.config))
    assert model.base_model.mlm_head is None and model.base_model.pair_head is None
    assert model.base_model.pooler is not None                       # a sentence head reads it
    token_model = finetuning.TaskModel(BertModel(tiny_config(40)), make_task("conll2003", labels=["O"]).make_head(
        base_model.config), uses_pooler=False)
    assert token_model.base_model.pooler is None


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


def test_length_grouped_batches_collate_with_the_given_hook():
    features = [{"input_ids": [1] * n, "token_type_ids": [0] * n} for n in (3, 5, 4, 2)]
    seen = []

    def count_rows(batch_features, pad_id):
        seen.append(pad_id)
        return {"rows": len(batch_features), "lengths": sorted(len(f["input_ids"]) for f in batch_features)}

    batches = finetuning.LengthGroupedBatches(features, batch_size=2, seed=0, pad_id=9, collate=count_rows)
    collated = [batches[i] for i in range(len(batches))]
    assert [b["rows"] for b in collated] == [2, 2] and seen == [9, 9]
    assert sorted(length for b in collated for length in b["lengths"]) == [2, 3, 4, 5]


def test_collate_pads_ids_with_pad_id_and_token_targets_with_the_ignore_index():
    x = IGNORE_INDEX
    batch = finetuning.collate([{"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 0], "labels": [x, 1, x],
                                 "example": 0, "_private": "x"},
                                {"input_ids": [2, 3], "token_type_ids": [0, 0], "labels": [x, x],
                                 "example": 1, "_private": "y"}], pad_id=0)
    assert batch["input_ids"].tolist() == [[2, 7, 3], [2, 3, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[x, 1, x], [x, x, x]]              # the third label: padding
    assert "_private" not in batch and "example" not in batch


# ----------------------------------------------------------------------------
# run_model and the best-epoch rule
# ----------------------------------------------------------------------------


def test_run_model_gives_one_output_per_feature_in_their_order():
    model, task = tiny_classifier()
    features = [{"input_ids": [2] + [7] * n + [3], "token_type_ids": [0] * (n + 2)} for n in (1, 6, 3, 9, 2)]
    probabilities = finetuning.run_model(model, features, 0, task.outputs, batch_size=2, progress=False)
    one_by_one = [finetuning.run_model(model, [f], 0, task.outputs, progress=False)[0] for f in features]
    assert len(probabilities) == 5
    for batched, alone in zip(probabilities, one_by_one):
        np.testing.assert_allclose(batched, alone, atol=1e-5)           # padding changes nothing

    lengths = finetuning.run_model(model, features, 0, lambda logits, batch: batch["attention_mask"].sum(-1).tolist(),
                                   batch_size=2, progress=False,
                                   logits_of=lambda model, batch: batch["input_ids"])   # no forward at all
    assert lengths == [3, 8, 5, 11, 4]


def test_best_epoch_saves_only_when_the_main_metric_improves():
    scores = iter([70.0, 80.0, 75.0, 81.0])
    saved = []
    best = finetune_command.BestEpoch("accuracy", evaluate=lambda model: {"accuracy": next(scores), "model": model},
                                save=lambda model, metrics: saved.append((model, metrics["accuracy"])))
    assert best.best is None
    assert [best(f"epoch{i}") for i in range(4)] == [{"accuracy": v} for v in (70.0, 80.0, 75.0, 81.0)]
    assert saved == [("epoch0", 70.0), ("epoch1", 80.0), ("epoch3", 81.0)]
    assert [m["accuracy"] for m in best.history] == [70.0, 80.0, 75.0, 81.0] and best.best["accuracy"] == 81.0

    resumed = finetune_command.BestEpoch("accuracy", evaluate=lambda model: {"accuracy": 79.0},
                                   save=lambda model, metrics: saved.append(model), previous={"accuracy": 80.0})
    resumed("epoch4")
    assert saved[-1] == ("epoch3", 81.0) and resumed.best == {"accuracy": 80.0}   # 79 does not beat the saved 80


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
    assert {"config.json", "model.safetensors", "vocab.txt", "task.json"} <= {p.name for p in folder.iterdir()}
    assert not (folder / "head.safetensors").exists()                  # the head is in model.safetensors


def test_a_checkpoint_without_pooler_gets_a_fresh_one_named_in_the_load_report(setup):
    root, _, _ = setup
    base_model = load_pretrained(root / "base")
    assert base_model.pooler is None
    assert heads.add_pooler_if_missing(base_model) is True
    assert base_model.pooler is not None
    assert ("pooler.dense", "not in the checkpoint: freshly initialised for fine-tuning") in base_model.load_report.skipped
    assert heads.add_pooler_if_missing(base_model) is False          # a second call keeps the first pooler


def test_the_saved_folder_loads_back_to_the_same_outputs(tuned, setup):
    folder, _ = tuned
    _, _, dev = setup
    model, task, tokenizer, record = finetune_command.load_task_model(folder, make_task)
    assert task.name == "sst2" and record["max_seq_len"] == 32
    features = task.features(task.read(dev), tokenizer, 32)
    again, *_ = finetune_command.load_task_model(folder, make_task)
    a = finetuning.run_model(model, features, tokenizer.pad_id, task.outputs, progress=False)
    b = finetuning.run_model(again, features, tokenizer.pad_id, task.outputs, progress=False)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_folder_whose_vocabulary_was_replaced_does_not_load(tuned, tmp_path):
    """load_task_model checks the tokenizer against task.json's fingerprint, so
    every reader of a fine-tuned folder (predict, an ensemble, distill.py's
    teacher) refuses another vocabulary, even one of the same size."""
    import shutil
    folder, _ = tuned
    copy = Path(shutil.copytree(folder, tmp_path / "copy"))
    tokens = (copy / "vocab.txt").read_text().splitlines()
    tokens[-1], tokens[-2] = tokens[-2], tokens[-1]              # the same size, two ids swapped
    (copy / "vocab.txt").write_text("\n".join(tokens) + "\n")
    with pytest.raises(MiniBertError, match="vocab.txt and tokenizer.json hold different vocabularies"):
        finetune_command.load_task_model(copy, make_task)          # the tokenizer loader sees it first
    (copy / "tokenizer.json").unlink()
    with pytest.raises(MiniBertError, match="are not the vocabulary it was fine-tuned with"):
        finetune_command.load_task_model(copy, make_task)


def test_a_head_of_another_shape_or_a_plain_folder_is_a_one_line_error(tuned, setup, tmp_path):
    folder, _ = tuned
    root, _, _ = setup
    with pytest.raises(MiniBertError, match="not a fine-tuned model folder"):
        finetune_command.read_task_record(root / "base")
    with pytest.raises(MiniBertError, match=r"model.safetensors: does not fit the sst2 head with 3 labels "
                                           r"\(classifier.weight has shape \[2, 32\], the head needs \[3, 32\]\)"):
        finetune_command.load_task_model(folder, lambda name, labels, settings: make_task("snli"))


def test_an_ensemble_of_two_averages_the_members_probabilities(tuned, setup):
    folder, _ = tuned
    root, _, dev = setup
    other = root / "run_seed1"
    if not other.exists():
        tune(setup, other, seed=1, epochs=1)
    task_a, examples, single_a = finetune_command.predict([folder], dev, make_task, progress=False)
    _, _, single_b = finetune_command.predict([other], dev, make_task, progress=False)
    _, _, both = finetune_command.predict([folder, other], dev, make_task, progress=False)
    for (_, a), (_, b), (label, averaged) in zip(single_a, single_b, both):
        assert np.allclose(averaged, (a + b) / 2, atol=1e-6)
        assert label == task_a.labels[int(np.argmax(averaged))]


def test_killed_and_resumed_run_ends_with_the_same_weights(setup, tmp_path):
    straight = tune(setup, tmp_path / "straight", epochs=1, keep_checkpoint=True)
    tune(setup, tmp_path / "resumed", epochs=1, max_minutes=1e-9)         # stops after its first step
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["step"] == 1
    tune(setup, tmp_path / "resumed", epochs=1, resume=True, keep_checkpoint=True)
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["model"]
    assert straight["end_step"] == 20
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_task_json_names_the_bundled_model_by_the_name_that_loads_it(setup, tmp_path):
    root, train_file, _ = setup
    task = ClassificationTask("sst2")
    finetune_command.fine_tune(task, None, task.read(train_file)[:16], None, tmp_path / "run", max_steps=1, batch_size=16,
                         max_seq_len=32, progress=False)
    record = json.loads((tmp_path / "run" / "task.json").read_text())
    assert record["base_model"] == "minibert-gutenberg"                       # not "None"
    assert load_pretrained(record["base_model"]).source_dir == load_pretrained().source_dir


def test_a_run_stopped_mid_epoch_keeps_the_same_best_epoch_as_an_unstopped_one(setup, tmp_path):
    straight = tune(setup, tmp_path / "straight", epochs=2)
    stopped = tune(setup, tmp_path / "resumed", epochs=2, max_minutes=1e-9)    # stops after step 1 of 10
    assert stopped["epochs_history"] == [] and stopped["best"] is None       # no mid-epoch evaluation to keep
    assert not (tmp_path / "resumed" / "model.safetensors").exists()
    resumed = tune(setup, tmp_path / "resumed", epochs=2, resume=True)
    assert resumed["best"] == straight["best"]
    assert ((tmp_path / "resumed" / "model.safetensors").read_bytes()
            == (tmp_path / "straight" / "model.safetensors").read_bytes())
