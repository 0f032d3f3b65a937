"""Sentence and sentence-pair classification ([BERT] 4.1, Figure 4a and 4b).

One text (SST-2) or two (SNLI, MRPC, MNLI, QQP) are packed as
`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`; the pooled [CLS] vector C goes
through dropout and one linear layer W (K x H), and the class probabilities
are softmax(C W^T) (Google's run_classifier.py `create_model`). The loss is
the cross-entropy of the gold class.
"""

import json

import numpy as np
import torch.nn.functional as F

from minibert import metrics
from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write
from minibert.finetuning import OutputLayer

# task -> (its labels as written in the data, whether the official metrics add
# the F1 of the positive class "1": GLUE reports it for MRPC and QQP)
CLASSIFICATION_TASKS = {
    "sst2": (["0", "1"], False),
    "snli": (["entailment", "neutral", "contradiction"], False),
    "mnli": (["entailment", "neutral", "contradiction"], False),
    "mrpc": (["0", "1"], True),
    "qqp": (["0", "1"], True),
}


class ClassificationTask:
    """SST-2, SNLI, MNLI, MRPC or QQP (see CLASSIFICATION_TASKS)."""

    main_metric = "accuracy"
    uses_pooler = True

    def __init__(self, name, labels=None):
        default_labels, self.with_f1 = CLASSIFICATION_TASKS[name]
        self.name = name
        self.labels = list(labels) if labels is not None else default_labels
        self.label_ids = {label: i for i, label in enumerate(self.labels)}

    def read(self, path):
        from minibert.tasks.readers import read_task_file
        return read_task_file(self.name, path)

    def features(self, examples, tokenizer, max_seq_len):
        """One feature per example; pairs longer than max_seq_len lose tokens
        from the end of the longer text first (BERT's _truncate_seq_pair)."""
        pairs = None if all(e.text_b is None for e in examples) else [e.text_b or "" for e in examples]
        encodings = tokenizer.encode_many([e.text_a for e in examples], pairs, max_length=max_seq_len)
        features = []
        for index, (example, encoding) in enumerate(zip(examples, encodings)):
            feature = {"input_ids": encoding.ids, "token_type_ids": encoding.token_type_ids, "example": index}
            if example.label is not None:
                if example.label not in self.label_ids:
                    raise MiniBertError(f"line {example.line}: label {example.label!r} is not one of "
                                        f"{self.name}'s labels {self.labels}")
                feature["labels"] = self.label_ids[example.label]
            features.append(feature)
        return features

    def make_head(self, config):
        return OutputLayer(config, len(self.labels), per_token=False)   # on the pooled [CLS] vector

    # ---- the objective (training.train) ------------------------------------

    def counts(self, batch):
        return {"classification": len(batch["labels"])}

    def losses(self, logits, batch):
        logits = logits.float()
        labels = batch["labels"]
        return {"classification": (F.cross_entropy(logits, labels, reduction="sum"),
                                   (logits.argmax(-1) == labels).sum())}

    # ---- predictions and metrics -------------------------------------------

    def outputs(self, logits, batch):
        return list(logits.float().softmax(-1).cpu().numpy())

    def predict(self, examples, features, outputs):
        """One (label, probabilities) per example (features are 1:1 with examples)."""
        return [(self.labels[int(np.argmax(p))], p) for p in outputs]

    def metrics(self, examples, predictions):
        gold = [e.label for e in examples]
        if any(label is None for label in gold):
            raise MiniBertError(f"{self.name}: the evaluation file has examples without a label")
        predicted = [label for label, _ in predictions]
        values = {"accuracy": metrics.accuracy(predicted, gold)}
        if self.with_f1:
            values["f1"] = metrics.binary_f1(predicted, gold, positive="1")
        return values

    def write_predictions(self, examples, predictions, path):
        """jsonl: one object per example, in file order."""
        with atomic_write(path, mode="w") as f:
            for example, (label, probs) in zip(examples, predictions):
                record = {"id": example.id} if example.id is not None else {}
                record.update(label=label, probs=[round(float(p), 6) for p in probs])
                f.write(json.dumps(record) + "\n")

