"""Support for minibert/distillation.py: the settings of a distillation run,
their per-task defaults, and the checks that the files they name exist.

The values, and why they were chosen, are in the comments beside each field;
the paper's and the authors' code's values are in docs/papers.md section 2.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from minibert.support.distillation.student_config import EMBEDDINGS_MODES
from minibert.support.errors import MiniBertError
from minibert.support.folders import read_record
from minibert.support.inputs import copy_for, not_a_file

SINGLE_SENTENCE_TASKS = ("sst2",)          # the other classification tasks are sentence pairs: a siamese student
REPO = Path(__file__).resolve().parents[3]       # minibert/support/distillation/settings.py -> the repository
DEFAULT_POS_FILE = REPO.parent / "shared" / "data" / "conll2003" / "eng.train"


def is_pair_task(task):
    return task.name not in SINGLE_SENTENCE_TASKS


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
    # The authors' embedding modes (d-bert model/base.py): "rand" (random vectors, trained), "static" (frozen:
    # distill.py --freeze-embeddings), "nonstatic" (trained), "multichannel" (a frozen and a trained copy of the
    # same vectors concatenated: a 2E-d LSTM input, the paper's 0.96M SST-2 student). None: rand for random
    # vectors, nonstatic for a vectors file or the teacher's.
    embeddings_mode: Optional[str] = None
    # the transfer set ([Tang] section 3.2; minibert/augment.py)
    augment: bool = True
    n_iter: Optional[int] = None             # samples per example: 20 (single sentences), 10 (pairs)
    p_mask: float = 0.1
    p_pos: float = 0.1
    p_ng: float = 0.25
    max_ngram: int = 5
    pair_augment: str = "consistent"         # one fate per word across a pair; "independent": each sentence on
                                             # its own, as the authors' augment_paired_data.py
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
    distill_term: str = "mse"                # (1/K)||z^(B) - z^(S)||^2 as torch's MSE and the authors' code; or
                                             # "squared-l2": ||z^(B) - z^(S)||^2, the paper's equation
    unlabelled_target: str = "none"          # the CE target of an augmented sample: none (L_distill only), or
                                             # "teacher": the teacher's argmax, the paper's reading
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
    bf16: bool = False                       # bfloat16 autocast for every forward (teacher and student), as
                                             # finetune.py --bf16; weights stay float32. False: float32 throughout

    def resolved(self, task, with_teacher):
        """A copy with every None replaced by its value for this task."""
        pair = is_pair_task(task)
        values = dataclasses.asdict(self)
        defaults = {"hidden_size": 300 if pair else 150, "n_iter": 10 if pair else 20,
                    "alpha": 0.0 if with_teacher else 1.0, "lr": 1.0 if self.optimizer == "adadelta" else 5e-4}
        defaults["embeddings_mode"] = "rand" if self.embeddings == "random" else "nonstatic"
        for key, value in defaults.items():
            if values[key] is None:
                values[key] = value
        return DistillationSettings(**values)


DISTILL_TERMS = ("mse", "squared-l2")
UNLABELLED_TARGETS = ("none", "teacher")

# The paper's students, one flag each (--paper-config): d-bert's confs/birnn_sst2_150.json, the SST-2 BiLSTM of
# Table 3 with 0.96M parameters besides its embeddings: 300-d vectors in "multichannel" (600-d LSTM input),
# hidden 150 per direction, fc 200, dropout 0.1, batch 50 (its count: runs/distillation.PAPER_SST2).
PAPER_CONFIGS = {"sst2": {"embeddings_mode": "multichannel", "embedding_dim": 300, "hidden_size": 150,
                          "fc_size": 200, "dropout": 0.1, "batch_size": 50}}


def check_files(settings):
    """The files the settings name exist: a typo must not surface only after
    hours of augmentation and teacher logits."""
    if settings.embeddings not in ("random", "teacher"):
        if not Path(settings.embeddings).exists():
            raise MiniBertError(f"--embeddings {settings.embeddings}: expected random, teacher or a word-vectors "
                                f"file (no such file)")
        from minibert.support.distillation.word_vectors import check_word_vectors
        check_word_vectors(settings.embeddings, settings.embedding_dim)     # every line, before the slow work
    if settings.pos_file is not None:
        pos_file_path(settings.pos_file)


def pos_file_path(pos_file=None):
    """The part-of-speech file for POS-guided replacement: --pos-file, or
    CoNLL-2003's training file in ../shared/data."""
    if pos_file is None:
        if not DEFAULT_POS_FILE.is_file():
            raise MiniBertError(f"augmentation needs a part-of-speech lexicon and {DEFAULT_POS_FILE} is absent: "
                                f"pass --pos-file FILE ('word TAG' lines, e.g. CoNLL-2003's eng.train) or --no-augment")
        return DEFAULT_POS_FILE
    pos_file = copy_for(pos_file)         # a pipe: the copy distill.py made (inputs.read_once)
    if not_a_file(pos_file, "--pos-file"):
        raise MiniBertError(not_a_file(pos_file, "--pos-file"))
    return Path(pos_file)


def check_teacher_folder(folder, task_name, classification_tasks):
    """A fine-tuned *sentence classifier* folder, or a one-line error naming
    what it is instead (a NER or SQuAD model, a pretrained model without a
    head, another task than `task_name`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MiniBertError(f"--teacher {folder}: no such folder")
    if not (folder / "task.json").is_file():
        raise MiniBertError(f"--teacher {folder}: not a finetune.py classifier folder (no task.json: a pretrained "
                            f"model? fine-tune it first with finetune.py --task ...)")
    task = read_record(folder, "task.json", required=("task", "max_seq_len"))["task"]
    if task not in classification_tasks:
        raise MiniBertError(f"--teacher {folder}: a {task} model; distillation needs a sentence "
                            f"classifier ({', '.join(classification_tasks)})")
    if task_name is not None and task_name != task:
        raise MiniBertError(f"--task {task_name}: the teacher {folder} was fine-tuned for {task}")


def check_run(settings, task, has_teacher, distilling, classification_tasks):
    """The run asked for makes sense, before any work: the task is a
    sentence classification, --embeddings teacher has a teacher, the
    optimizer is known, and without teacher logits the loss is the gold
    labels' alone (alpha 1). `settings` are the resolved ones."""
    if not has_teacher and settings.embeddings == "teacher":
        raise MiniBertError("--embeddings teacher needs --teacher DIR")
    if task.name not in classification_tasks:
        raise MiniBertError(f"--task {task.name}: distillation is for sentence classification "
                            f"({', '.join(classification_tasks)})")
    for flag, value, known in (("--embeddings-mode", settings.embeddings_mode, EMBEDDINGS_MODES),
                               ("--pair-augment", settings.pair_augment, ("consistent", "independent")),
                               ("--distill-term", settings.distill_term, DISTILL_TERMS),
                               ("--unlabelled-target", settings.unlabelled_target, UNLABELLED_TARGETS)):
        if value is not None and value not in known:
            raise MiniBertError(f"{flag} {value!r}: expected one of {', '.join(known)}")
    if settings.embeddings_mode == "rand" and settings.embeddings != "random":
        raise MiniBertError(f"--embeddings-mode rand starts from random vectors, not --embeddings "
                            f"{settings.embeddings}: use static, nonstatic or multichannel")
    if settings.optimizer not in ("adadelta", "adam"):
        raise MiniBertError(f"--optimizer {settings.optimizer!r}: expected adadelta or adam")
    if not distilling and settings.alpha != 1.0:
        raise MiniBertError(f"--alpha {settings.alpha}: without teacher logits the student learns from gold labels "
                            f"only (alpha 1)")
