"""Distilling a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019).

Tang et al. train a small student (minibert/lstm.py: embeddings -> BiLSTM ->
ReLU layer -> logits z^(S), siamese for sentence pairs) to reproduce a
fine-tuned BERT's *logits* z^(B) on many more sentences than the labelled
training set. This file reads in the paper's order ([Tang] section 3):

  1. the student's inputs: words (or the teacher's word pieces) and the
     embeddings the student starts from;
  2. the transfer set ("Data Augmentation for Distillation"): the training
     examples plus `n_iter` perturbed copies of each (minibert/augment.py);
  3. the teacher's logits z^(B) on every transfer example, computed once;
  4. THE loss ("Distillation Objective"), on logits:
         L = alpha * CE(z^(S), gold label) + (1 - alpha) * ||z^(B) - z^(S)||^2
  5. the run: training.train with Adadelta, the best epoch kept.

What does not teach the lesson (settings and checks, the student's tokenizers,
word vectors, the logit cache, the student folder) is in minibert/support/.

Reference: [Tang] Tang, Lu, Liu, Mou, Vechtomova, Lin 2019, "Distilling
Task-Specific Knowledge from BERT into Simple Neural Networks", arXiv:1903.12136;
the authors' code castorini/d-bert (docs/papers.md 2.2).
"""

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.augment import PosLexicon, transfer_set
from minibert.finetuning import BestEpoch, LengthGroupedBatches, evaluate, load_task_model, run_model
from minibert.heads import IGNORE_INDEX
from minibert.lstm import BiLSTMClassifier, StudentConfig
from minibert.support.distillation_run import Teacher, describe_run, parameter_counts, resume_config, run_record
from minibert.support.distillation_settings import (DistillationSettings, check_files, check_run,  # noqa: F401
                                                    check_teacher_folder, is_pair_task, pos_file_path)
from minibert.support.errors import MiniBertError
from minibert.support.outputs import CHECKPOINT
from minibert.support.seeds import seed_from
from minibert.support.student_batches import collate_student
from minibert.support.student_folder import STUDENT_FILE, load_student, previous_best, save_student  # noqa: F401
from minibert.support.student_tokenizers import PieceTokenizer, WordTokenizer, build_vocabulary
from minibert.support.transfer_cache import cached_transfer_set
from minibert.support.word_vectors import StartingEmbeddings
from minibert.tasks import CLASSIFICATION, make_task
from minibert.support.task_files import ClassificationExample
from minibert.training import TrainingConfig, setup_context, train

# ----------------------------------------------------------------------------
# 1. The student's inputs
# ----------------------------------------------------------------------------


def student_tokenizer(settings, teacher, transfer):
    """Tang et al.'s student reads words: a vocabulary of the transfer set
    (training examples and augmented samples, "[MASK]" one word). With
    --embeddings teacher it reads the teacher's word pieces instead."""
    if settings.embeddings == "teacher":
        return PieceTokenizer(teacher.tokenizer, settings.max_seq_len)
    texts = [e.text_a for e in transfer] + [e.text_b for e in transfer if e.text_b]
    return WordTokenizer(build_vocabulary(texts, settings.min_count), settings.max_seq_len)


def build_student(task, tokenizer, settings, teacher=None):
    """(a fresh student, what its embeddings started from: Tang's random
    U(-0.25, 0.25), a word-vector file, or the teacher's word-piece
    embeddings). Its initial weights depend on the seed alone."""
    start = StartingEmbeddings(settings, tokenizer, teacher.model.base_model if teacher else None)
    config = StudentConfig(vocab_size=tokenizer.vocab_size, num_classes=len(task.labels), embedding_dim=start.dim,
                           hidden_size=settings.hidden_size, fc_size=settings.fc_size, pair=is_pair_task(task),
                           pooling=settings.pooling, dropout=settings.dropout, padding_id=tokenizer.pad_id,
                           embeddings_mode=settings.embeddings_mode)      # rand, static, nonstatic, multichannel
    torch.manual_seed(seed_from(settings.seed, "student"))
    model = BiLSTMClassifier(config)
    start.fill(model.embedding.weight, config.padding_id)
    model.copy_static_channel()                 # multichannel: the frozen copy starts from the same vectors
    return model, start.report


# ----------------------------------------------------------------------------
# 2. The transfer set and 3. the teacher's logits on it
# ----------------------------------------------------------------------------


def load_teacher(folder, task_name=None):
    """A fine-tuned sentence classifier folder (of `task_name`, if given)."""
    check_teacher_folder(folder, task_name, CLASSIFICATION)
    model, task, tokenizer, record = load_task_model(folder, make_task)
    return Teacher(model.eval(), task, tokenizer, record, Path(folder))


def make_transfer_set(examples, lexicon, settings, progress=False):
    """The training examples, then their augmented samples (no label) in the
    order augment.transfer_set makes them. Each sample keeps its source's
    line number, so a message about it points at the sentence it came from."""
    texts_b = None if all(e.text_b is None for e in examples) else [e.text_b or "" for e in examples]
    samples = transfer_set([e.text_a for e in examples], texts_b, lexicon, n_iter=settings.n_iter,
                           seed=settings.seed, p_mask=settings.p_mask, p_pos=settings.p_pos, p_ng=settings.p_ng,
                           max_n=settings.max_ngram, progress=progress, pair_scheme=settings.pair_augment)
    return list(examples) + [ClassificationExample(a, b, None, None, examples[i].line) for a, b, i in samples]


def teacher_logits(teacher, examples, batch_size=128, device="cpu", progress=True, bf16=False):
    """The teacher's logits z^(B) for every example, (N, K) float32, in
    large length-sorted batches without gradients (under bfloat16 autocast
    with bf16). The features are made by the teacher's own task object, as
    it was fine-tuned; gold labels play no part."""
    unlabelled = [dataclasses.replace(e, label=None) for e in examples]
    features = teacher.task.features(unlabelled, teacher.tokenizer, teacher.record["max_seq_len"])
    def logits_as_arrays(logits, batch):     # run_model's `outputs`: one (K,) array per row (not probabilities)
        return list(logits.float().cpu().numpy())
    rows = run_model(teacher.model, features, teacher.tokenizer.pad_id, logits_as_arrays, batch_size, device, progress,
                     bf16=bf16)
    return np.stack(rows).astype(np.float32)


def transfer_set_with_logits(teacher, examples, train_file, settings, device="cpu", progress=True):
    """(transfer examples, teacher logits (N, K), whether the cache answered):
    augment and ask the teacher once; a later run with the same teacher, data
    and settings reads both back from the cache (support/transfer_cache.py)."""
    def augment_and_ask_the_teacher():
        transfer = list(examples)
        if settings.augment:
            lexicon = PosLexicon.from_file(pos_file_path(settings.pos_file))
            transfer = make_transfer_set(examples, lexicon, settings, progress)
        return transfer, teacher_logits(teacher, transfer, settings.teacher_batch_size, device, progress,
                                        bf16=settings.bf16)
    return cached_transfer_set(augment_and_ask_the_teacher, teacher.folder, train_file, settings, teacher.task,
                               examples, progress)


# ----------------------------------------------------------------------------
# Batches: the student's ids, the gold label, the teacher's logits
# ----------------------------------------------------------------------------


def student_features(task, examples, tokenizer, logits=None):
    """One dict per example: input_ids (and input_ids_b for a pair) as int32
    arrays, labels (the gold class, or IGNORE_INDEX for an augmented sample),
    and teacher_logits (K,) when the teacher's logits are given."""
    ids_a = tokenizer.encode_many([e.text_a for e in examples])
    ids_b = tokenizer.encode_many([e.text_b or "" for e in examples]) if is_pair_task(task) else None
    features = []
    for i, example in enumerate(examples):
        if example.label is not None and example.label not in task.label_to_id:
            raise MiniBertError(f"line {example.line}: label {example.label!r} is not one of "
                                f"{task.name}'s labels {task.labels}")
        feature = {"input_ids": np.asarray(ids_a[i], dtype=np.int32),
                   "labels": IGNORE_INDEX if example.label is None else task.label_to_id[example.label]}
        if ids_b is not None:
            feature["input_ids_b"] = np.asarray(ids_b[i], dtype=np.int32)
        if logits is not None:
            feature["teacher_logits"] = logits[i]
        features.append(feature)
    return features


def student_logits(model, batch):
    """z^(S) (B, K): run_model's `logits_of` for the student."""
    return model(batch["input_ids"], batch["attention_mask"], batch.get("input_ids_b"), batch.get("attention_mask_b"))


# ----------------------------------------------------------------------------
# 4. THE loss ([Tang] section 3, "Distillation Objective")
# ----------------------------------------------------------------------------


def distillation_loss(z_student, z_teacher, labels, alpha, distill_term="mse", unlabelled="none"):
    """L on one batch of logits z^(S), z^(B) (B, K) and gold labels (B,):

        L         = alpha * L_CE + (1 - alpha) * L_distill
        L_CE      = -log softmax(z^(S))[gold]     mean over the examples with a gold label
        L_distill = (1/K) ||z^(B) - z^(S)||^2     mean over all examples

    on logits, before any softmax. distill_term "squared-l2" drops the 1/K:
    the paper's equation; the default "mse" is torch's MSE, the authors' code.
    An augmented sample has no gold label (IGNORE_INDEX): only L_distill sees
    it, unless unlabelled="teacher" gives it the teacher's argmax as its label
    (ce_targets). Returns (L, sums): each weighted term summed over the batch
    (a term of weight 0 left out); training.train divides each sum by
    `averaged_over` for its whole step, which is L."""
    labels = ce_targets(labels, z_teacher, unlabelled)
    # exercise: distillation-loss
    sums = {}
    if alpha < 1:      # the paper's squared distance; "mse" divides it by K, as torch's MSE and the authors' code
        squared_distance = ((z_student - z_teacher) ** 2).sum(-1)         # (B,): ||z^(B) - z^(S)||^2
        if distill_term == "mse":
            squared_distance = squared_distance / z_student.shape[-1]
        sums["distill"] = (1 - alpha) * squared_distance.sum()
    if alpha > 0:      # the cross-entropy skips the rows labelled IGNORE_INDEX
        sums["gold"] = alpha * F.cross_entropy(z_student, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    counts = averaged_over(labels, alpha)
    return sum(sums[term] / max(counts[term], 1) for term in sums), sums     # L: each sum over its count
    # end exercise


def ce_targets(labels, z_teacher, unlabelled="none"):
    """The labels L_CE reads: as given, or with unlabelled="teacher" each
    IGNORE_INDEX replaced by the teacher's argmax (the paper's reading for
    the transfer set, docs/guide.md)."""
    teacher_labels = unlabelled == "teacher" and z_teacher is not None
    return torch.where(labels == IGNORE_INDEX, z_teacher.argmax(-1), labels) if teacher_labels else labels


def averaged_over(labels, alpha):
    """How many examples each term of L is a mean over: all of them for
    L_distill, those with a gold label for L_CE."""
    counts = {}
    if alpha < 1:
        counts["distill"] = len(labels)
    if alpha > 0:
        counts["gold"] = int((labels != IGNORE_INDEX).sum())
    return counts


class DistillationObjective:
    """distillation_loss in training.train's objective interface. Each term's
    "accuracy" is the student's agreement with the teacher's argmax (distill)
    or with the gold label (gold)."""

    def __init__(self, alpha, distill_term="mse", unlabelled="none"):
        self.alpha, self.distill_term, self.unlabelled = alpha, distill_term, unlabelled

    def counts(self, batch):
        return averaged_over(ce_targets(batch["labels"], batch.get("teacher_logits"), self.unlabelled), self.alpha)

    def losses(self, model, batch):
        z_student, labels = student_logits(model, batch).float(), batch["labels"]
        z_teacher = batch["teacher_logits"].float() if "teacher_logits" in batch else None
        _, sums = distillation_loss(z_student, z_teacher, labels, self.alpha, self.distill_term, self.unlabelled)
        labels, predicted = ce_targets(labels, z_teacher, self.unlabelled), z_student.argmax(-1)
        right = {"distill": lambda: (predicted == z_teacher.argmax(-1)).sum(),         # agrees with the teacher
                 "gold": lambda: ((predicted == labels) & (labels != IGNORE_INDEX)).sum()}  # right on a gold label
        return {term: (value, right[term]()) for term, value in sums.items()}


def optimizer_factory(settings):
    """training.train's optimizer_factory: Adadelta (rho 0.95, as d-bert's
    distill_birnn.py) or Adam, at a constant learning rate (the authors' code
    has no schedule)."""
    def make(model):
        parameters = [p for p in model.parameters() if p.requires_grad]
        optimizer = (torch.optim.Adadelta(parameters, lr=settings.lr, rho=settings.rho,
                                          weight_decay=settings.weight_decay) if settings.optimizer == "adadelta"
                     else torch.optim.Adam(parameters, lr=settings.lr, weight_decay=settings.weight_decay))
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return make


# ----------------------------------------------------------------------------
# 5. The run
# ----------------------------------------------------------------------------


def predict_student(model, task, tokenizer, examples, features=None, batch_size=256, device="cpu", progress=False,
                    bf16=False):
    """The classification task's predictions from the student's probabilities
    (task.outputs); bf16: under bfloat16 autocast."""
    features = features if features is not None else student_features(task, examples, tokenizer)
    outputs = run_model(model, features, tokenizer.pad_id, task.outputs, batch_size, device, progress, bf16=bf16,
                        collate=collate_student, logits_of=student_logits)
    return task.predict(examples, features, outputs)


def evaluate_student(model, task, tokenizer, examples, features=None, batch_size=256, device="cpu", progress=False,
                     bf16=False):
    """(metrics, predictions): the classification task's own metrics."""
    predictions = predict_student(model, task, tokenizer, examples, features, batch_size, device, progress, bf16)
    return task.metrics(examples, predictions), predictions


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

    def evaluate_epoch(trained):
        return evaluate_student(trained, task, tokenizer, eval_examples, eval_features, settings.eval_batch_size,
                                context.device, bf16=settings.bf16)[0]

    def save_best(trained, metrics):         # BestEpoch calls it after adding the epoch to its history
        save_student(trained, tokenizer, task, output, {**record, "metrics": metrics,
                                                        "best_epoch": len(best_epoch.history)})
    previous = previous_best(output, task.main_metric)[0] if resume else None    # a killed run's best, to beat
    best_epoch = BestEpoch(task.main_metric, evaluate_epoch, save_best, previous)
    total_steps, counts = settings.epochs * len(batches), parameter_counts(model, teacher)
    config = TrainingConfig(total_steps=total_steps, learning_rate=settings.lr, weight_decay=settings.weight_decay,
                            max_grad_norm=settings.max_grad_norm, seed=settings.seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches), evaluate_when_stopped=False,
                            max_minutes=settings.max_minutes, bf16=settings.bf16,
                            eval_name=Path(eval_file).name if eval_file is not None else "held-out")
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

