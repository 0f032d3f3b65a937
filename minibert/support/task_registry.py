"""Support for minibert/tasks/: the one table of the fine-tuning tasks and
their labels, and the checks of the task objects' settings and labels.

Every script, file reader (task_files.py) and task object reads the task
names and each classification task's labels from the table. A bad setting or
label raises a one-line MiniBertError naming it, before it can reach the
features or the head.
"""

import math

from minibert.support.errors import MiniBertError


# ----------------------------------------------------------------------------
# The tasks and their labels
# ----------------------------------------------------------------------------

# Each sentence(-pair) classification task's labels, as written in its files;
# a label's position is its class index.
CLASSIFICATION_LABELS = {
    "sst2": ("0", "1"),                                    # negative, positive
    "snli": ("entailment", "neutral", "contradiction"),
    "mnli": ("entailment", "neutral", "contradiction"),
    "mrpc": ("0", "1"),                                    # 1 = paraphrase
    "qqp": ("0", "1"),                                     # 1 = duplicate
}

# The tasks whose official metrics add the F1 of the positive class "1"
# (GLUE reports it for MRPC and QQP, whose classes are unbalanced).
WITH_F1 = ("mrpc", "qqp")

CLASSIFICATION = tuple(CLASSIFICATION_LABELS)
NER = "conll2003"               # a class per word (minibert/tasks/ner.py)
SQUAD = "squad"                 # an answer span, or none (minibert/tasks/squad.py)
TASK_NAMES = (*CLASSIFICATION, NER, SQUAD)


# ----------------------------------------------------------------------------
# The checks of the task objects' settings and labels
# ----------------------------------------------------------------------------

# What task.json keeps of the SQuAD task, so that a loaded model makes its
# features and predictions as it was trained (SquadTask.settings).
SQUAD_SETTINGS = ("squad_version", "doc_stride", "max_query_len", "max_answer_len", "n_best", "null_threshold")


def squad_settings(values, settings=None):
    """SquadTask's settings: `values` ({SQUAD_SETTINGS name: value}, its
    keyword arguments) with those of `settings` (a fine-tuned folder's
    task.json record) in their place, checked; the version "1.1", "2.0" or
    None (a "v" prefix dropped), null_threshold a float."""
    values = {**values, **{key: settings[key] for key in SQUAD_SETTINGS if settings and key in settings}}
    values["squad_version"] = _checked_version(values["squad_version"])
    for key in ("doc_stride", "max_query_len", "max_answer_len", "n_best"):
        if not isinstance(values[key], int) or isinstance(values[key], bool) or values[key] < 1:
            raise MiniBertError(f"squad: {key} must be a positive integer, got {values[key]!r}")
    if not isinstance(values["null_threshold"], (int, float)) or not math.isfinite(values["null_threshold"]):
        raise MiniBertError(f"squad: null_threshold must be a number, got {values['null_threshold']!r}")
    values["null_threshold"] = float(values["null_threshold"])
    return values


def _checked_version(version):
    if version is None:
        return None
    version = str(version).removeprefix("v")
    if version not in ("1.1", "2.0"):
        raise MiniBertError(f"squad: unknown SQuAD version {version!r} (expected 1.1 or 2.0)")
    return version


def check_tag_set(labels):
    """The NER task needs its tag set before it makes features or a head."""
    if not labels:
        raise MiniBertError("conll2003: the tag set is unknown: read the training file with this task first "
                            "(its tags are the labels), or pass NerTask(labels=[...])")


def check_known_tags(tags, labels, sentence, index):
    """Every (IOB2) tag of sentence number `index` must be one of the model's labels."""
    unknown = [tag for tag in tags if tag not in labels]
    if unknown:
        raise MiniBertError(f"line {sentence.line_numbers[0]} (sentence {index}): tag {unknown[0]!r} is not one "
                            f"of the model's labels {labels}")
