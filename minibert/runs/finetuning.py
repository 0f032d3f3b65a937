"""The fine-tuning run that finetune.py starts, around the lesson
(minibert/finetuning.py): the data and the model, runs.training.train with an
evaluation after every epoch and the best epoch kept (BestEpoch), the
fine-tuned folder (save_task_model / load_task_model) and the predictions
of one model or an ensemble (predict).

fine_tune(..., sift=SiftConfig(...)) adds DeBERTa's scale-invariant
fine-tuning (minibert/sift.py) to any task: the same task object, wrapped in
sift.SiftObjective.
"""

import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from minibert.checkpoints import load_pretrained, load_with_tokenizer, save_pretrained
from minibert.checkpoints.task_heads import load_task_head
from minibert.finetuning import LengthGroupedBatches, Objective, TaskModel, run_model
from minibert.heads import add_pooler_if_missing
from minibert.runs.training import TrainingConfig, setup_context, train
from minibert.support.errors import MiniBertError
from minibert.support.files import check_tokenizer_matches, tokenizer_fingerprint
from minibert.support.outputs import CHECKPOINT, check_task_record, read_as_one, read_record, write_folder, write_record
from minibert.tasks import TASKS
from minibert.tokenization import load_tokenizer

TASK_FILE = "task.json"


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
    to beat), or None. An instance is the `evaluate` callback training.training_step
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
              max_minutes=None, record_fields=None, sift=None, resume_flags=None, eval_name="held-out",
              keep_checkpoint=False, optimizer="adamw"):
    """Fine-tune `model_name` (anything load_pretrained reads) on the task and
    write the best epoch's model to `output`. Returns a summary dict.
    `eval_name`: what the evaluation lines call eval_examples ("dev.tsv").
    output/checkpoint.pt is removed once the run has reached its last step,
    unless keep_checkpoint; a run stopped by max_minutes keeps it to resume.
    `sift`: a sift.SiftConfig to train with SiFT's adversarial loss (task.json
    records its settings), or None. `record_fields`: more fields for
    task.json. `resume_flags`: more {flag: value} that shape the run
    (finetune.py: the training file, ...); with this function's own they are
    what --resume must find unchanged. `optimizer`:
    "adamw" (torch's) or "bert-adam" (Google's, without bias correction:
    training.BertAdam)."""
    context = setup_context(device)
    output = Path(output)
    base_model, tokenizer = load_with_tokenizer(model_name)     # one snapshot of the folder
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
    record = {"max_seq_len": max_seq_len, "base_model": base_name, **task.settings,
              **(record_fields or {})}       # what task.json records, with the best epoch's metrics
    objective = Objective(task)
    if sift is not None:
        from minibert.sift import SiftObjective
        objective = SiftObjective(task, sift)
        record["sift"] = sift.to_dict()
    previous = None
    if resume and (output / TASK_FILE).is_file():   # the best epoch before the kill stays the one to beat
        previous = read_task_record(output).get("metrics")
    best_epoch = BestEpoch(
        task.main_metric,
        evaluate=lambda trained: evaluate(trained, task, eval_examples, eval_features, tokenizer.pad_id,
                                          eval_batch_size, context.device, bf16=bf16, progress=progress)[0],
        save=lambda trained, metrics: save_task_model(trained, task, tokenizer, output, record, metrics),
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
        run_config["sift"] = record["sift"]
    run_config["flags"] = {   # --resume refuses a run where one differs (runs.training.check_same_run)
        "--task": task.name, "--model": str(model_name), "--lr": learning_rate, "--warmup": warmup,
        "--batch-size": batch_size, "--epochs": epochs, "--max-steps": max_steps,
        "--weight-decay": weight_decay, "--max-seq-len": max_seq_len, "--optimizer": optimizer,
        "the tokenizer's casing (do_lower_case)": getattr(tokenizer, "do_lower_case", None),
        "--sift": record.get("sift"),
        **{f"--{k.replace('_', '-')}": v for k, v in task.feature_settings.items()},
        **(resume_flags or {})}
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
        save_task_model(model, task, tokenizer, output, record)
    if context.is_main and summary["end_step"] >= total_steps and not keep_checkpoint:
        (output / CHECKPOINT).unlink(missing_ok=True)     # finished: nothing left to resume
    summary.update(task=task.name, seconds=time.time() - started, epochs_history=best_epoch.history,
                   best=best_epoch.best, steps_per_epoch=len(batches))
    return summary


# ----------------------------------------------------------------------------
# Saving and loading a fine-tuned folder
# ----------------------------------------------------------------------------


def save_task_model(model, task, tokenizer, folder, record, metrics=None):
    """The fine-tuned folder, written as one unit (support/outputs.py: into a
    temporary folder renamed into place, so a kill leaves the old best epoch
    or the new one, whole): a complete Hugging Face model folder (the
    encoder and the head under the names transformers' For<Task> model uses,
    config.json with its architecture and labels; checkpoints/task_heads.py)
    and task.json (the task, its labels, the settings the features were
    made with, the metrics, and the vocabulary's fingerprint, so that
    load_task_model notices a vocab.txt replaced). The folder's other files (checkpoint.pt) are
    carried over."""
    metrics_field = {"metrics": metrics} if metrics is not None else {}

    def write_into(staging):
        save_pretrained(model.base_model, staging, tokenizer=tokenizer, head=model.head, labels=task.labels)
        write_record(staging, TASK_FILE, {"task": task.name, "labels": task.labels, **record, **metrics_field,
                                          "vocabulary_fingerprint": tokenizer_fingerprint(tokenizer)})

    write_folder(folder, write_into)


def read_task_record(folder):
    """task.json, its fields checked (support/outputs.py)."""
    record = read_record(folder, TASK_FILE, required=("task", "max_seq_len"),
                         missing_hint=f"not a fine-tuned model folder: make one with "
                                      f"finetune.py --task ... --output {folder}")
    check_task_record(Path(folder) / TASK_FILE, record, tuple(TASKS))
    return record


def load_task_model(folder, make_task, overrides=None):
    """(model, task, tokenizer, record) from a fine-tuned folder. `overrides`
    replace saved task settings that only affect decoding (e.g. SQuAD's
    null_threshold, tuned after training). The head is read from
    model.safetensors, under the names transformers' For<Task> model uses.
    All is read as one snapshot of the folder (support/outputs.read_as_one)."""
    return read_as_one(folder, lambda: read_task_model(folder, make_task, overrides))


def read_task_model(folder, make_task, overrides=None):
    """load_task_model's reads, in order."""
    record = read_task_record(folder)
    task = make_task(record["task"], labels=record.get("labels"), settings={**record, **(overrides or {})})
    base_model = load_pretrained(folder)
    head = task.make_head(base_model.config)
    what = f"the {record['task']} head with {len(task.labels or [])} labels"
    load_task_head(head, Path(folder) / "model.safetensors", what)
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
