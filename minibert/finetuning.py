"""Fine-tuning: one pretrained encoder, one small head per task ([BERT] 4).

BERT fine-tunes every downstream task the same way (Figure 4 of the paper):
the whole pretrained model plus one new output layer, trained end to end
with a small learning rate for a few epochs. What differs between tasks is
only how an example becomes model inputs, which head reads the encoder's
output, and how the head's output becomes a prediction. Those pieces live in
one small *task object* per task type (minibert/tasks/, whose docstring
lists what a task object has); the heads in minibert/heads.py; this module
holds what they share:

  TaskModel            the pretrained model + one head
  Objective            the task's loss, as training.training_step takes it: one
                       step is logits -> cross-entropy -> backward -> clip ->
                       AdamW -> schedule, for every task
  LengthGroupedBatches training batches of similar length (little padding)
  run_model            per-row outputs for every feature, in large sorted batches

The run (fine_tune: data, model, training with an evaluation each epoch,
the best epoch kept; the fine-tuned folder; predictions of one model or an
ensemble) is minibert/commands/finetune.py.
"""

import math

import torch
import torch.nn as nn
from tqdm.auto import tqdm

from minibert.heads import IGNORE_INDEX
from minibert.support import MiniBertError
from minibert.support.runtime import autocast as bf16_autocast, generator_for, move_to_device

# ----------------------------------------------------------------------------
# The model: the pretrained model + one head
# ----------------------------------------------------------------------------


class TaskModel(nn.Module):
    """The pretrained model (`base_model`: a BertModel or DebertaModel, whose
    `encoder` is the layer stack) and one task head. The pretraining heads
    (MLM, NSP/SOP; for DeBERTa also the Enhanced Mask Decoder's absolute
    position table) are dropped, and so is the pooler for token-level tasks:
    fine-tuning does not use them (and torch.distributed refuses parameters
    that get no gradient). The model itself knows what to drop."""

    def __init__(self, base_model, head, uses_pooler=True):
        super().__init__()
        base_model.drop_pretraining_heads(keep_pooler=uses_pooler)
        self.base_model = base_model
        self.head = head

    def forward(self, input_ids, attention_mask, token_type_ids):
        output = self.base_model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                 all_hidden_states=False)
        return self.head(output)


# ----------------------------------------------------------------------------
# The loss a step minimises
# ----------------------------------------------------------------------------


class Objective:
    """The task's loss in the form training.training_step takes: the
    TaskModel's logits for a batch, then the task's losses(logits, batch) ->
    {term: (sum of the items' losses, number correct)} and counts(batch) ->
    {term: number of items}. For sentence classification that is one term,
    the cross-entropy of the gold classes summed over the batch's sentences
    (tasks/classification.py), which the step divides by their number."""

    def __init__(self, task):
        self.task = task

    def counts(self, batch):
        return self.task.counts(batch)

    def losses(self, model, batch):
        return self.task.losses(model_logits(model, batch), batch)


# ----------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------


def collate(features, pad_id):
    """A list of feature dicts -> a batch of tensors, padded to the longest
    feature of this batch only. Targets that are lists (one per token) are
    padded with IGNORE_INDEX, which the cross-entropy skips."""
    longest = max(len(f["input_ids"]) for f in features)
    B = len(features)
    batch = {"input_ids": torch.full((B, longest), pad_id, dtype=torch.long),
             "token_type_ids": torch.zeros((B, longest), dtype=torch.long),
             "attention_mask": torch.zeros((B, longest), dtype=torch.long)}
    for row, f in enumerate(features):
        n = len(f["input_ids"])
        batch["input_ids"][row, :n] = torch.tensor(f["input_ids"])
        batch["token_type_ids"][row, :n] = torch.tensor(f["token_type_ids"])
        batch["attention_mask"][row, :n] = 1
    for key in features[0]:
        if key in batch or key == "example" or key.startswith("_"):
            continue
        values = [f[key] for f in features]
        if isinstance(values[0], list):
            padded = torch.full((B, longest), IGNORE_INDEX, dtype=torch.long)
            for row, value in enumerate(values):
                padded[row, :len(value)] = torch.tensor(value)
            batch[key] = padded
        else:
            batch[key] = torch.tensor(values)
    return batch


class LengthGroupedBatches:
    """Global batch number -> a training batch, deterministic in (seed, epoch).

    Padding every batch to the longest sentence of the data set wastes most
    of the compute on short sentences. Each epoch the features are shuffled,
    cut into chunks of `group_size` batches, each chunk is sorted by length
    and cut into batches, and the batches are shuffled: batches hold
    sentences of similar length (little padding) yet come in random order
    with random neighbours, as an unsorted shuffle would.

    collate(features, pad_id) -> batch dict turns one batch of features into
    tensors (distillation's student batches bring their own)."""

    def __init__(self, features, batch_size, seed, pad_id, group_size=50, collate=collate):
        if not features:
            raise MiniBertError("no training examples")
        self.features, self.batch_size, self.seed, self.pad_id = features, batch_size, seed, pad_id
        self.group_size = group_size
        self.collate = collate
        self.batches_per_epoch = math.ceil(len(features) / batch_size)
        self._epoch, self._batches = None, None

    def __len__(self):
        return self.batches_per_epoch

    def epoch_batches(self, epoch):
        order = torch.randperm(len(self.features), generator=generator_for(self.seed, "order", epoch)).tolist()
        chunk = self.batch_size * self.group_size
        batches = []
        for start in range(0, len(order), chunk):
            group = sorted(order[start:start + chunk], key=lambda i: len(self.features[i]["input_ids"]))
            batches += [group[i:i + self.batch_size] for i in range(0, len(group), self.batch_size)]
        shuffle = torch.randperm(len(batches), generator=generator_for(self.seed, "batches", epoch)).tolist()
        return [batches[i] for i in shuffle]

    def __getitem__(self, global_index):
        epoch, index = divmod(global_index, self.batches_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, self.epoch_batches(epoch)
        return self.collate([self.features[i] for i in self._batches[index]], self.pad_id)


# ----------------------------------------------------------------------------
# Running a model over many features
# ----------------------------------------------------------------------------


def model_logits(model, batch):
    """A TaskModel's logits for a batch (run_model's default `logits_of`)."""
    return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


@torch.no_grad()
def run_model(model, features, pad_id, outputs, batch_size=128, device="cpu", progress=True, bf16=False,
              collate=collate, logits_of=None):
    """outputs(logits, batch) (a list, one value per row) for every feature,
    in the features' order: a task's probabilities, or a teacher's logits.
    Features are run longest first in large batches (no gradients, so a
    batch can be larger than in training). logits_of(model, batch) defaults
    to model(input_ids, attention_mask, token_type_ids). bf16: under
    bfloat16 autocast (support/runtime.autocast); `outputs` turns the
    logits back into float32."""
    logits_of = logits_of or model_logits
    model.eval().to(device)
    order = sorted(range(len(features)), key=lambda i: -len(features[i]["input_ids"]))
    results = [None] * len(features)
    autocast = bf16_autocast(device, bf16)
    for start in tqdm(range(0, len(order), batch_size), desc="predicting", unit="batch", disable=not progress,
                      leave=False):
        rows = order[start:start + batch_size]
        batch = move_to_device(collate([features[i] for i in rows], pad_id), device)
        with autocast:
            logits = logits_of(model, batch)
        for row, value in zip(rows, outputs(logits, batch)):
            results[row] = value
    return results
