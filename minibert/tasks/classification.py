"""Sentence and sentence-pair classification ([BERT] 4.1, Figure 4a and 4b).

One text (SST-2) or two (SNLI, MRPC, MNLI, QQP) are packed as
`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`; the pooled [CLS] vector C goes
through dropout and one linear layer W (K x H), and the class probabilities
are softmax(C W^T) (Google's run_classifier.py `create_model`). The loss is
the cross-entropy of the gold class, log(softmax(C W^T)) in the paper's words.
"""

import numpy as np
import torch.nn.functional as F

from minibert import metrics
from minibert.heads import OutputLayer
from minibert.support.errors import MiniBertError
from minibert.support.task_files import read_task_file, write_classification_predictions
from minibert.support.task_registry import CLASSIFICATION_LABELS, WITH_F1


class ClassificationTask:
    """SST-2, SNLI, MNLI, MRPC or QQP (their labels: support/task_registry.py)."""

    main_metric = "accuracy"
    uses_pooler = True

    def __init__(self, name, labels=None):
        self.name = name
        self.labels = list(labels) if labels is not None else list(CLASSIFICATION_LABELS[name])
        self.with_f1 = name in WITH_F1
        self.label_to_id = {label: i for i, label in enumerate(self.labels)}

    def read(self, path):
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
                if example.label not in self.label_to_id:
                    raise MiniBertError(f"line {example.line}: label {example.label!r} is not one of "
                                        f"{self.name}'s labels {self.labels}")
                feature["labels"] = self.label_to_id[example.label]
            features.append(feature)
        return features

    def make_head(self, config):
        return OutputLayer(config, len(self.labels), per_token=False)   # on the pooled [CLS] vector

    # ---- the objective -------------------------------------------------------

    def loss(self, logits, batch):
        """L = -(1/B) sum_i log softmax(C_i W^T)[y_i]: the mean cross-entropy
        of the gold classes over the batch's B examples."""
        return F.cross_entropy(logits.float(), batch["labels"])

    def counts(self, batch):
        return {"classification": len(batch["labels"])}

    def losses(self, logits, batch):
        """The loss in training.training_step's form: B L, the SUM over this batch.
        train adds the sums of all its micro-batches (and processes) and
        divides once by their total count: gradient accumulation and
        torch.distributed then average exactly as one large batch would."""
        labels = batch["labels"]
        correct = (logits.argmax(-1) == labels).sum()
        return {"classification": (self.loss(logits, batch) * len(labels), correct)}

    def distributions(self, logits, batch):
        """What the loss compares, as (rows, weight): one softmax row of K
        logits per example, each weighing 1 (SiFT's symmetric KL)."""
        return logits, 1.0                                                  # (B, K)

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

    def has_gold(self, examples):
        """Whether every example has its label (so the predictions can be scored)."""
        return all(example.label is not None for example in examples)

    def write_predictions(self, examples, predictions, path):
        """jsonl, or GLUE's submission TSV for a `.tsv` path
        (task_files.write_classification_predictions). Returns the paths written."""
        return write_classification_predictions(examples, predictions, path)
