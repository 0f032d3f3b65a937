"""The distillation run that distill.py starts, around the lesson
(minibert/distillation.py): the teacher's folder, the transfer set and the
teacher's logits read from or written to their cache, the student trained by
runs.training.train with the lesson's optimizer (Adadelta at a constant rate), the best epoch
kept in the student folder; and the run's bookkeeping: what student.json
records about the run, what --resume checks before it continues a killed
run, the line printed at the start, and the parameter counts the summary
reports.
"""

import dataclasses
import time
from collections import namedtuple
from pathlib import Path

from tqdm.auto import tqdm

from minibert.augment import PosLexicon
from minibert.distillation import (DistillationObjective, build_student, make_transfer_set, optimizer_factory,
                                   predict_student, student_features, student_tokenizer, teacher_logits)
from minibert.finetuning import LengthGroupedBatches
from minibert.runs.finetuning import BestEpoch, evaluate, load_task_model
from minibert.runs.student_folder import previous_best, save_student
from minibert.runs.training import TrainingConfig, load_checkpoint, setup_context, train
from minibert.support.caches import cached_transfer_set
from minibert.support.files import as_given, fingerprint
from minibert.support.outputs import CHECKPOINT, file_identity
from minibert.support.runtime import check_bf16_lstm
from minibert.support.student_files import check_files, check_run, check_teacher_folder, collate_student, pos_file_path
from minibert.tasks import CLASSIFICATION, make_task

# A finetune.py classifier as load_teacher returns it: the model, its task object, its tokenizer, task.json,
# and its folder.
Teacher = namedtuple("Teacher", "model task tokenizer record folder")


def load_teacher(folder, task_name=None):
    """A fine-tuned sentence classifier folder (of `task_name`, if given)."""
    check_teacher_folder(folder, task_name, CLASSIFICATION)
    model, task, tokenizer, record = load_task_model(folder, make_task)
    return Teacher(model.eval(), task, tokenizer, record, Path(folder))


def transfer_set_with_logits(teacher, examples, train_file, settings, device="cpu", progress=True):
    """(transfer examples, teacher logits (N, K), whether the cache answered):
    augment and ask the teacher once; a later run with the same teacher, data
    and settings reads both back from the cache (support/caches.py)."""
    def augment_and_ask_the_teacher():
        transfer = list(examples)
        if settings.augment:
            lexicon = PosLexicon.from_file(pos_file_path(settings.pos_file))
            transfer = make_transfer_set(examples, lexicon, settings, progress)
        return transfer, teacher_logits(teacher, transfer, settings.teacher_batch_size, device, progress,
                                        bf16=settings.bf16)
    return cached_transfer_set(augment_and_ask_the_teacher, teacher.folder, train_file, settings, teacher.task,
                               examples, progress)


def distill(task_name, train_file, eval_file, output, settings, teacher_folder=None, use_teacher_logits=True,
            device="auto", resume=False, progress=True, keep_checkpoint=False):
    """Train a BiLSTM student and write the best epoch's to `output`.

    With a teacher (and use_teacher_logits): Tang et al.'s distillation on
    the transfer set. Without one (or with use_teacher_logits=False, where
    the teacher serves only --embeddings teacher): the plain BiLSTM on the
    gold labels. Returns a summary dict. output/checkpoint.pt is removed
    once the run has reached its last step, unless keep_checkpoint; a run
    stopped by settings.max_minutes keeps it to resume."""
    context, output = setup_context(device), Path(output)
    check_files(settings)
    teacher = load_teacher(teacher_folder, task_name) if teacher_folder is not None else None
    task = teacher.task if teacher is not None else make_task(task_name)
    distilling = teacher is not None and use_teacher_logits
    settings = settings.resolved(task, distilling)
    check_run(settings, task, teacher is not None, distilling, CLASSIFICATION)
    if settings.bf16:
        check_bf16_lstm(context.device)          # before the transfer set, not at the student's first batch

    examples = task.read(Path(train_file))[:settings.max_train_examples]
    eval_examples = task.read(Path(eval_file)) if eval_file is not None else None
    started, transfer, logits, cache_hit, teacher_metrics = time.time(), list(examples), None, False, None
    if distilling:
        transfer, logits, cache_hit = transfer_set_with_logits(teacher, examples, train_file, settings,
                                                               context.device, progress)
    transfer_seconds = time.time() - started
    if teacher is not None and eval_examples is not None:
        features = teacher.task.features(eval_examples, teacher.tokenizer, teacher.record["max_seq_len"])
        teacher_metrics, _, _ = evaluate(teacher.model, task, eval_examples, features, teacher.tokenizer.pad_id,
                                         settings.teacher_batch_size, context.device, bf16=settings.bf16,
                                         progress=progress)

    tokenizer = student_tokenizer(settings, teacher, transfer)
    model, embeddings_report = build_student(task, tokenizer, settings, teacher)
    batches = LengthGroupedBatches(student_features(task, transfer, tokenizer, logits), settings.batch_size,
                                   settings.seed, tokenizer.pad_id, collate=collate_student)
    eval_features = student_features(task, eval_examples, tokenizer) if eval_examples is not None else None
    record = run_record(settings, teacher_folder, distilling, train_file, eval_file, embeddings_report,
                        len(examples), len(transfer))

    def evaluate_epoch(trained):             # the classification task's own metrics
        predictions = predict_student(trained, task, tokenizer, eval_examples, eval_features,
                                      settings.eval_batch_size, context.device, bf16=settings.bf16)
        return task.metrics(eval_examples, predictions)

    # The epochs a resumed run's checkpoint had finished: its epochs are counted on from there, so the
    # best epoch is numbered over the whole run, as an uninterrupted run numbers it.
    epochs_before = load_checkpoint(output / CHECKPOINT)["step"] // len(batches) if resume else 0

    def save_best(trained, metrics):         # BestEpoch calls it after adding the epoch to its history
        save_student(trained, tokenizer, task, output, {**record, "metrics": metrics,
                                                        "best_epoch": epochs_before + len(best_epoch.history)})
    previous = previous_best(output, task.main_metric)[0] if resume else None    # a killed run's best, to beat
    best_epoch = BestEpoch(task.main_metric, evaluate_epoch, save_best, previous)
    total_steps, counts = settings.epochs * len(batches), parameter_counts(model, teacher)
    config = TrainingConfig(total_steps=total_steps, learning_rate=settings.lr, weight_decay=settings.weight_decay,
                            max_grad_norm=settings.max_grad_norm, seed=settings.seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches), evaluate_when_stopped=False,
                            max_minutes=settings.max_minutes, bf16=settings.bf16,
                            eval_name=Path(as_given(str(eval_file))).name if eval_file is not None else "held-out")
    output.mkdir(parents=True, exist_ok=True)
    if progress and context.is_main:
        tqdm.write(describe_run(task, record, len(batches), total_steps, counts))
    train_started = time.time()
    objective = DistillationObjective(settings.alpha, settings.distill_term, settings.unlabelled_target)
    summary = train(model, batches, objective, config, context, output / CHECKPOINT,
                    run_config=resume_config(task, settings, total_steps, model, tokenizer, record),
                    evaluate=best_epoch if eval_examples is not None else None, resume=resume,
                    progress=progress, optimizer_factory=optimizer_factory(settings))
    train_seconds = time.time() - train_started
    if context.is_main and eval_examples is None:
        save_student(model, tokenizer, task, output, record)
    if context.is_main and summary["end_step"] >= total_steps and not keep_checkpoint:
        (output / CHECKPOINT).unlink(missing_ok=True)     # finished: nothing left to resume
    best, best_epoch_number = previous_best(output, task.main_metric)     # the folder holds the best epoch
    summary.update(record, task=task.name, best=best, best_epoch=best_epoch_number,
                   epochs_history=best_epoch.history, teacher_metrics=teacher_metrics, train_seconds=train_seconds,
                   transfer_seconds=transfer_seconds, cache_hit=cache_hit, steps_per_epoch=len(batches), **counts)
    return summary


# ---- The run's record, what --resume compares, the parameter counts -----------------------------


def run_record(settings, teacher_folder, distilled, train_file, eval_file, embeddings_start, n_examples, n_transfer):
    """What student.json records about the run (and the summary repeats)."""
    return {"teacher": str(teacher_folder) if teacher_folder is not None else None, "distilled": distilled,
            "train_file": as_given(str(train_file)), "evaluated_on": as_given(str(eval_file)) if eval_file else None,
            "embeddings_start": embeddings_start, "train_examples": n_examples, "transfer_examples": n_transfer,
            "settings": dataclasses.asdict(settings)}


def vocabulary_fingerprint(tokenizer):
    """A SHA-256 of the student's vocabulary, in id order."""
    if tokenizer.kind == "words":
        words = tokenizer.words
    else:
        words = tokenizer.tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    return fingerprint(list(words))


# Settings that do not change what is trained: how fast, where the cache is.
NOT_COMPARED = ("cache_dir", "teacher_batch_size", "eval_batch_size", "max_minutes")


def resume_config(task, settings, total_steps, model, tokenizer, record=None):
    """runs.training.train's run_config: what --resume checks is unchanged (the
    student's config and vocabulary, the steps, the batches, the seed, and
    under "settings", by flag name, every setting that shapes the run: the
    learning rate, alpha, the optimizer, the teacher, the training file, ...)."""
    flags = {"--task": task.name}
    for key, value in dataclasses.asdict(settings).items():
        if key == "augment":
            flags["--no-augment"] = not value
        elif key not in NOT_COMPARED:
            flags[f"--{key.replace('_', '-')}"] = value
    if record is not None:
        teacher = record["teacher"]
        weights = Path(teacher) / "model.safetensors" if teacher is not None else None
        flags["--teacher"] = file_identity(weights) if weights is not None and weights.is_file() else teacher
        flags["--no-teacher"] = not record["distilled"]
        flags["--train"] = file_identity(record["train_file"])
        flags["--eval"] = file_identity(record["evaluated_on"])     # picks the epoch the folder keeps
    return {"task": task.name, "total_steps": total_steps, "batch_size": settings.batch_size, "seed": settings.seed,
            "grad_accum_steps": 1, "model_config": model.config.to_dict(),
            "vocabulary_fingerprint": vocabulary_fingerprint(tokenizer), "flags": flags}


# Tang et al.'s SST-2 student without its embeddings, "0.96M" (Table 3; --paper-config sst2): a BiLSTM on 600-d
# input (multichannel), 150 per direction, 2 x 4 x (150 x (600 + 150) + 2 x 150) = 902,400 (torch's two biases),
# fc1 300 x 200 + 200 = 60,200, fc2 200 x 2 + 2 = 402.
PAPER_SST2 = 963_002


def parameter_counts(student, teacher=None):
    """The student's parameters, all and without the embedding tables (Tang et
    al.'s 0.96M, Table 3, is the second kind), and the teacher's."""
    total = student.num_parameters()
    tables = sum(p.numel() for name, p in student.named_parameters() if "embedding" in name)   # multichannel: 2
    return {"parameters": total, "parameters_without_embeddings": total - tables, "paper_parameters": PAPER_SST2,
            "teacher_parameters": sum(p.numel() for p in teacher.model.parameters()) if teacher else None}


def describe_run(task, record, steps_per_epoch, total_steps, counts):
    """The line printed when training starts."""
    return (f"{task.name}: {record['train_examples']:,} training examples, {record['transfer_examples']:,} in the "
            f"transfer set, {steps_per_epoch:,} batches of {record['settings']['batch_size']} per epoch, "
            f"{total_steps:,} steps; student: {counts['parameters']:,} parameters "
            f"({counts['parameters_without_embeddings']:,} without the embeddings; Tang et al.'s SST-2 student: "
            f"{PAPER_SST2:,}, 0.96M), "
            f"embeddings from {record['embeddings_start']}")
