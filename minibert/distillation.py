"""Distilling a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019).

Tang et al. train a small student to reproduce a fine-tuned BERT's *logits*
on many more sentences than the labelled training set ([Tang] section 3):

  1. the transfer set: the training examples plus `n_iter` perturbed copies
     of each (masking, POS-guided word replacement, n-gram sampling;
     minibert/augment.py);
  2. the teacher's logits z^(B) on every transfer example, computed once (in
     large batches, by finetuning.run_model) and cached on disk;
  3. the student (minibert/lstm.py: embeddings -> BiLSTM -> ReLU MLP ->
     logits z^(S); siamese for sentence pairs) trained with

         L = alpha * CE(z^(S), gold label) + (1 - alpha) * L_distill,
         L_distill = MSE(z^(S), z^(B)) = (1/K) ||z^(B) - z^(S)||^2      (on logits, before softmax)

     the cross-entropy only on the examples that have a gold label (the
     augmented ones have none), by training.train with Adadelta, evaluated
     each epoch, the best epoch kept.

What this module holds, top to bottom:

  WordTokenizer, PieceTokenizer   the student's text -> ids: a word vocabulary built
                                  from the transfer set, or the teacher's WordPiece
  read_word_vectors, teacher_embedding_matrix
                                  the embeddings the student may start from
  Teacher, load_teacher           a finetune.py classifier folder
  make_transfer_set, teacher_logits, transfer_set_with_logits
                                  the transfer set and the (cached) teacher logits
  student_features, collate_student, StudentBatches
                                  training batches (input ids, mask, teacher logits, gold label)
  DistillationObjective, distillation_loss
                                  the loss, in training.train's objective interface
  distill                         the whole run
  save_student, load_student, predict_file
                                  a student folder: student.safetensors, its vocabulary,
                                  student.json

Choices and their reasons are in DistillationSettings' comments; the paper's
and the authors' code's values are in docs/papers.md section 2.

Reference: [Tang] Tang, Lu, Liu, Mou, Vechtomova, Lin 2019, "Distilling
Task-Specific Knowledge from BERT into Simple Neural Networks", arXiv:1903.12136;
the authors' code castorini/d-bert (docs/papers.md 2.2).
"""

import dataclasses
import hashlib
import json
import math
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from minibert.augment import MASK, PosLexicon, split_words, transfer_set
from minibert.checkpoints.safetensors import load_safetensors, save_safetensors
from minibert.support.devices import move_to_device
from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write, read_json_object, write_json
from minibert.finetuning import LengthGroupedBatches, evaluate, load_task_model, read_task_record, run_model
from minibert.support.hub import default_cache_dir, file_sha256
from minibert.lstm import BiLSTMClassifier, StudentConfig
from minibert.support.seeds import generator_for, seed_from
from minibert.tasks import CLASSIFICATION, make_task
from minibert.tasks.readers import ClassificationExample
from minibert.tokenization import load_tokenizer
from minibert.training import TrainingConfig, setup_context, train

STUDENT_FILE = "student.json"
WEIGHTS_FILE = "student.safetensors"
VOCAB_FILE = "vocab.txt"
SINGLE_SENTENCE_TASKS = ("sst2",)          # the others of CLASSIFICATION are sentence pairs: a siamese student
NO_LABEL = -100                            # an augmented example's gold label: none (cross-entropy ignores it)
CACHE_FORMAT = 1                           # bump when the cache file's content changes meaning
REPO = Path(__file__).resolve().parent.parent
DEFAULT_POS_FILE = REPO.parent / "shared" / "data" / "conll2003" / "eng.train"


def is_pair_task(task):
    return task.name not in SINGLE_SENTENCE_TASKS


# ----------------------------------------------------------------------------
# The settings of a run
# ----------------------------------------------------------------------------


@dataclass
class DistillationSettings:
    """Everything distill() needs besides the data and the teacher. None
    means "the default for this task" (resolved by `resolved`)."""

    # the student (minibert/lstm.py; defaults: d-bert's confs/birnn_sst2.json)
    embeddings: str = "random"               # "random" (U(-0.25, 0.25), Tang's "rand"), "teacher", or a
                                             # word2vec/GloVe text file
    embedding_dim: Optional[int] = None      # 300; a vectors file's own; the teacher's width
    hidden_size: Optional[int] = None        # per direction: 150 (single sentences), 300 (pairs)
    fc_size: int = 200
    pooling: str = "final"                   # "final" states (the authors' default) or "max" over time
    dropout: float = 0.1
    min_count: int = 1                       # a word enters the vocabulary when it occurs this often
    max_seq_len: int = 128                   # words (or word pieces) per text for the student
    freeze_embeddings: bool = False          # Tang's "static" mode; default "non-static" (trained)
    # the transfer set ([Tang] section 3; minibert/augment.py)
    augment: bool = True
    n_iter: Optional[int] = None             # samples per example: 20 (single sentences), 10 (pairs)
    p_mask: float = 0.1
    p_pos: float = 0.1
    p_ng: float = 0.25
    max_ngram: int = 5
    pos_file: Optional[str] = None           # default: ../shared/data/conll2003/eng.train
    cache_dir: Optional[str] = None          # default: $MINIBERT_CACHE/distill (~/.cache/minibert/distill)
    teacher_batch_size: int = 128
    # the loss and the training
    # alpha: 0, the distillation term alone. The augmented samples (about 95%
    # of the transfer set at n_iter 20) have no gold label, and the teacher's
    # logits on the originals already carry it. The authors' code weighs both
    # terms 1 (confs/base.json): that is --alpha 0.5, because Adadelta's step
    # hardly depends on the loss's overall scale.
    alpha: Optional[float] = None            # 0.0 with a teacher; 1.0 (gold labels only) without
    optimizer: str = "adadelta"              # d-bert's Adadelta(rho=0.95); or "adam"
    lr: Optional[float] = None               # 1.0 for Adadelta (its usual value), 5e-4 for Adam (d-bert's lr)
    rho: float = 0.95
    weight_decay: float = 0.0
    max_grad_norm: float = 0.0               # 0: no clipping (d-bert clips at 30000, which never binds)
    epochs: int = 30
    batch_size: int = 50
    eval_batch_size: int = 256
    seed: int = 0
    max_train_examples: Optional[int] = None
    max_minutes: Optional[float] = None

    def resolved(self, task, with_teacher):
        """A copy with every None replaced by its value for this task."""
        pair = is_pair_task(task)
        values = dataclasses.asdict(self)
        defaults = {"hidden_size": 300 if pair else 150, "n_iter": 10 if pair else 20,
                    "alpha": 0.0 if with_teacher else 1.0, "lr": 1.0 if self.optimizer == "adadelta" else 5e-4}
        for key, value in defaults.items():
            if values[key] is None:
                values[key] = value
        return DistillationSettings(**values)


# ----------------------------------------------------------------------------
# The student's tokenizers
# ----------------------------------------------------------------------------

SPECIAL_WORDS = ("[PAD]", "[UNK]", MASK)     # ids 0, 1, 2


def words_of(text):
    """split_words, except that the augmenter's "[MASK]" stays one word
    (split_words would give "[", "mask", "]")."""
    words = []
    for piece in re.split(r"(\[MASK\])", text):
        words.extend([MASK] if piece == MASK else split_words(piece))
    return words


def build_vocabulary(texts, min_count=1):
    """[PAD], [UNK], [MASK], then every word occurring at least `min_count`
    times, most frequent first (ties alphabetically, so the order is a
    function of the texts alone)."""
    counts = Counter(word for text in texts for word in words_of(text))
    for special in SPECIAL_WORDS:
        counts.pop(special, None)
    words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    return list(SPECIAL_WORDS) + words


class WordTokenizer:
    """A word vocabulary: text -> word ids, unknown words -> [UNK] (Tang et
    al.'s student reads words, not word pieces)."""

    kind = "words"

    def __init__(self, words, max_seq_len):
        if list(words[:len(SPECIAL_WORDS)]) != list(SPECIAL_WORDS):
            raise MiniBertError(f"a word vocabulary must start with {', '.join(SPECIAL_WORDS)}")
        self.words = list(words)
        self.ids = {word: i for i, word in enumerate(self.words)}
        self.pad_id, self.unk_id, self.mask_id = 0, 1, 2
        self.vocab_size = len(self.words)
        self.max_seq_len = max_seq_len

    def encode_many(self, texts):
        """One list of ids per text: at most max_seq_len, at least one ([UNK]
        for an empty text: the LSTM needs a real token to read)."""
        encoded = []
        for text in texts:
            ids = [self.ids.get(word, self.unk_id) for word in words_of(text)[:self.max_seq_len]]
            encoded.append(ids or [self.unk_id])
        return encoded

    def save(self, folder):
        with atomic_write(Path(folder) / VOCAB_FILE, mode="w") as f:
            f.write("".join(word + "\n" for word in self.words))

    @classmethod
    def load(cls, folder, max_seq_len):
        path = Path(folder) / VOCAB_FILE
        try:
            words = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise MiniBertError(f"{path}: cannot read the student's vocabulary ({e})") from None
        if words and words[-1] == "":
            words.pop()
        for number, word in enumerate(words, start=1):
            if not word or word != word.strip():
                raise MiniBertError(f"{path}: line {number}: expected one word without spaces, got {word!r}")
        if len(set(words)) != len(words):
            raise MiniBertError(f"{path}: a word appears twice")
        if tuple(words[:3]) != SPECIAL_WORDS:
            raise MiniBertError(f"{path}: expected the first lines to be {', '.join(SPECIAL_WORDS)}")
        return cls(words, max_seq_len)


class PieceTokenizer:
    """The teacher's own tokenizer (WordPiece or SentencePiece), without
    [CLS]/[SEP]: the student reads the teacher's pieces (--embeddings teacher)."""

    kind = "teacher"

    def __init__(self, tokenizer, max_seq_len):
        self.tokenizer = tokenizer
        self.pad_id, self.unk_id = tokenizer.pad_id, tokenizer.unk_id
        self.vocab_size = tokenizer.vocab_size
        self.max_seq_len = max_seq_len

    def encode_many(self, texts):
        encodings = self.tokenizer.encode_many(texts, max_length=self.max_seq_len + 2)
        return [e.ids[1:-1] or [self.unk_id] for e in encodings]      # drop [CLS] ... [SEP]

    def save(self, folder):
        self.tokenizer.save(folder)


# ----------------------------------------------------------------------------
# Embeddings to start from
# ----------------------------------------------------------------------------


def read_word_vectors(path, words, dim=None):
    """({word: vector}, dimension) for the `words` found in a word2vec or
    GloVe text file: "word x1 x2 ... xd" per line, an optional first line
    "count dim". Words are matched lower-cased (the vocabulary is); the first
    vector of a word wins (files list frequent spellings first). Words of the
    file that are not in the vocabulary are skipped."""
    path = Path(path)
    wanted, found, file_dim = set(words), {}, None
    try:
        f = open(path, "rb")
    except OSError as e:
        raise MiniBertError(f"--embeddings {path}: cannot read ({e.strerror or e})") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip()
            except UnicodeDecodeError:
                raise MiniBertError(f"{path}: line {number}: not UTF-8 text (binary word2vec files are not read: "
                                    f"convert to the text format)") from None
            if not line:
                continue
            fields = line.split()
            if number == 1 and len(fields) == 2 and all(x.isdigit() for x in fields):
                file_dim = int(fields[1])                         # word2vec's "count dim" header
                continue
            if file_dim is None:
                file_dim = len(fields) - 1
                if file_dim < 1:
                    raise MiniBertError(f"{path}: line {number}: expected a word and its vector's numbers")
            word, *values = line.rsplit(None, file_dim)          # a word may hold spaces (GloVe 840B)
            if len(values) != file_dim:
                raise MiniBertError(f"{path}: line {number}: {len(values)} numbers; expected {file_dim}")
            word = word.lower()
            if word in wanted and word not in found:
                try:
                    vector = np.array(values, dtype=np.float32)
                except ValueError:
                    raise MiniBertError(f"{path}: line {number}: expected {file_dim} numbers after the word") from None
                if not np.isfinite(vector).all():
                    raise MiniBertError(f"{path}: line {number}: a vector value is not finite")
                found[word] = vector
    if file_dim is None:
        raise MiniBertError(f"{path}: no word vectors in the file")
    if dim is not None and dim != file_dim:
        raise MiniBertError(f"{path}: holds {file_dim}-dimensional vectors, but --embedding-dim is {dim} "
                            f"(leave it out to take the file's)")
    return found, file_dim


def teacher_embedding_matrix(encoder, dim, seed):
    """The teacher's word-piece embedding matrix (V, E), at width `dim`: as
    it is when dim equals E, else times a fixed random projection P (E, dim)
    with entries N(0, 1/dim), which keeps lengths and angles roughly
    (Johnson-Lindenstrauss) and is a function of the seed alone."""
    weight = encoder.embeddings.word_embeddings.weight.detach().float()     # (V, E)
    if dim == weight.shape[1]:
        return weight.clone()
    projection = torch.randn(weight.shape[1], dim, generator=generator_for(seed, "embedding projection"))
    return weight @ projection / math.sqrt(dim)                              # (V, dim)


# ----------------------------------------------------------------------------
# The teacher
# ----------------------------------------------------------------------------


@dataclass
class Teacher:
    """A finetune.py classifier: the model, its task object, its tokenizer,
    task.json, and its folder."""
    model: torch.nn.Module
    task: object
    tokenizer: object
    record: dict
    folder: Path


def load_teacher(folder, task_name=None):
    """A fine-tuned *sentence classifier* folder, or a one-line error naming
    what it is instead (a NER or SQuAD model, a pretrained model without a
    head, another task than `task_name`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MiniBertError(f"--teacher {folder}: no such folder")
    if not (folder / "task.json").is_file():
        raise MiniBertError(f"--teacher {folder}: not a finetune.py classifier folder (no task.json: a pretrained "
                            f"model? fine-tune it first with finetune.py --task ...)")
    record = read_task_record(folder)
    if record["task"] not in CLASSIFICATION:
        raise MiniBertError(f"--teacher {folder}: a {record['task']} model; distillation needs a sentence "
                            f"classifier ({', '.join(CLASSIFICATION)})")
    if task_name is not None and task_name != record["task"]:
        raise MiniBertError(f"--task {task_name}: the teacher {folder} was fine-tuned for {record['task']}")
    model, task, tokenizer, record = load_task_model(folder, make_task)
    return Teacher(model.eval(), task, tokenizer, record, folder)


class _Logits:
    """A stand-in task for finetuning.run_model whose outputs are the logits
    themselves: the distillation loss compares logits, not probabilities."""

    @staticmethod
    def outputs(logits, batch):
        return list(logits.float().cpu().numpy())


def teacher_logits(teacher, examples, batch_size=128, device="cpu", progress=True):
    """The teacher's logits z^(B) for every example, (N, K) float32, in
    large length-sorted batches without gradients (finetuning.run_model).
    The examples' features are made by the teacher's own task object, as it
    was fine-tuned; gold labels play no part."""
    unlabelled = [dataclasses.replace(e, label=None) for e in examples]
    features = teacher.task.features(unlabelled, teacher.tokenizer, teacher.record["max_seq_len"])
    outputs = run_model(teacher.model, _Logits, features, teacher.tokenizer.pad_id, batch_size, device, progress)
    return np.stack(outputs).astype(np.float32)


# ----------------------------------------------------------------------------
# The transfer set and its cache
# ----------------------------------------------------------------------------


def pos_lexicon(pos_file=None):
    """The part-of-speech lexicon for POS-guided replacement: --pos-file, or
    CoNLL-2003's training file in ../shared/data."""
    if pos_file is None:
        if not DEFAULT_POS_FILE.is_file():
            raise MiniBertError(f"augmentation needs a part-of-speech lexicon and {DEFAULT_POS_FILE} is absent: "
                                f"pass --pos-file FILE ('word TAG' lines, e.g. CoNLL-2003's eng.train) or --no-augment")
        pos_file = DEFAULT_POS_FILE
    if not Path(pos_file).is_file():
        raise MiniBertError(f"--pos-file {pos_file}: no such file")
    return PosLexicon.from_file(pos_file)


def make_transfer_set(examples, lexicon, settings, progress=False):
    """The training examples, then their augmented samples (no label) in the
    order augment.transfer_set makes them. Each sample keeps its source's
    line number, so a message about it points at the sentence it came from."""
    texts_b = None if all(e.text_b is None for e in examples) else [e.text_b or "" for e in examples]
    samples = transfer_set([e.text_a for e in examples], texts_b, lexicon, n_iter=settings.n_iter,
                           seed=settings.seed, p_mask=settings.p_mask, p_pos=settings.p_pos, p_ng=settings.p_ng,
                           max_n=settings.max_ngram, progress=progress)
    return list(examples) + [ClassificationExample(a, b, None, None, examples[i].line) for a, b, i in samples]


def teacher_fingerprint(folder):
    """A SHA-256 of the files that decide the teacher's logits: its config,
    weights, head, task.json (labels, max_seq_len) and tokenizer files."""
    digest = hashlib.sha256()
    names = ("config.json", "model.safetensors", "pytorch_model.bin", "head.safetensors", "task.json",
             "vocab.txt", "spiece.model", "tokenizer.json", "tokenizer_config.json")
    for name in names:
        path = Path(folder) / name
        if path.is_file():
            digest.update(f"{name}:{file_sha256(path)}\n".encode())
    return digest.hexdigest()


def transfer_key(teacher_folder, train_file, settings, task, n_examples):
    """The cache file's name: a SHA-256 of everything the cached numbers
    depend on (the teacher's files, the training file's bytes, how many of
    its examples are used, the augmentation settings and the POS lexicon).
    Change any of them and the key changes, so the cache is recomputed."""
    parts = {"format": CACHE_FORMAT, "teacher": teacher_fingerprint(teacher_folder),
             "data": file_sha256(train_file), "task": task.name, "examples": n_examples, "augment": settings.augment}
    if settings.augment:
        pos_file = settings.pos_file or DEFAULT_POS_FILE
        parts.update(n_iter=settings.n_iter, seed=settings.seed, p_mask=settings.p_mask, p_pos=settings.p_pos,
                     p_ng=settings.p_ng, max_ngram=settings.max_ngram,
                     pos_file=file_sha256(pos_file) if Path(pos_file).is_file() else None)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def save_transfer_cache(path, key, augmented, logits):
    """One .npz: the key (checked on reading), the augmented samples as
    UTF-8 JSON bytes ([[text_a, text_b, source line], ...]: no pickle needed
    to read them back) and the teacher's logits (N, K) for originals + samples."""
    texts = json.dumps([[e.text_a, e.text_b, e.line] for e in augmented]).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        np.savez(f, key=np.array(key), logits=logits, augmented=np.frombuffer(texts, dtype=np.uint8))


def load_transfer_cache(path, key, examples):
    """(transfer examples, logits) from a cache file, or None if the file is
    absent, unreadable or not for this key (then it is recomputed)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["key"]) != key:
                return None
            logits = data["logits"]
            texts = json.loads(data["augmented"].tobytes().decode("utf-8"))
    except Exception:   # a damaged or foreign file: recompute rather than fail
        return None
    if not all(isinstance(t, list) and len(t) == 3 for t in texts):
        return None
    augmented = [ClassificationExample(a, b, None, None, line) for a, b, line in texts]
    if logits.ndim != 2 or len(logits) != len(examples) + len(augmented):
        return None
    return list(examples) + augmented, logits.astype(np.float32)


def transfer_set_with_logits(teacher, examples, train_file, settings, device="cpu", progress=True):
    """(transfer examples, teacher logits (N, K), whether the cache answered).

    The first run augments, runs the teacher and writes the cache file
    CACHE_DIR/<transfer_key>.npz; a later run with the same teacher, data
    and settings reads it back and calls neither."""
    cache_dir = Path(settings.cache_dir) if settings.cache_dir else default_cache_dir() / "distill"
    key = transfer_key(teacher.folder, train_file, settings, teacher.task, len(examples))
    path = cache_dir / f"{key}.npz"
    cached = load_transfer_cache(path, key, examples)
    if cached is not None:
        if progress:
            tqdm.write(f"teacher logits: reusing {path}")
        return (*cached, True)
    if settings.augment:
        transfer = make_transfer_set(examples, pos_lexicon(settings.pos_file), settings, progress)
    else:
        transfer = list(examples)
    logits = teacher_logits(teacher, transfer, settings.teacher_batch_size, device, progress)
    try:
        save_transfer_cache(path, key, transfer[len(examples):], logits)
    except (MiniBertError, OSError) as e:     # a read-only cache folder costs time, not the run
        tqdm.write(f"warning: cannot write the teacher-logit cache {path} ({e})")
    return transfer, logits, False


# ----------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------


def student_features(task, examples, tokenizer):
    """One dict per example: input_ids (and input_ids_b for a pair) as int32
    arrays, labels (the gold class, or NO_LABEL), index (its row of the
    teacher's logits)."""
    ids_a = tokenizer.encode_many([e.text_a for e in examples])
    ids_b = tokenizer.encode_many([e.text_b or "" for e in examples]) if is_pair_task(task) else None
    features = []
    for i, example in enumerate(examples):
        if example.label is None:
            label = NO_LABEL
        elif example.label in task.label_ids:
            label = task.label_ids[example.label]
        else:
            raise MiniBertError(f"line {example.line}: label {example.label!r} is not one of "
                                f"{task.name}'s labels {task.labels}")
        feature = {"input_ids": np.asarray(ids_a[i], dtype=np.int32), "labels": label, "index": i}
        if ids_b is not None:
            feature["input_ids_b"] = np.asarray(ids_b[i], dtype=np.int32)
        features.append(feature)
    return features


def pad(sequences, pad_id):
    """Right-padded ids (B, T) and their attention mask (B, T), T the longest."""
    longest = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, :len(sequence)] = torch.from_numpy(np.asarray(sequence, dtype=np.int64))
        mask[row, :len(sequence)] = 1
    return ids, mask


def collate_student(features, pad_id, logits=None):
    """A batch: input_ids, attention_mask (training.train counts tokens with
    it), input_ids_b / attention_mask_b for pairs, labels (B,), and the
    teacher's logits (B, K) when there is a teacher."""
    batch = {}
    batch["input_ids"], batch["attention_mask"] = pad([f["input_ids"] for f in features], pad_id)
    if "input_ids_b" in features[0]:
        batch["input_ids_b"], batch["attention_mask_b"] = pad([f["input_ids_b"] for f in features], pad_id)
    batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
    if logits is not None:
        batch["teacher_logits"] = torch.from_numpy(logits[[f["index"] for f in features]])
    return batch


class StudentBatches(LengthGroupedBatches):
    """finetune.py's length-grouped batches (sentences of similar length
    together, random batch order, a function of (seed, epoch)), collated for
    the student with the teacher's logits."""

    def __init__(self, features, batch_size, seed, pad_id, logits=None):
        super().__init__(features, batch_size, seed, pad_id)
        self.logits = logits

    def __getitem__(self, global_index):
        epoch, index = divmod(global_index, self.batches_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, self.epoch_batches(epoch)
        return collate_student([self.features[i] for i in self._batches[index]], self.pad_id, self.logits)


def student_logits(model, batch):
    return model(batch["input_ids"], batch["attention_mask"], batch.get("input_ids_b"), batch.get("attention_mask_b"))


# ----------------------------------------------------------------------------
# The loss ([Tang] section 3)
# ----------------------------------------------------------------------------


def distillation_loss(student, teacher, labels, alpha):
    """The batch's loss, written as the formula:

        alpha * mean over labelled examples of CE(z^(S), gold)
        + (1 - alpha) * mean over all examples of (1/K) ||z^(B) - z^(S)||^2

    student, teacher (B, K) logits; labels (B,), NO_LABEL where there is none.
    The MSE is torch's (an average over the K classes too), as the authors'
    code computes it: the paper's squared norm divided by K."""
    labelled = labels != NO_LABEL
    ce = F.cross_entropy(student[labelled], labels[labelled]) if labelled.any() else student.new_zeros(())
    mse = F.mse_loss(student, teacher) if teacher is not None else student.new_zeros(())
    return alpha * ce + (1 - alpha) * mse


class DistillationObjective:
    """training.train's objective interface for distillation_loss: sums over
    the batch and what each sum is divided by. Term "distill": (1 - alpha)
    * the per-example MSE, over all examples (its "accuracy" is agreement
    with the teacher's argmax). Term "gold": alpha * the cross-entropy, over
    the examples with a gold label. train divides each sum by its count and
    adds them, which is distillation_loss; a term with weight 0 is left out."""

    def __init__(self, alpha):
        self.alpha = alpha

    def counts(self, batch):
        counts = {}
        if self.alpha < 1:
            counts["distill"] = len(batch["labels"])
        if self.alpha > 0:
            counts["gold"] = int((batch["labels"] != NO_LABEL).sum())
        return counts

    def losses(self, model, batch):
        logits = student_logits(model, batch).float()                              # (B, K)
        predicted = logits.argmax(-1)
        terms = {}
        if self.alpha < 1:
            teacher = batch["teacher_logits"].float()
            per_example = ((logits - teacher) ** 2).mean(-1)                       # (B,): (1/K) ||z_B - z_S||^2
            terms["distill"] = ((1 - self.alpha) * per_example.sum(), (predicted == teacher.argmax(-1)).sum())
        if self.alpha > 0:
            labels = batch["labels"]
            ce = F.cross_entropy(logits, labels, ignore_index=NO_LABEL, reduction="sum")
            terms["gold"] = (self.alpha * ce, ((predicted == labels) & (labels != NO_LABEL)).sum())
        return terms


def optimizer_factory(settings):
    """training.train's optimizer_factory: Adadelta (rho 0.95, as d-bert's
    distill_birnn.py) or Adam, at a constant learning rate (the authors' code
    has no schedule)."""
    def make(model):
        parameters = [p for p in model.parameters() if p.requires_grad]
        if settings.optimizer == "adadelta":
            optimizer = torch.optim.Adadelta(parameters, lr=settings.lr, rho=settings.rho,
                                             weight_decay=settings.weight_decay)
        elif settings.optimizer == "adam":
            optimizer = torch.optim.Adam(parameters, lr=settings.lr, weight_decay=settings.weight_decay)
        else:
            raise MiniBertError(f"--optimizer {settings.optimizer!r}: expected adadelta or adam")
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return make


# ----------------------------------------------------------------------------
# Predictions
# ----------------------------------------------------------------------------


@torch.no_grad()
def student_outputs(model, features, pad_id, batch_size=256, device="cpu", progress=False):
    """Class probabilities per feature (what the classification task's
    predict reads), in the features' order; run longest first."""
    model.eval().to(device)
    order = sorted(range(len(features)), key=lambda i: -len(features[i]["input_ids"]))
    outputs = [None] * len(features)
    for start in tqdm(range(0, len(order), batch_size), desc="predicting", unit="batch", disable=not progress,
                      leave=False):
        rows = order[start:start + batch_size]
        batch = move_to_device(collate_student([features[i] for i in rows], pad_id), device)
        probabilities = student_logits(model, batch).float().softmax(-1).cpu().numpy()
        for row, p in zip(rows, probabilities):
            outputs[row] = p
    return outputs


def evaluate_student(model, task, tokenizer, examples, features=None, batch_size=256, device="cpu", progress=False):
    """(metrics, predictions): the classification task's own predict and metrics."""
    features = features if features is not None else student_features(task, examples, tokenizer)
    outputs = student_outputs(model, features, tokenizer.pad_id, batch_size, device, progress)
    predictions = task.predict(examples, features, outputs)
    return task.metrics(examples, predictions), predictions


def count_parameters(model):
    """(all parameters, all but the embedding table): Tang et al.'s 0.96M
    (Table 3) is the second kind."""
    total = sum(p.numel() for p in model.parameters())
    return total, total - model.embedding.weight.numel()


# ----------------------------------------------------------------------------
# Saving and loading a student folder
# ----------------------------------------------------------------------------


def save_student(model, tokenizer, task, folder, record):
    """student.safetensors, the vocabulary (vocab.txt, or the teacher's
    tokenizer files) and student.json, each written atomically, student.json
    last (a folder with student.json is complete)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_safetensors({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                     folder / WEIGHTS_FILE, metadata={"format": "pt"})
    tokenizer.save(folder)
    write_json(folder / STUDENT_FILE, {"student": model.config.to_dict(), "task": task.name, "labels": task.labels,
                                       "tokenization": tokenizer.kind, "max_seq_len": tokenizer.max_seq_len,
                                       **record})


def read_student_record(folder):
    folder = Path(folder)
    path = folder / STUDENT_FILE
    if not path.is_file():
        raise MiniBertError(f"--student {folder}: not a distill.py student folder (no {STUDENT_FILE})")
    record = read_json_object(path)
    for key in ("student", "task", "labels", "tokenization", "max_seq_len"):
        if key not in record:
            raise MiniBertError(f"{path}: field '{key}' is missing")
    if record["task"] not in CLASSIFICATION:
        raise MiniBertError(f"{path}: task {record['task']!r}: expected one of {', '.join(CLASSIFICATION)}")
    if not isinstance(record["labels"], list) or not all(isinstance(label, str) for label in record["labels"]):
        raise MiniBertError(f"{path}: labels: expected a list of strings")
    if record["tokenization"] not in ("words", "teacher"):
        raise MiniBertError(f"{path}: tokenization {record['tokenization']!r}: expected 'words' or 'teacher'")
    max_len = record["max_seq_len"]
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise MiniBertError(f"{path}: max_seq_len {max_len!r}: expected a positive integer")
    return record


def load_student(folder):
    """(model in eval mode, tokenizer, task) from a student folder."""
    folder = Path(folder)
    record = read_student_record(folder)
    config = StudentConfig.from_dict(record["student"], f"{folder / STUDENT_FILE}: student")
    if record["tokenization"] == "words":
        tokenizer = WordTokenizer.load(folder, record["max_seq_len"])
    else:
        tokenizer = PieceTokenizer(load_tokenizer(folder), record["max_seq_len"])
    if tokenizer.vocab_size != config.vocab_size:
        raise MiniBertError(f"{folder}: the vocabulary has {tokenizer.vocab_size} entries, student.json says "
                            f"vocab_size {config.vocab_size}")
    if len(record["labels"]) != config.num_classes:
        raise MiniBertError(f"{folder / STUDENT_FILE}: {len(record['labels'])} labels for "
                            f"num_classes {config.num_classes}")
    task = make_task(record["task"], labels=record["labels"])
    if config.pair != is_pair_task(task):
        raise MiniBertError(f"{folder / STUDENT_FILE}: pair={config.pair} does not fit task {task.name}")
    model = BiLSTMClassifier(config)
    weights = load_safetensors(folder / WEIGHTS_FILE)
    try:
        model.load_state_dict({k: v.float() for k, v in weights.items()})
    except RuntimeError as e:
        raise MiniBertError(f"{folder / WEIGHTS_FILE}: does not fit the student of {STUDENT_FILE} "
                            f"({str(e).splitlines()[0]})") from None
    return model.eval(), tokenizer, task


def predict_file(folder, path, device="cpu", batch_size=256, progress=True):
    """(task, examples, predictions) of a student on a data file of its task."""
    model, tokenizer, task = load_student(folder)
    examples = task.read(path)
    features = student_features(task, examples, tokenizer)
    outputs = student_outputs(model, features, tokenizer.pad_id, batch_size, device, progress)
    return task, examples, task.predict(examples, features, outputs)


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------


def build_student(task, tokenizer, settings, teacher=None):
    """(a fresh student, what its embeddings started from). Its initial
    weights depend on the seed alone."""
    dim, start_from, report = settings.embedding_dim or 300, None, "random U(-0.25, 0.25)"
    if settings.embeddings == "teacher":
        weight = teacher.model.encoder.embeddings.word_embeddings.weight
        dim = settings.embedding_dim or weight.shape[1]
        start_from = teacher_embedding_matrix(teacher.model.encoder, dim, settings.seed)
        report = (f"the teacher's word-piece embeddings ({weight.shape[1]}-d"
                  + (")" if dim == weight.shape[1] else f", randomly projected to {dim}-d)"))
    elif settings.embeddings != "random":
        vectors, dim = read_word_vectors(settings.embeddings, tokenizer.words, settings.embedding_dim)
        report = (f"{settings.embeddings}: vectors for {len(vectors):,} of {tokenizer.vocab_size - 3:,} words, "
                  f"the others random U(-0.25, 0.25)")
    config = StudentConfig(vocab_size=tokenizer.vocab_size, num_classes=len(task.labels), embedding_dim=dim,
                           hidden_size=settings.hidden_size, fc_size=settings.fc_size, pair=is_pair_task(task),
                           pooling=settings.pooling, dropout=settings.dropout, padding_id=tokenizer.pad_id)
    torch.manual_seed(seed_from(settings.seed, "student"))
    model = BiLSTMClassifier(config)
    with torch.no_grad():
        if start_from is not None:
            model.embedding.weight.copy_(start_from)
            model.embedding.weight[config.padding_id].zero_()      # never read (packed away), as in lstm.py
        elif settings.embeddings != "random":
            for word, vector in vectors.items():
                model.embedding.weight[tokenizer.ids[word]] = torch.from_numpy(vector)
    model.embedding.weight.requires_grad_(not settings.freeze_embeddings)
    return model, report


def vocabulary_fingerprint(tokenizer):
    """What --resume checks: the student's vocabulary is the one it was trained with."""
    if tokenizer.kind == "words":
        words = tokenizer.words
    else:
        words = tokenizer.tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    return hashlib.sha256("\n".join(words).encode()).hexdigest()


def student_tokenizer(settings, teacher, transfer):
    """The teacher's pieces (--embeddings teacher), or a word vocabulary of
    the transfer set (training examples and their augmented samples)."""
    if settings.embeddings == "teacher":
        return PieceTokenizer(teacher.tokenizer, settings.max_seq_len)
    texts = [e.text_a for e in transfer] + [e.text_b for e in transfer if e.text_b]
    return WordTokenizer(build_vocabulary(texts, settings.min_count), settings.max_seq_len)


def check_files(settings):
    """The files the settings name exist: a typo must not surface only after
    hours of augmentation and teacher logits."""
    if settings.embeddings not in ("random", "teacher") and not Path(settings.embeddings).is_file():
        raise MiniBertError(f"--embeddings {settings.embeddings}: expected random, teacher or a word-vectors file "
                            f"(no such file)")
    if settings.pos_file is not None and not Path(settings.pos_file).is_file():
        raise MiniBertError(f"--pos-file {settings.pos_file}: no such file")


def distill(task_name, train_file, eval_file, output, settings, teacher_folder=None, use_teacher_logits=True,
            device="auto", resume=False, progress=True):
    """Train a BiLSTM student and write the best epoch's to `output`.

    With a teacher (and use_teacher_logits): Tang et al.'s distillation on
    the transfer set. Without one (or with use_teacher_logits=False, where
    the teacher serves only --embeddings teacher): the plain BiLSTM on the
    gold labels. Returns a summary dict."""
    context = setup_context(device)
    output = Path(output)
    check_files(settings)
    teacher = load_teacher(teacher_folder, task_name) if teacher_folder is not None else None
    if teacher is None and settings.embeddings == "teacher":
        raise MiniBertError("--embeddings teacher needs --teacher DIR")
    task = teacher.task if teacher is not None else make_task(task_name)
    if task.name not in CLASSIFICATION:
        raise MiniBertError(f"--task {task.name}: distillation is for sentence classification "
                            f"({', '.join(CLASSIFICATION)})")
    distilling = teacher is not None and use_teacher_logits
    settings = settings.resolved(task, distilling)
    if not distilling and settings.alpha != 1.0:
        raise MiniBertError(f"--alpha {settings.alpha}: without teacher logits the student learns from gold labels "
                            f"only (alpha 1)")

    examples = task.read(Path(train_file))[:settings.max_train_examples]
    eval_examples = task.read(Path(eval_file)) if eval_file is not None else None
    started = time.time()
    if distilling:
        transfer, logits, cache_hit = transfer_set_with_logits(teacher, examples, train_file, settings,
                                                               context.device, progress)
    else:
        transfer, logits, cache_hit = list(examples), None, False
    transfer_seconds = time.time() - started
    teacher_metrics = None
    if teacher is not None and eval_examples is not None:
        features = teacher.task.features(eval_examples, teacher.tokenizer, teacher.record["max_seq_len"])
        teacher_metrics, _, _ = evaluate(teacher.model, task, eval_examples, features, teacher.tokenizer.pad_id,
                                         settings.teacher_batch_size, context.device, progress=progress)

    tokenizer = student_tokenizer(settings, teacher, transfer)
    model, embeddings_report = build_student(task, tokenizer, settings, teacher)
    features = student_features(task, transfer, tokenizer)
    eval_features = student_features(task, eval_examples, tokenizer) if eval_examples is not None else None
    batches = StudentBatches(features, settings.batch_size, settings.seed, tokenizer.pad_id, logits)
    total_steps = settings.epochs * len(batches)
    parameters, without_embeddings = count_parameters(model)
    record = {"teacher": str(teacher_folder) if teacher_folder is not None else None, "distilled": distilling,
              "train_file": str(train_file), "evaluated_on": str(eval_file) if eval_file else None,
              "embeddings_start": embeddings_report, "train_examples": len(examples),
              "transfer_examples": len(transfer), "settings": dataclasses.asdict(settings)}

    history, best = [], {"value": -math.inf}
    if resume and (output / STUDENT_FILE).is_file():     # the best epoch before the kill stays the one to beat
        saved = read_json_object(output / STUDENT_FILE)
        metrics = saved.get("metrics") or {}
        if task.main_metric in metrics:
            best.update(value=metrics[task.main_metric], metrics=metrics, epoch=saved.get("best_epoch"))

    def evaluate_and_keep_best(trained):
        """Called by training.train at the end of each epoch."""
        metrics, _ = evaluate_student(trained, task, tokenizer, eval_examples, eval_features,
                                      settings.eval_batch_size, context.device)
        history.append(metrics)
        value = metrics[task.main_metric]
        if value > best["value"]:
            best.update(value=value, metrics=metrics, epoch=len(history))
            save_student(trained, tokenizer, task, output, {**record, "metrics": metrics, "best_epoch": len(history)})
        return {task.main_metric: value}

    config = TrainingConfig(total_steps=total_steps, learning_rate=settings.lr, weight_decay=settings.weight_decay,
                            max_grad_norm=settings.max_grad_norm, seed=settings.seed, log_every=10,
                            eval_every=len(batches), checkpoint_every=len(batches),
                            max_minutes=settings.max_minutes, bf16=False)
    run_config = {"task": task.name, "total_steps": total_steps, "batch_size": settings.batch_size,
                  "seed": settings.seed, "grad_accum_steps": 1, "model_config": model.config.to_dict(),
                  "vocabulary_fingerprint": vocabulary_fingerprint(tokenizer)}
    output.mkdir(parents=True, exist_ok=True)
    if progress and context.is_main:
        tqdm.write(f"{task.name}: {len(examples):,} training examples, {len(transfer):,} in the transfer set, "
                   f"{len(batches):,} batches of {settings.batch_size} per epoch, {total_steps:,} steps; "
                   f"student: {parameters:,} parameters ({without_embeddings:,} without the embeddings), "
                   f"embeddings from {embeddings_report}")
    train_started = time.time()
    summary = train(model, batches, DistillationObjective(settings.alpha), config, context,
                    output / "checkpoint.pt", run_config=run_config,
                    evaluate=evaluate_and_keep_best if eval_examples is not None else None, resume=resume,
                    progress=progress, optimizer_factory=optimizer_factory(settings))
    train_seconds = time.time() - train_started
    if context.is_main and eval_examples is None:
        save_student(model, tokenizer, task, output, record)
    summary.update(task=task.name, best=best.get("metrics"), best_epoch=best.get("epoch"), epochs_history=history,
                   teacher_metrics=teacher_metrics, parameters=parameters,
                   parameters_without_embeddings=without_embeddings,
                   teacher_parameters=(sum(p.numel() for p in teacher.model.parameters()) if teacher else None),
                   train_seconds=train_seconds, transfer_seconds=transfer_seconds, cache_hit=cache_hit,
                   train_examples=len(examples), transfer_examples=len(transfer), steps_per_epoch=len(batches),
                   embeddings_start=embeddings_report, settings=dataclasses.asdict(settings))
    return summary
