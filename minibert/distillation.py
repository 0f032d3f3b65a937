"""Distilling a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019).

Tang et al. train a small student (minibert/lstm.py: embeddings -> BiLSTM ->
ReLU layer -> logits z^(S), siamese for sentence pairs) to reproduce a
fine-tuned BERT's *logits* z^(B) on many more sentences than the labelled
training set. This file reads in the paper's order ([Tang] section 3):

  1. the student's inputs: words (or the teacher's pieces), starting vectors;
  2. the transfer set ("Data Augmentation for Distillation"): the training
     examples plus `n_iter` perturbed copies of each (minibert/augment.py);
  3. the teacher's logits z^(B) on every transfer example, computed once;
  4. THE loss ("Distillation Objective"), on logits:
         L = alpha * CE(z^(S), gold label) + (1 - alpha) * ||z^(B) - z^(S)||^2

The run (runs.training.train with Adadelta, the best epoch kept) is in
minibert/runs/distillation.py. [Tang] Tang, Lu, Liu, Mou, Vechtomova, Lin
2019, arXiv:1903.12136; the authors' code castorini/d-bert (docs/papers.md 2.2).
"""

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from minibert.augment import transfer_set
from minibert.finetuning import run_model
from minibert.heads import IGNORE_INDEX
from minibert.lstm import BiLSTMClassifier
from minibert.support.distillation.settings import is_pair_task
from minibert.support.distillation.student_config import StudentConfig
from minibert.support.distillation.student_inputs import (PieceTokenizer, WordTokenizer, build_vocabulary,
                                                          collate_student)
from minibert.support.distillation.word_vectors import StartingEmbeddings
from minibert.support.errors import MiniBertError
from minibert.support.seeds import seed_from
from minibert.support.task_files import ClassificationExample

# ---- 1. The student's inputs --------------------------------------------------------------------


def student_tokenizer(settings, teacher, transfer):
    """Tang et al.'s student reads words: a vocabulary of the transfer set
    (training examples and augmented samples, "[MASK]" one word). With
    settings.embeddings "teacher" it reads the teacher's word pieces instead."""
    if settings.embeddings == "teacher":
        return PieceTokenizer(teacher.tokenizer, settings.max_seq_len)
    texts = [e.text_a for e in transfer] + [e.text_b for e in transfer if e.text_b]
    return WordTokenizer(build_vocabulary(texts, settings.min_count), settings.max_seq_len)


def build_student(task, tokenizer, settings, teacher=None):
    """(a fresh student, what its embeddings started from: Tang's random U(-0.25, 0.25), a
    word-vector file, or the teacher's word-piece embeddings); its weights depend on the seed alone."""
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


# ---- 2. The transfer set and 3. the teacher's logits on it --------------------------------------


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
    """The teacher's logits z^(B) for every example, (N, K) float32, in large length-sorted
    batches without gradients (bf16: under bfloat16 autocast). The features are made by the
    teacher's own task object, as it was fine-tuned; gold labels play no part."""
    unlabelled = [dataclasses.replace(e, label=None) for e in examples]
    features = teacher.task.features(unlabelled, teacher.tokenizer, teacher.record["max_seq_len"])
    def logits_as_arrays(logits, batch):     # run_model's `outputs`: one (K,) array per row (not probabilities)
        return list(logits.float().cpu().numpy())
    rows = run_model(teacher.model, features, teacher.tokenizer.pad_id, logits_as_arrays, batch_size, device, progress,
                     bf16=bf16)
    return np.stack(rows).astype(np.float32)


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


# ---- 4. THE loss ([Tang] section 3, "Distillation Objective") -----------------------------------


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
    (a term of weight 0 left out); training.training_step divides each sum by
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
    """distillation_loss in training.training_step's objective interface. Each term's
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


def predict_student(model, task, tokenizer, examples, features=None, batch_size=256, device="cpu", progress=False,
                    bf16=False):
    """The classification task's predictions from the student's probabilities
    (task.outputs; task.metrics scores them); bf16: under bfloat16 autocast."""
    features = features if features is not None else student_features(task, examples, tokenizer)
    outputs = run_model(model, features, tokenizer.pad_id, task.outputs, batch_size, device, progress, bf16=bf16,
                        collate=collate_student, logits_of=student_logits)
    return task.predict(examples, features, outputs)

