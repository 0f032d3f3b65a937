"""Support for minibert/distillation.py: the checks of a distillation run's
settings (distillation.DistillationSettings, where the values and their
reasons are) and of the files they name.
"""

from pathlib import Path

from minibert.support.distillation.student_config import EMBEDDINGS_MODES
from minibert.support.errors import MiniBertError
from minibert.support.folders import read_record
from minibert.support.inputs import copy_for, not_a_file
from minibert.support.outputs import describe_model_folder, model_folder_kind

DISTILL_TERMS = ("mse", "squared-l2")
UNLABELLED_TARGETS = ("none", "teacher")


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


def pos_file_path(pos_file):
    """The part-of-speech file for POS-guided replacement (--pos-file; distill.py
    gives its default)."""
    if pos_file is None:
        raise MiniBertError("augmentation needs a part-of-speech lexicon: pass --pos-file FILE ('word TAG' lines, "
                            "e.g. CoNLL-2003's eng.train) or --no-augment")
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
    if model_folder_kind(folder) == "student":
        raise MiniBertError(f"--teacher {folder}: {describe_model_folder(folder)}, not a BERT-family "
                            f"classifier; a teacher is a finetune.py classifier folder")
    if not (folder / "task.json").is_file():
        if task_name is not None:        # a folder trained with transformers: its config.json is checked as it is read
            return
        raise MiniBertError(f"--teacher {folder}: not a finetune.py classifier folder (no task.json: a pretrained "
                            f"model? fine-tune it first with finetune.py --task ...; a classifier trained with "
                            f"transformers needs --task)")
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
