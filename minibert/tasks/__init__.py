"""The fine-tuning tasks of the BERT paper, one small object per task type.

  registry.py         the task names and each classification task's labels (one table)
  readers.py          each dataset's file format (GLUE TSVs, SST trees, SNLI JSON
                      lines, CoNLL-2003 columns, SQuAD JSON) -> plain dataclasses
  classification.py   one sentence or a pair -> a class (SST-2, SNLI, MNLI, MRPC, QQP)
  ner.py              a class per word (CoNLL-2003)
  squad.py            an answer span in a paragraph, or none (SQuAD v1.1 / v2.0)

Each task object reads its files, turns examples into features, makes its
head, computes its loss, turns outputs into predictions and scores them with
minibert.metrics (the interface is described in minibert/finetuning.py).
"""

from minibert.support.errors import MiniBertError
from minibert.tasks.registry import CLASSIFICATION, CLASSIFICATION_LABELS, NER, SQUAD, TASK_NAMES, WITH_F1  # noqa: F401


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


def split_for_evaluation(task, examples, fraction, seed):
    """(train, held out) with a fixed seed, for data sets that come with only
    one labelled file here (SNLI, SQuAD dev). SQuAD keeps whole articles on
    one side, so no paragraph is both trained on and evaluated; SNLI keeps
    the hypotheses of one premise together."""
    from minibert.tasks.readers import split_examples
    if task.name == SQUAD:
        return task.split(examples, fraction, seed)
    if task.name == NER:
        raise MiniBertError("--split-eval: conll2003 has its own dev file (eng.testa): pass it as --eval")
    return split_examples(examples, fraction, seed, group=lambda example: example.text_a)
