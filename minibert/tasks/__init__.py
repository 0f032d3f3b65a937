"""The fine-tuning tasks of the BERT paper, one small object per task type.

  classification.py   one sentence or a pair -> a class (SST-2, SNLI, MNLI, MRPC, QQP)
  ner.py              a class per word (CoNLL-2003)
  squad.py            an answer span in a paragraph, or none (SQuAD v1.1 / v2.0)

Each task object reads its files, turns examples into features, makes its
head, computes its loss, turns outputs into predictions and scores them with
minibert.metrics. The
task names and labels are one table (minibert/support/task_registry.py); the
file formats are minibert/support/task_files.py.

A task object has:

  name, labels, main_metric      e.g. "sst2", ["0", "1"], "accuracy"
  uses_pooler                    whether the head reads the pooled [CLS] vector
  read(path)                     the examples of a data file
  features(examples, tokenizer, max_seq_len)
                                 a list of dicts: input_ids, token_type_ids, the
                                 training targets, and "example" (its example's index)
  make_head(config)              an nn.Module: BertModelOutput -> logits
  loss(logits, batch)            the paper's loss: the mean cross-entropy
  counts(batch), losses(logits, batch)
                                 the same loss in the form training.training_step sums
  distributions(logits, batch)   the softmax rows the loss compares (what SiFT perturbs)
  outputs(logits, batch)         per-feature probabilities (what an ensemble averages)
  predict(examples, features, outputs)
                                 predictions, one per example
  metrics(examples, predictions) the official metrics, in percent
  has_gold(examples)             whether every example has its answer (so metrics can score it)
  write_predictions(examples, predictions, path)
                                 the task's official prediction format(s); returns the paths written
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
