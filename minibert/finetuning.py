"""Fine-tuning: one pretrained encoder, one small head per task ([BERT] 4).

BERT fine-tunes every downstream task the same way (Figure 4 of the paper):
the whole pretrained model plus one new output layer, trained end to end
with a small learning rate for a few epochs. What differs between tasks is
only how an example becomes model inputs, which head reads the encoder's
output, and how the head's output becomes a prediction. Those pieces live in
one small *task object* per task type (minibert/tasks/); the heads in
minibert/heads.py; this module holds what they share, in the order a run
uses it:

  TaskModel            the pretrained model + one head
  fine_tuning_step     one step written out: logits -> cross-entropy -> backward
                       -> clip -> AdamW -> schedule (the classification case)
  LengthGroupedBatches training batches of similar length (little padding)
  run_model            per-row outputs for every feature, in large sorted batches
  fine_tune            the run: data, model, training.train with evaluation each
                       epoch, the best epoch kept (BestEpoch)
  save / load          a fine-tuned folder: the model and its head in Hugging
                       Face layout (what transformers' For<Task> models load), task.json
  predict              one model or an ensemble (members' probabilities averaged)

fine_tune(..., sift=SiftConfig(...)) adds DeBERTa's scale-invariant
fine-tuning (minibert/sift.py) to any task: the same task object, wrapped in
sift.SiftObjective.

A task object has:

  name, labels, main_metric      e.g. "sst2", ["0", "1"], "accuracy"
  uses_pooler                    whether the head reads the pooled [CLS] vector
  read(path)                     the examples of a data file
  features(examples, tokenizer, max_seq_len)
                                 a list of dicts: input_ids, token_type_ids, the
                                 training targets, and "example" (its example's index)
  make_head(config)              an nn.Module: BertModelOutput -> logits
  loss(logits, batch)            the paper's loss: the mean cross-entropy
  counts(batch), losses(logits, batch)
                                 the same loss in the form training.train sums
  distributions(logits, batch)   the softmax rows the loss compares (what SiFT perturbs)
  outputs(logits, batch)         per-feature probabilities (what an ensemble averages)
  predict(examples, features, outputs)
                                 predictions, one per example
  metrics(examples, predictions) the official metrics, in percent
  has_gold(examples)             whether every example has its answer (so metrics can score it)
  write_predictions(examples, predictions, path)
                                 the task's official prediction format(s); returns the paths written
"""

import math
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.checkpoints.safetensors import load_weights
from minibert.checkpoints.task_heads import load_task_head
from minibert.heads import IGNORE_INDEX, add_pooler_if_missing   # callers also find it here
from minibert.support.devices import autocast as bf16_autocast, move_to_device
from minibert.support.errors import MiniBertError
from minibert.support.fingerprints import check_tokenizer_matches, tokenizer_fingerprint
from minibert.support.folders import check_task_record, read_record, write_folder, write_record
from minibert.support.outputs import CHECKPOINT
from minibert.support.seeds import generator_for
from minibert.tasks import TASK_NAMES
from minibert.tokenization import load_tokenizer
from minibert.training import TrainingConfig, setup_context, train

TASK_FILE = "task.json"
HEAD_FILE = "head.safetensors"


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

    def load_state_dict(self, state_dict, *args, **kwargs):
        # A training checkpoint.pt written before the pretrained model was
        # named `base_model` holds its weights as `encoder.*`: the same
        # tensors under the old name, so a run killed then still resumes.
        state_dict = {("base_model." + key[len("encoder."):] if key.startswith("encoder.") else key): value
                      for key, value in state_dict.items()}
        return super().load_state_dict(state_dict, *args, **kwargs)


# ----------------------------------------------------------------------------
# One fine-tuning step, written out (the classification case)
# ----------------------------------------------------------------------------


def fine_tuning_step(model, batch, optimizer, scheduler, max_grad_norm=1.0):
    """One optimizer step of sentence classification ([BERT] 4.1, Figure 4a/b),
    everything on one screen. Returns the loss.

    The general loop, training.train, does exactly this for every task (plus
    gradient accumulation, torch.distributed, bf16, logging, evaluation and
    checkpoints); tests/test_finetuning.py checks that both give the same
    weights."""
    # exercise: fine-tuning-step
    model.train()
    logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])   # (B, K) = C W^T + b
    # L = -(1/B) sum_i log softmax(C_i W^T + b)[y_i]: the mean cross-entropy of the gold classes
    loss = F.cross_entropy(logits.float(), batch["labels"])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)   # ||g|| <= 1.0, as Google's BERT
    optimizer.step()                  # AdamW (decoupled weight decay, no decay on biases and LayerNorm)
    scheduler.step()                  # linear warm-up, then linear decay to 0
    optimizer.zero_grad(set_to_none=True)
    return loss.item()
    # end exercise


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
    bfloat16 autocast (support/devices.autocast); `outputs` turns the
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


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------


class Objective:
    """training.train's objective interface, forwarded to the task."""

    def __init__(self, task):
        self.task = task

    def counts(self, batch):
        return self.task.counts(batch)

    def losses(self, model, batch):
        return self.task.losses(model_logits(model, batch), batch)


def evaluate(model, task, examples, features, pad_id, batch_size, device, bf16=False, progress=True):
    """(metrics, predictions, outputs) on a labelled set."""
    outputs = run_model(model, features, pad_id, task.outputs, batch_size, device, progress=progress, bf16=bf16)
    predictions = task.predict(examples, features, outputs)
    return task.metrics(examples, predictions), predictions, outputs


class BestEpoch:
    """The best-epoch rule: evaluate after every epoch and keep (save) the
    model only when `main_metric` beats every epoch before it.

    evaluate(model) -> metrics dict; save(model, metrics) writes the model.
    previous: the metrics of the best epoch of a run being resumed (the one
    to beat), or None. An instance is the `evaluate` callback training.train
    takes."""

    def __init__(self, main_metric, evaluate, save, previous=None):
        self.main_metric, self.evaluate, self.save = main_metric, evaluate, save
        self.history = []
        self.best = previous if previous and main_metric in previous else None

    def __call__(self, trained):
        metrics = self.evaluate(trained)
        self.history.append(metrics)
        value = metrics[self.main_metric]
        if self.best is None or value > self.best[self.main_metric]:
            self.best = metrics
            self.save(trained, metrics)
        return {self.main_metric: value}


def fine_tune(task, model_name, train_examples, eval_examples, output, *, epochs=3, max_steps=None,
              learning_rate=5e-5, batch_size=32, eval_batch_size=128, max_seq_len=128, warmup=0.1,
              weight_decay=0.01, seed=0, bf16=False, device="auto", resume=False, progress=True,
              max_minutes=None, settings=None, sift=None, run_settings=None, eval_name="held-out",
              keep_checkpoint=False, optimizer="adamw"):
    """Fine-tune `model_name` (anything load_pretrained reads) on the task and
    write the best epoch's model to `output`. Returns a summary dict.
    `eval_name`: what the evaluation lines call eval_examples ("dev.tsv").
    output/checkpoint.pt is removed once the run has reached its last step,
    unless keep_checkpoint; a run stopped by max_minutes keeps it to resume.
    `sift`: a sift.SiftConfig to train with SiFT's adversarial loss (task.json
    records its settings), or None. `run_settings`: more {flag: value} that
    shape the run (finetune.py: the training file, ...); with these
    arguments they are what --resume must find unchanged. `optimizer`:
    "adamw" (torch's) or "bert-adam" (Google's, without bias correction:
    training.BertAdam)."""
    context = setup_context(device)
    output = Path(output)
    tokenizer = load_tokenizer(model_name)
    base_model = load_pretrained(model_name)
    if max_seq_len > base_model.config.max_position_embeddings:
        raise MiniBertError(f"--max-seq-len {max_seq_len} exceeds the model's max_position_embeddings "
                            f"({base_model.config.max_position_embeddings})")
    torch.manual_seed(seed)              # the new pooler's and head's initial weights depend on the seed only
    if task.uses_pooler and add_pooler_if_missing(base_model) and context.is_main and progress:
        tqdm.write(f"load report: {model_name or 'the bundled model'} has no pooler; a fresh one is initialised "
                   f"for fine-tuning (as transformers does)")
    model = TaskModel(base_model, task.make_head(base_model.config), task.uses_pooler)

    train_features = task.features(train_examples, tokenizer, max_seq_len)
    batches = LengthGroupedBatches(train_features, batch_size, seed, tokenizer.pad_id)
    total_steps = max_steps or epochs * len(batches)
    eval_features = task.features(eval_examples, tokenizer, max_seq_len) if eval_examples is not None else None
    # The model as load_pretrained finds it again: its name or path, the bundled one by its folder's name.
    base_name = str(model_name) if model_name is not None else base_model.source_dir.name
    settings = {"max_seq_len": max_seq_len, "base_model": base_name, **getattr(task, "settings", {}),
                **(settings or {}),     # and the vocabulary, so that predict() notices a vocab.txt replaced
                "vocabulary_fingerprint": tokenizer_fingerprint(tokenizer)}
    objective = Objective(task)
    if sift is not None:
        from minibert.sift import SiftObjective
        objective = SiftObjective(task, sift)
        settings["sift"] = sift.to_dict()
    previous = None
    if resume and (output / TASK_FILE).is_file():   # the best epoch before the kill stays the one to beat
        previous = read_task_record(output).get("metrics")
    best_epoch = BestEpoch(
        task.main_metric,
        evaluate=lambda trained: evaluate(trained, task, eval_examples, eval_features, tokenizer.pad_id,
                                          eval_batch_size, context.device, bf16=bf16, progress=progress)[0],
        save=lambda trained, metrics: save_task_model(trained, task, tokenizer, output, settings, metrics),
        previous=previous)

    config = TrainingConfig(total_steps=total_steps, learning_rate=learning_rate, weight_decay=weight_decay,
                            warmup_steps=int(warmup * total_steps), seed=seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches), max_minutes=max_minutes,
                            evaluate_when_stopped=False,     # the best epoch: end-of-epoch evaluations only
                            bf16=bf16, eval_name=eval_name, optimizer=optimizer)
    run_config = {"task": task.name, "base_model": base_name, "total_steps": total_steps,
                  "batch_size": batch_size, "seed": seed, "grad_accum_steps": 1, "max_seq_len": max_seq_len,
                  "train_examples": len(train_examples)}
    if sift is not None:
        run_config["sift"] = settings["sift"]
    run_config["settings"] = {   # --resume refuses a run where one differs (training.check_same_run)
        "--task": task.name, "--model": str(model_name), "--lr": learning_rate, "--warmup": warmup,
        "--weight-decay": weight_decay, "--max-seq-len": max_seq_len, "--optimizer": optimizer,
        "the tokenizer's casing (do_lower_case)": getattr(tokenizer, "do_lower_case", None),
        "--sift": settings.get("sift"),
        **{f"--{k.replace('_', '-')}": v for k, v in getattr(task, "settings", {}).items()
           if k in ("doc_stride", "max_query_len")},
        **(run_settings or {})}
    output.mkdir(parents=True, exist_ok=True)
    if context.is_main and progress:
        tqdm.write(f"{task.name}: {len(train_examples):,} training examples ({len(train_features):,} features), "
                   f"{len(batches):,} batches per epoch, {total_steps:,} steps")
    started = time.time()
    try:
        summary = train(model, batches, objective, config, context, output / CHECKPOINT,
                        run_config=run_config, evaluate=best_epoch if eval_features is not None else None,
                        resume=resume, progress=progress)
    finally:
        if sift is not None:
            objective.remove_hooks()
    if context.is_main and eval_features is None:
        save_task_model(model, task, tokenizer, output, settings)
    if context.is_main and summary["end_step"] >= total_steps and not keep_checkpoint:
        (output / CHECKPOINT).unlink(missing_ok=True)     # finished: nothing left to resume
    summary.update(task=task.name, seconds=time.time() - started, epochs_history=best_epoch.history,
                   best=best_epoch.best, steps_per_epoch=len(batches))
    return summary


# ----------------------------------------------------------------------------
# Saving and loading a fine-tuned folder
# ----------------------------------------------------------------------------


def save_task_model(model, task, tokenizer, folder, settings, metrics=None):
    """The fine-tuned folder, written as one unit (support/folders.py: into a
    temporary folder renamed into place, so a kill leaves the old best epoch
    or the new one, whole): a complete Hugging Face model folder (the
    encoder and the head under the names transformers' For<Task> model uses,
    config.json with its architecture and labels; checkpoints/task_heads.py)
    and task.json (the task, its labels, the settings the features were
    made with, the metrics). The folder's other files (checkpoint.pt) are
    carried over; an old layout's head.safetensors is not."""
    metrics_field = {"metrics": metrics} if metrics is not None else {}

    def write_into(staging):
        save_pretrained(model.base_model, staging, tokenizer=tokenizer, head=model.head, labels=task.labels)
        write_record(staging, TASK_FILE, {"task": task.name, "labels": task.labels, **settings, **metrics_field})

    write_folder(folder, write_into, leave_behind=(HEAD_FILE,))


def read_task_record(folder):
    """task.json, its fields checked (support/folders.py)."""
    record = read_record(folder, TASK_FILE, required=("task", "max_seq_len"),
                         missing_hint=f"not a fine-tuned model folder: make one with "
                                      f"finetune.py --task ... --output {folder}")
    check_task_record(Path(folder) / TASK_FILE, record, TASK_NAMES)
    return record


def load_task_model(folder, make_task, overrides=None):
    """(model, task, tokenizer, record) from a fine-tuned folder. `overrides`
    replace saved task settings that only affect decoding (e.g. SQuAD's
    null_threshold, tuned after training). The head is read from
    model.safetensors, or from head.safetensors in a folder written before
    the head moved there."""
    record = read_task_record(folder)
    task = make_task(record["task"], labels=record.get("labels"), settings={**record, **(overrides or {})})
    base_model = load_pretrained(folder)
    head = task.make_head(base_model.config)
    what = f"the {record['task']} head with {len(task.labels or [])} labels"
    if load_task_head(head, Path(folder) / "model.safetensors", what) is None:
        load_weights(head, Path(folder) / HEAD_FILE, what)
    model, tokenizer = TaskModel(base_model, head, task.uses_pooler).eval(), load_tokenizer(folder)
    check_tokenizer_matches(folder, tokenizer, base_model.config, record)
    return model, task, tokenizer, record


# ----------------------------------------------------------------------------
# Predictions: one model or an ensemble
# ----------------------------------------------------------------------------


def predict(folders, path, make_task, device="cpu", batch_size=128, bf16=False, progress=True, overrides=None,
            select=None):
    """Load each fine-tuned folder, run it on the file `path` and average the
    members' per-feature probabilities (an ensemble of one is one model).
    select(task, examples), if given, picks the examples to run (finetune.py:
    the part of the file that --split-eval held out).
    Returns (task, examples, predictions)."""
    members = [load_task_model(folder, make_task, overrides) for folder in folders]
    _, task, tokenizer, record = members[0]
    for folder, (_, other, other_tokenizer, other_record) in zip(folders[1:], members[1:]):
        if (other.name, other.labels, other_record["max_seq_len"]) != (task.name, task.labels, record["max_seq_len"]):
            raise MiniBertError(f"--ensemble: {folder} is {other.name} with labels {other.labels} and max_seq_len "
                                f"{other_record['max_seq_len']}; {folders[0]} is {task.name} with {task.labels} "
                                f"and {record['max_seq_len']}: members must match")
        if tokenizer_fingerprint(other_tokenizer) != tokenizer_fingerprint(tokenizer):   # tokens, order, casing
            raise MiniBertError(f"--ensemble: {folder} has another vocabulary than {folders[0]} (other tokens, "
                                f"another order or another casing): every member must read the same ids")
    examples = task.read(path)
    if select is not None:
        examples = select(task, examples)
    features = task.features(examples, tokenizer, record["max_seq_len"])
    summed = None
    for model, *_ in members:
        outputs = run_model(model, features, tokenizer.pad_id, task.outputs, batch_size, device, progress, bf16)
        summed = outputs if summed is None else [s + o for s, o in zip(summed, outputs)]
    averaged = [s / len(members) for s in summed]
    return task, examples, task.predict(examples, features, averaged)
