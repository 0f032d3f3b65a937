"""Fine-tuning: one pretrained encoder, one small head per task ([BERT] 4).

BERT fine-tunes every downstream task the same way (Figure 4 of the paper):
the whole pretrained encoder plus one new output layer, trained end to end
with a small learning rate for a few epochs. What differs between tasks is
only how an example becomes model inputs, which head reads the encoder's
output, and how the head's output becomes a prediction. Those pieces live in
one small *task object* per task type (minibert/tasks/); this module holds
what they share:

  TaskModel            encoder + head
  LengthGroupedBatches training batches of similar length (little padding)
  run_model            the head's outputs for every feature, in large sorted batches
  fine_tune            the run: data, model, training.train with evaluation each epoch,
                       the best epoch kept
  save / load          a fine-tuned folder: the encoder in Hugging Face layout,
                       head.safetensors, task.json
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
  counts(batch), losses(model, batch)
                                 the objective, in the form training.train expects
  outputs(logits, batch)         per-feature probabilities (what an ensemble averages)
  predict(examples, features, outputs)
                                 predictions, one per example
  metrics(examples, predictions) the official metrics, in percent
  write_predictions(examples, predictions, path)
"""

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from tqdm import tqdm

from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.checkpoints.safetensors import load_safetensors, save_safetensors
from minibert.deberta import DebertaModel, DebertaPooler
from minibert.support.devices import move_to_device
from minibert.support.errors import MiniBertError
from minibert.support.fileio import read_json_object, write_json
from minibert.model import Pooler
from minibert.support.seeds import generator_for
from minibert.tokenization import load_tokenizer
from minibert.training import TrainingConfig, setup_context, train

TASK_FILE = "task.json"
HEAD_FILE = "head.safetensors"


# ----------------------------------------------------------------------------
# The model: encoder + head
# ----------------------------------------------------------------------------


class TaskModel(nn.Module):
    """The pretrained encoder and one task head. The encoder's pretraining
    heads (MLM, NSP/SOP; for DeBERTa also the Enhanced Mask Decoder's
    absolute position table) are dropped, and so is the pooler for
    token-level tasks: fine-tuning does not use them (and torch.distributed
    refuses parameters that get no gradient)."""

    def __init__(self, encoder, head, uses_pooler=True):
        super().__init__()
        if isinstance(encoder, DebertaModel):
            encoder.drop_mlm_head()     # and the absolute position table only its Enhanced Mask Decoder reads
        encoder.mlm_head = None
        encoder.pair_head = None
        if not uses_pooler:
            encoder.pooler = None
        self.encoder = encoder
        self.head = head

    def forward(self, input_ids, attention_mask, token_type_ids):
        output = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              all_hidden_states=False)
        return self.head(output)


class OutputLayer(nn.Module):
    """The one layer fine-tuning adds ([BERT] 4): logits = W dropout(h) + b,
    with h the pooled [CLS] vector C (sentence tasks, Figure 4a/b) or every
    token's final vector T_i (token tasks, Figure 4d). W starts as N(0, 0.02)
    and b at zero, as Google's output_weights/output_bias."""

    def __init__(self, config, num_outputs, per_token):
        super().__init__()
        self.per_token = per_token
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, output):
        h = output.last_hidden_state if self.per_token else output.pooled_output   # (B, T, H) or (B, H)
        return self.classifier(self.dropout(h))                                     # (B, T, K) or (B, K)


def add_pooler_if_missing(encoder):
    """Sentence-level heads read the pooled output. A checkpoint saved without
    a pooler (Hugging Face's BertForMaskedLM files, the bundled model, every
    released DeBERTa) gets a freshly initialised one, as transformers does;
    the load report says so. The pooler is the model's own kind: BERT's tanh
    Pooler, or DeBERTa's DebertaPooler (GELU, transformers' ContextPooler),
    the one a saved DeBERTa folder is loaded back with. Returns whether it
    added one."""
    if encoder.pooler is not None:
        return False
    pooler_class = DebertaPooler if isinstance(encoder, DebertaModel) else Pooler
    encoder.pooler = pooler_class(encoder.config)
    encoder.pooler.apply(encoder.init_weights)
    report = getattr(encoder, "load_report", None)
    if report is not None:
        report.skipped.append(("pooler.dense", "not in the checkpoint: freshly initialised for fine-tuning"))
    return True


# ----------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------


def collate(features, pad_id):
    """A list of feature dicts -> a batch of tensors, padded to the longest
    feature of this batch only. Targets that are lists (one per token) are
    padded with -100, which the cross-entropy ignores."""
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
            padded = torch.full((B, longest), -100, dtype=torch.long)
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
    with random neighbours, as an unsorted shuffle would."""

    def __init__(self, features, batch_size, seed, pad_id, group_size=50):
        if not features:
            raise MiniBertError("no training examples")
        self.features, self.batch_size, self.seed, self.pad_id = features, batch_size, seed, pad_id
        self.group_size = group_size
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
        return collate([self.features[i] for i in self._batches[index]], self.pad_id)


@torch.no_grad()
def run_model(model, task, features, pad_id, batch_size=128, device="cpu", progress=True, bf16=False):
    """The task's per-feature outputs (probabilities) for every feature, in
    the features' order. Features are run longest first in large batches
    (no gradients, so a batch can be larger than in training)."""
    model.eval().to(device)
    order = sorted(range(len(features)), key=lambda i: -len(features[i]["input_ids"]))
    outputs = [None] * len(features)
    autocast = torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bf16)
    for start in tqdm(range(0, len(order), batch_size), desc="predicting", unit="batch", disable=not progress,
                      leave=False):
        rows = order[start:start + batch_size]
        batch = move_to_device(collate([features[i] for i in rows], pad_id), device)
        with autocast:
            logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        for row, output in zip(rows, task.outputs(logits, batch)):
            outputs[row] = output
    return outputs


# ----------------------------------------------------------------------------
# Saving and loading a fine-tuned folder
# ----------------------------------------------------------------------------


def save_task_model(model, task, tokenizer, folder, settings, metrics=None):
    """The encoder (Hugging Face layout, so other tools read it), the head's
    weights and task.json (the task, its labels and the settings the features
    were made with). Each file is written atomically; task.json goes last."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_pretrained(model.encoder, folder, tokenizer=tokenizer)
    save_safetensors({k: v.detach().cpu().contiguous() for k, v in model.head.state_dict().items()},
                     folder / HEAD_FILE, metadata={"format": "pt"})
    record = {"task": task.name, "labels": task.labels, **settings}
    if metrics is not None:
        record["metrics"] = metrics
    write_json(folder / TASK_FILE, record)


def read_task_record(folder):
    path = Path(folder) / TASK_FILE
    if not path.is_file():
        raise MiniBertError(f"{folder}: not a fine-tuned model folder (no {TASK_FILE}; make one with "
                            f"finetune.py --task ... --output {folder})")
    record = read_json_object(path)
    for key in ("task", "max_seq_len"):
        if key not in record:
            raise MiniBertError(f"{path}: field '{key}' is missing")
    return record


def load_task_model(folder, make_task, overrides=None):
    """(model, task, tokenizer, record) from a fine-tuned folder. `overrides`
    replace saved task settings that only affect decoding (e.g. SQuAD's
    null_threshold, tuned after training)."""
    record = read_task_record(folder)
    task = make_task(record["task"], labels=record.get("labels"), settings={**record, **(overrides or {})})
    encoder = load_pretrained(folder)
    head = task.make_head(encoder.config)
    head_file = Path(folder) / HEAD_FILE
    weights = load_safetensors(head_file)
    try:
        head.load_state_dict({k: torch.as_tensor(np.asarray(v)) for k, v in weights.items()})
    except RuntimeError as e:
        raise MiniBertError(f"{head_file}: does not fit the {record['task']} head with "
                            f"{len(task.labels or [])} labels ({str(e).splitlines()[0]})") from None
    model = TaskModel(encoder, head, task.uses_pooler).eval()
    return model, task, load_tokenizer(folder), record


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
        logits = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return self.task.losses(logits, batch)


def evaluate(model, task, examples, features, pad_id, batch_size, device, bf16=False, progress=True):
    """(metrics, predictions, outputs) on a labelled set."""
    outputs = run_model(model, task, features, pad_id, batch_size, device, progress=progress, bf16=bf16)
    predictions = task.predict(examples, features, outputs)
    return task.metrics(examples, predictions), predictions, outputs


def fine_tune(task, model_name, train_examples, eval_examples, output, *, epochs=3, max_steps=None,
              learning_rate=5e-5, batch_size=32, eval_batch_size=128, max_seq_len=128, warmup=0.1,
              weight_decay=0.01, seed=0, bf16=False, device="auto", resume=False, progress=True,
              max_minutes=None, settings=None, sift=None):
    """Fine-tune `model_name` (anything load_pretrained reads) on the task and
    write the best epoch's model to `output`. Returns a summary dict.
    `sift`: a sift.SiftConfig to train with SiFT's adversarial loss (task.json
    records its settings), or None."""
    context = setup_context(device)
    output = Path(output)
    tokenizer = load_tokenizer(model_name)
    encoder = load_pretrained(model_name)
    if max_seq_len > encoder.config.max_position_embeddings:
        raise MiniBertError(f"--max-seq-len {max_seq_len} exceeds the model's max_position_embeddings "
                            f"({encoder.config.max_position_embeddings})")
    torch.manual_seed(seed)              # the new pooler's and head's initial weights depend on the seed only
    if task.uses_pooler and add_pooler_if_missing(encoder) and context.is_main and progress:
        tqdm.write(f"load report: {model_name or 'the bundled model'} has no pooler; a fresh one is initialised "
                   f"for fine-tuning (as transformers does)")
    model = TaskModel(encoder, task.make_head(encoder.config), task.uses_pooler)

    train_features = task.features(train_examples, tokenizer, max_seq_len)
    batches = LengthGroupedBatches(train_features, batch_size, seed, tokenizer.pad_id)
    total_steps = max_steps or epochs * len(batches)
    eval_features = task.features(eval_examples, tokenizer, max_seq_len) if eval_examples is not None else None
    settings = {"max_seq_len": max_seq_len, "base_model": str(model_name), **getattr(task, "settings", {}),
                **(settings or {})}
    objective = Objective(task)
    if sift is not None:
        from minibert.sift import SiftObjective
        objective = SiftObjective(task, sift)
        settings["sift"] = sift.to_dict()
    history = []
    best = {"value": -math.inf}
    if resume and (output / TASK_FILE).is_file():   # the best epoch before the kill stays the one to beat
        saved = read_json_object(output / TASK_FILE).get("metrics") or {}
        if task.main_metric in saved:
            best.update(value=saved[task.main_metric], metrics=saved)

    def evaluate_and_keep_best(trained):
        """Called by training.train at the end of each epoch (main process)."""
        metrics, _, _ = evaluate(trained, task, eval_examples, eval_features, tokenizer.pad_id, eval_batch_size,
                                 context.device, bf16=bf16, progress=progress)
        history.append(metrics)
        value = metrics[task.main_metric]
        if value > best["value"]:
            best.update(value=value, metrics=metrics)
            save_task_model(trained, task, tokenizer, output, settings, metrics)
        return {task.main_metric: value}

    config = TrainingConfig(total_steps=total_steps, learning_rate=learning_rate, weight_decay=weight_decay,
                            warmup_steps=int(warmup * total_steps), seed=seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches), max_minutes=max_minutes,
                            bf16=bf16)
    run_config = {"task": task.name, "base_model": str(model_name), "total_steps": total_steps,
                  "batch_size": batch_size, "seed": seed, "grad_accum_steps": 1, "max_seq_len": max_seq_len,
                  "train_examples": len(train_examples)}
    if sift is not None:
        run_config["sift"] = settings["sift"]
    output.mkdir(parents=True, exist_ok=True)
    if context.is_main and progress:
        tqdm.write(f"{task.name}: {len(train_examples):,} training examples ({len(train_features):,} features), "
                   f"{len(batches):,} batches per epoch, {total_steps:,} steps")
    started = time.time()
    try:
        summary = train(model, batches, objective, config, context, output / "checkpoint.pt",
                        run_config=run_config, evaluate=evaluate_and_keep_best if eval_features is not None else None,
                        resume=resume, progress=progress)
    finally:
        if sift is not None:
            objective.remove_hooks()
    if context.is_main and eval_features is None:
        save_task_model(model, task, tokenizer, output, settings)
    summary.update(task=task.name, seconds=time.time() - started, epochs_history=history,
                   best=best.get("metrics"), steps_per_epoch=len(batches))
    return summary


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
        if other_tokenizer.vocab_size != tokenizer.vocab_size:
            raise MiniBertError(f"--ensemble: {folder} has another vocabulary than {folders[0]}")
    examples = task.read(path)
    if select is not None:
        examples = select(task, examples)
    features = task.features(examples, tokenizer, record["max_seq_len"])
    summed = None
    for model, *_ in members:
        outputs = run_model(model, task, features, tokenizer.pad_id, batch_size, device, progress, bf16)
        summed = outputs if summed is None else [s + o for s, o in zip(summed, outputs)]
    averaged = [s / len(members) for s in summed]
    return task, examples, task.predict(examples, features, averaged)


def format_metrics(metrics, title):
    """A small table: one metric per line, in percent."""
    width = max(len(k) for k in metrics) if metrics else 0
    lines = [title, "-" * max(len(title), width + 10)]
    for key, value in metrics.items():
        if isinstance(value, float):
            lines.append(f"{key:<{width}}  {value:8.2f}")
        elif not isinstance(value, dict):
            lines.append(f"{key:<{width}}  {value!s:>8}")
    return "\n".join(lines)


def json_safe(values):
    """`values` with numpy scalars turned into floats, ready for json.dump."""
    return json.loads(json.dumps(values, default=float))
