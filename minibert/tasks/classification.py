"""Sentence and sentence-pair classification ([BERT] 4.1, Figure 4a and 4b).

One text (SST-2) or two (SNLI, MRPC, MNLI, QQP) are packed as
`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`; the pooled [CLS] vector C goes
through dropout and one linear layer W (K x H), and the class probabilities
are softmax(C W^T) (Google's run_classifier.py `create_model`). The loss is
the cross-entropy of the gold class, log(softmax(C W^T)) in the paper's words.

Each dataset's file reader is at the end of this file.
"""

import json
import re

import numpy as np
import torch.nn.functional as F

from minibert import metrics
from minibert.heads import OutputLayer
from minibert.support import MiniBertError
from minibert.support.files import atomic_write
from minibert.support.task_files import (ClassificationExample, check_format, json_record, line_error, nonempty,
                                         numbered_lines, tsv_rows)
from minibert.tasks import Task

# Each task's labels, as written in its files; a label's position is its class index.
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


class ClassificationTask(Task):
    """SST-2, SNLI, MNLI, MRPC or QQP (their labels: CLASSIFICATION_LABELS).
    A new classification task subclasses it with its own `read` and
    `default_labels` (docs/guide.md, "Adding a task")."""

    main_metric = "accuracy"
    uses_pooler = True

    def __init__(self, name, labels=None, settings=None):
        self.name = name
        self.labels = list(labels) if labels is not None else list(self.default_labels)
        self.with_f1 = name in WITH_F1
        self.label_to_id = {label: i for i, label in enumerate(self.labels)}

    @property
    def default_labels(self):
        return CLASSIFICATION_LABELS[self.name]

    def read(self, path):
        """The examples of a file in one of the task's formats (READERS)."""
        return READERS[self.name](path)

    def split_group(self, example):
        """split() keeps the hypotheses written for one premise together (SNLI)."""
        return example.text_a

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
        (write_classification_predictions). Returns the paths written."""
        return write_classification_predictions(examples, predictions, path)


# ----------------------------------------------------------------------------
# The files: GLUE TSVs, SST trees, SNLI JSON lines
# ----------------------------------------------------------------------------
#
#   read_sst2    SST-2: a GLUE TSV (sentence, label), or the Stanford
#                Sentiment Treebank's PTB trees
#   read_snli    SNLI: the official JSON-lines release
#   read_mrpc    MRPC: the GLUE TSV or the original msr_paraphrase_*.txt
#   read_mnli    MNLI: a GLUE TSV (sentence1, sentence2, gold_label)
#   read_qqp     QQP: a GLUE TSV (id, question1, question2, is_duplicate)
#
# Each returns a list of ClassificationExample (support/task_files.py, with
# the helpers every reader shares), labels exactly as the data writes them
# ("0"/"1", "entailment", ...); a file without a label column (a file to
# predict on, like GLUE's test TSVs) gives label None.

# SNLI (and MNLI) write "-" as the gold label when the annotators did not
# agree; such pairs are dropped, as in every published result.
NO_CONSENSUS = "-"


def _check_label(path, number, task, label):
    if label not in CLASSIFICATION_LABELS[task]:
        expected = ", ".join(CLASSIFICATION_LABELS[task])
        raise line_error(path, number, f"unknown {task} label {label!r} (expected one of {expected})")


def _read_glue_tsv(path, task, text_columns, label_column, id_choices):
    """Examples of a GLUE-style TSV, its columns found by the header's names.

    `id_choices` lists column tuples; the first whose columns the file has
    gives each example's id (their fields joined by "-"). Without
    `label_column` in the header, every label is None.
    """
    check_format(path, task, (f"{task}-tsv",))
    columns, rows = tsv_rows(path)
    has_label = label_column in columns
    id_columns = next((ids for ids in id_choices if all(name in columns for name in ids)), ())
    examples = []
    for number, row in rows:
        label = row[label_column].strip() if has_label else None
        if label == NO_CONSENSUS and task in ("snli", "mnli"):
            continue
        if has_label:
            _check_label(path, number, task, label)
        texts = [row[name].strip() for name in text_columns]
        example_id = "-".join(row[name].strip() for name in id_columns) or None
        examples.append(ClassificationExample(texts[0], texts[1] if len(texts) > 1 else None,
                                              label, example_id, number))
    return nonempty(path, examples, "no rows after the header, or only pairs labelled '-'")


SENTIMENT_LABELS = {"0", "1", "2", "3", "4"}  # very negative ... very positive

# The treebank escapes brackets and slashes as the Penn Treebank does; GLUE's
# SST-2 (made from the same sentences) writes them plainly: "( something )",
# "mystery/thriller".
PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}

_TREE_TOKENS = re.compile(r"\(|\)|[^\s()]+")


def _unescape_ptb(word):
    """A treebank leaf as GLUE writes it: -LRB- -> "(", writer\\/director -> writer/director."""
    return PTB_ESCAPES.get(word, word).replace("\\/", "/").replace("\\*", "*")


def _parse_sentiment_tree(path, number, line):
    """(root label, leaf words) of one treebank line, e.g. `(3 (2 It) (4 (4 's) ...))`.

    Every "(" is followed by its node's 0-4 label, and every other word is a
    leaf, so reading the tokens left to right gives the sentence in order
    without building the tree. The depth count checks the brackets balance.
    """
    tokens = _TREE_TOKENS.findall(line)
    if not tokens or tokens[0] != "(":
        raise line_error(path, number, "a tree must start with '('")
    depth, root_label, leaves, expect_label = 0, None, [], False
    for position, token in enumerate(tokens):
        if depth == 0 and position > 0:
            raise line_error(path, number, "text after the tree's closing ')'")
        if token == "(":
            if expect_label:                # "((": the outer node has no label (it would take its child's)
                raise line_error(path, number, "a node without its 0-4 label (a '(' right after a '(')")
            depth, expect_label = depth + 1, True
        elif token == ")":
            depth -= 1
        elif expect_label:
            if token not in SENTIMENT_LABELS:
                raise line_error(path, number, f"node label {token!r} is not a sentiment 0-4")
            root_label = token if root_label is None else root_label
            expect_label = False
        else:
            leaves.append(_unescape_ptb(token))
    if depth != 0 or not leaves:
        raise line_error(path, number, "an incomplete tree (unbalanced brackets or no words)")
    return root_label, leaves


def _read_sst_trees(path):
    """SST-2 from the treebank: root 0-1 -> "0", 3-4 -> "1", neutral 2 dropped
    (the GLUE SST-2 construction); the sentence is the leaves joined by spaces."""
    examples = []
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        root_label, leaves = _parse_sentiment_tree(path, number, line)
        if root_label != "2":
            label = "0" if root_label in ("0", "1") else "1"
            examples.append(ClassificationExample(" ".join(leaves), None, label, None, number))
    return nonempty(path, examples, "every tree is neutral")


def read_sst2(path):
    """SST-2 sentences from a GLUE TSV (`sentence<TAB>label`, header line;
    `index<TAB>sentence` for an unlabelled test file) or from the treebank's
    PTB tree files; the format is told from the first line."""
    if check_format(path, "sst2", ("sst2-tsv", "sst-trees")) == "sst-trees":
        return _read_sst_trees(path)
    return _read_glue_tsv(path, "sst2", ["sentence"], "label", [("index",)])

def read_snli(path):
    """SNLI premise/hypothesis pairs from the official .jsonl release.

    Pairs with gold_label "-" (no annotator consensus) are dropped; the id is
    pairID. A file without gold_label fields gives label None; one that has
    them on some lines only is an error.
    """
    check_format(path, "snli", ("snli-jsonl",))
    examples, labelled = [], None
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        record = json_record(path, number, line)
        texts = [record.get(key) for key in ("sentence1", "sentence2")]
        if not all(isinstance(text, str) for text in texts):
            raise line_error(path, number, "sentence1 and sentence2 must both be strings")
        if labelled is None:
            labelled = "gold_label" in record
        if labelled != ("gold_label" in record):
            raise line_error(path, number, "gold_label is on some lines and not on others")
        label = record.get("gold_label")
        if label == NO_CONSENSUS:
            continue
        if labelled:
            _check_label(path, number, "snli", label)
        pair_id = record.get("pairID")
        examples.append(ClassificationExample(texts[0].strip(), texts[1].strip(), label,
                                              None if pair_id is None else str(pair_id), number))
    return nonempty(path, examples, "every pair has gold label '-'")


def read_mrpc(path):
    """MRPC sentence pairs. GLUE's train/dev TSVs and the original
    msr_paraphrase_*.txt share the header `Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1
    String<TAB>#2 String` (GLUE's test.tsv has `index` for Quality). The id is
    "#1 ID-#2 ID", e.g. "1355540-1355592"."""
    return _read_glue_tsv(path, "mrpc", ["#1 String", "#2 String"], "Quality", [("#1 ID", "#2 ID"), ("index",)])


def read_mnli(path):
    """MNLI pairs from a GLUE TSV (columns sentence1, sentence2, gold_label;
    the test files have no gold_label); id = pairID. Pairs labelled "-" are
    dropped, as for SNLI."""
    return _read_glue_tsv(path, "mnli", ["sentence1", "sentence2"], "gold_label", [("pairID",), ("index",)])


def read_qqp(path):
    """QQP question pairs from a GLUE TSV (columns id, qid1, qid2, question1,
    question2, is_duplicate; the test file has id, question1, question2)."""
    return _read_glue_tsv(path, "qqp", ["question1", "question2"], "is_duplicate", [("id",)])


def write_classification_predictions(examples, predictions, path):
    """Write one (label, class probabilities) per example; returns the paths
    written. A path ending in `.tsv` gets GLUE's submission format: the
    header `index<TAB>prediction`, then each example's position in the file
    (0 first, as a GLUE test file's own index column counts) and its label.
    Anything else gets jsonl: one object per example, in file order, with its
    id, label and class probabilities."""
    if str(path).endswith(".tsv"):
        with atomic_write(path, mode="w") as f:
            f.write("index\tprediction\n")
            for index, (label, _) in enumerate(predictions):
                f.write(f"{index}\t{label}\n")
        return [path]
    with atomic_write(path, mode="w") as f:
        for example, (label, probs) in zip(examples, predictions):
            record = {"id": example.id} if example.id is not None else {}
            record.update(label=label, probs=[round(float(p), 6) for p in probs])
            f.write(json.dumps(record) + "\n")
    return [path]


READERS = {"sst2": read_sst2, "snli": read_snli, "mrpc": read_mrpc, "mnli": read_mnli, "qqp": read_qqp}
