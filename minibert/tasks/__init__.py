"""The fine-tuning tasks of the BERT paper, one file per task type.

  classification.py   one sentence or a pair -> a class (SST-2, SNLI, MNLI, MRPC, QQP)
  ner.py              a class per word (CoNLL-2003)
  squad.py            an answer span in a paragraph, or none (SQuAD v1.1 / v2.0)

A task is one class in one file: it reads its files (each bad line a
one-line error naming the file, the line and the field; the shared helpers
are minibert/support/task_files.py), turns examples into features, names
its head (one of minibert/heads.py), computes its loss, turns outputs into
predictions, scores them with minibert.metrics and writes them in its
official format. One line registers it: an entry of TASKS below, or
`@register("name")` above its class. The generic code (finetuning.py,
minibert/commands/finetune.py) asks the task object and never names a task.

A task object has:

  name, labels, main_metric      e.g. "sst2", ["0", "1"], "accuracy"
  uses_pooler                    whether the head reads the pooled [CLS] vector
  default_max_seq_len            tokens per example when none is given
  settings                       what task.json keeps besides the labels (SQuAD's windows)
  feature_settings               the settings that shape the features (a resumed run keeps them)
  read(path)                     the examples of a data file
  check_examples(path, examples, training)
                                 a warning about the examples (or None)
  split(examples, fraction, seed)
                                 (train, held out), whole groups on one side
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

`Task` gives the defaults; make_task(name, labels, settings) makes one by
its name, as `cls(name=name, labels=labels, settings=settings)`.
"""

import importlib

from minibert.support import MiniBertError
from minibert.support.task_files import split_examples

# The tasks: name -> its class, or "module:Class" to import when the task is
# first made (so that a script's --help loads no torch).
TASKS = {
    "sst2": "minibert.tasks.classification:ClassificationTask",
    "snli": "minibert.tasks.classification:ClassificationTask",
    "mnli": "minibert.tasks.classification:ClassificationTask",
    "mrpc": "minibert.tasks.classification:ClassificationTask",
    "qqp": "minibert.tasks.classification:ClassificationTask",
    "conll2003": "minibert.tasks.ner:NerTask",
    "squad": "minibert.tasks.squad:SquadTask",
}

# The sentence(-pair) classification tasks (what distill.py distils).
CLASSIFICATION = tuple(name for name, entry in TASKS.items() if entry.endswith(":ClassificationTask"))


def register(name, task_class=None):
    """Make a task known by its name: `@register("name")` above its class,
    or register("name", TaskClass)."""
    if task_class is None:
        return lambda cls: register(name, cls)
    TASKS[name] = task_class
    return task_class


def task_class(name):
    """The class registered as `name`."""
    if name not in TASKS:
        raise MiniBertError(f"unknown task {name!r}; expected one of {', '.join(TASKS)}")
    if isinstance(TASKS[name], str):
        module, _, attribute = TASKS[name].partition(":")
        TASKS[name] = getattr(importlib.import_module(module), attribute)
    return TASKS[name]


def make_task(name, labels=None, settings=None):
    """The task object for `name`. `labels` and `settings` come from a
    fine-tuned folder's task.json (or a script's task flags), so that a
    loaded model reads its outputs with the label list and window settings
    it was trained with."""
    return task_class(name)(name=name, labels=labels, settings=dict(settings or {}))


class Task:
    """What a task has unless it says otherwise."""

    labels = None
    uses_pooler = False
    default_max_seq_len = 128
    settings = {}
    feature_settings = {}
    split_group = None        # split(): example -> its group; None: each example alone

    def check_examples(self, path, examples, training=False):
        """A warning about the examples read from `path`, or None."""
        return None

    def split(self, examples, fraction, seed):
        """(train, held out) of `examples` with a fixed seed, for data sets
        that come with only one labelled file (support/task_files.split_examples)."""
        return split_examples(examples, fraction, seed, group=self.split_group)
