"""The fine-tuning tasks of the BERT paper, one small object per task type.

  classification.py   one sentence or a pair -> a class (SST-2, SNLI, MNLI, MRPC, QQP)
  ner.py              a class per word (CoNLL-2003)
  squad.py            an answer span in a paragraph, or none (SQuAD v1.1 / v2.0)

Each task object reads its files, turns examples into features, makes its
head, computes its loss, turns outputs into predictions and scores them with
minibert.metrics (the interface is described in minibert/finetuning.py). The
task names and labels are one table (minibert/support/task_registry.py); the
file formats are minibert/support/task_files.py.
"""

from minibert.support.errors import MiniBertError
from minibert.support.task_registry import CLASSIFICATION, NER, SQUAD, TASK_NAMES


def make_task(name, labels=None, settings=None):
    """The task object for `name`. `labels` and `settings` come from a
    fine-tuned folder's task.json, so that a loaded model reads its outputs
    with the label list and window settings it was trained with."""
    settings = dict(settings or {})
    if name in CLASSIFICATION:
        from minibert.tasks.classification import ClassificationTask
        return ClassificationTask(name, labels=labels)
    if name == NER:
        from minibert.tasks.ner import NerTask
        return NerTask(labels=labels)
    if name == SQUAD:
        from minibert.tasks.squad import SquadTask
        return SquadTask(settings=settings)
    raise MiniBertError(f"unknown task {name!r}; expected one of {', '.join(TASK_NAMES)}")
