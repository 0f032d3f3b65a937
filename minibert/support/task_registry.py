"""The one table of the fine-tuning tasks and their labels.

Every script, file reader (task_files.py) and task object (minibert/tasks/)
reads the task names and each classification task's labels from here.
"""

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
