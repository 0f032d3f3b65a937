"""The sentence(-pair) classification task object on its own
(minibert/tasks/classification.py): features from a tiny vocabulary, the
loss worked by hand, outputs, predictions and metrics on hand-made logits.
No model is trained and transformers is not used."""

import json
import math

import numpy as np
import pytest
import torch

from minibert.model import BertConfig, BertModelOutput
from minibert.support import MiniBertError
from minibert.tasks import CLASSIFICATION, make_task
from minibert.tasks.classification import CLASSIFICATION_LABELS, ClassificationTask
from minibert.support.task_files import ClassificationExample
from minibert.tokenization import load_tokenizer
from tiny_models import write_vocab


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    write_vocab(folder, ["good film", "bad plot"])
    return load_tokenizer(folder)


def example(text_a, text_b=None, label=None, line=2):
    return ClassificationExample(text_a, text_b, label, None, line)


# ----------------------------------------------------------------------------
# Labels and features
# ----------------------------------------------------------------------------


def test_labels_come_from_the_one_task_table():
    assert CLASSIFICATION == ("sst2", "snli", "mnli", "mrpc", "qqp")
    for name in CLASSIFICATION:
        task = make_task(name)
        assert isinstance(task, ClassificationTask) and task.labels == list(CLASSIFICATION_LABELS[name])
    assert ClassificationTask("snli").label_to_id == {"entailment": 0, "neutral": 1, "contradiction": 2}
    assert [make_task(name).with_f1 for name in CLASSIFICATION] == [False, False, False, True, True]
    assert ClassificationTask("sst2", labels=["1", "0"]).label_to_id == {"1": 0, "0": 1}   # a saved folder's order


def test_a_sentence_is_cls_a_sep_with_its_label_index(tokenizer):
    task = ClassificationTask("sst2")
    (feature,) = task.features([example("good film", label="1")], tokenizer, max_seq_len=16)
    assert tokenizer.convert_ids_to_tokens(feature["input_ids"]) == ["[CLS]", "good", "film", "[SEP]"]
    assert feature["token_type_ids"] == [0, 0, 0, 0] and feature["labels"] == 1 and feature["example"] == 0


def test_sentence_pairs_are_packed_as_two_segments(tokenizer):
    task = ClassificationTask("mrpc")
    (feature,) = task.features([example("good film", "bad plot", "1")], tokenizer, max_seq_len=16)
    assert tokenizer.convert_ids_to_tokens(feature["input_ids"]) == ["[CLS]", "good", "film", "[SEP]", "bad",
                                                                     "plot", "[SEP]"]
    assert feature["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1] and feature["labels"] == 1


def test_an_unlabelled_example_has_no_target_and_an_unknown_label_names_its_line(tokenizer):
    task = ClassificationTask("sst2")
    (feature,) = task.features([example("good film")], tokenizer, max_seq_len=16)
    assert "labels" not in feature
    with pytest.raises(MiniBertError, match=r"line 7: label '7' is not one of sst2's labels"):
        task.features([example("good film", label="7", line=7)], tokenizer, max_seq_len=16)


# ----------------------------------------------------------------------------
# Head and loss
# ----------------------------------------------------------------------------


def test_the_head_reads_the_pooled_vector():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=10, hidden_size=32, num_attention_heads=4, initializer_range=0.02)
    head = ClassificationTask("snli").make_head(config).eval()
    pooled = torch.randn(2, 32)
    logits = head(BertModelOutput(torch.randn(2, 5, 32), pooled_output=pooled))
    assert logits.shape == (2, 3)
    assert torch.allclose(logits, pooled @ head.classifier.weight.T + head.classifier.bias)


def test_the_loss_is_the_mean_cross_entropy_worked_by_hand():
    task = ClassificationTask("sst2")
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    batch = {"labels": torch.tensor([0, 0, 1])}
    # -log softmax: row 0 -log(e^2 / (e^2 + 1)), row 1 -log(1 / (1 + e)), row 2 -log(1/2)
    by_hand = [math.log(1 + math.exp(-2)), math.log(1 + math.e), math.log(2)]
    assert task.loss(logits, batch).item() == pytest.approx(sum(by_hand) / 3, rel=1e-6)
    loss_sum, correct = task.losses(logits, batch)["classification"]
    assert loss_sum.item() == pytest.approx(sum(by_hand), rel=1e-6)     # what training.training_step adds up
    assert int(correct) == 1                                           # row 0 only (row 2 ties: argmax 0)
    assert task.counts(batch) == {"classification": 3}
    rows, weight = task.distributions(logits, batch)
    assert weight == 1.0 and torch.equal(rows, logits)


# ----------------------------------------------------------------------------
# Outputs, predictions, metrics
# ----------------------------------------------------------------------------


def test_outputs_are_probabilities_and_predictions_their_argmax_label():
    task = ClassificationTask("snli")
    logits = torch.tensor([[0.0, 0.0, math.log(3.0)], [math.log(2.0), 0.0, 0.0]])
    outputs = task.outputs(logits, {})
    np.testing.assert_allclose(outputs[0], [0.2, 0.2, 0.6], rtol=1e-6)
    np.testing.assert_allclose(outputs[1], [0.5, 0.25, 0.25], rtol=1e-6)
    predictions = task.predict(None, None, outputs)
    assert [label for label, _ in predictions] == ["contradiction", "entailment"]


def test_metrics_are_accuracy_and_for_mrpc_the_f1_of_class_1():
    gold = [example("a", "b", label) for label in ("1", "1", "0", "0")]
    predicted = [("1", None), ("0", None), ("1", None), ("0", None)]
    assert ClassificationTask("sst2").metrics(gold, predicted) == {"accuracy": 50.0}
    values = ClassificationTask("mrpc").metrics(gold, predicted)
    assert values["accuracy"] == 50.0 and values["f1"] == pytest.approx(50.0)   # 2 TP / (2 TP + FP + FN) = 2/4
    with pytest.raises(MiniBertError, match="without a label"):
        ClassificationTask("sst2").metrics([example("a")], [("1", None)])


def test_predictions_file_is_jsonl_with_ids_or_a_glue_tsv_by_its_suffix(tmp_path):
    task = ClassificationTask("qqp")
    examples = [ClassificationExample("a", "b", None, "q7", 2), example("c", "d")]
    predictions = [("1", np.array([0.25, 0.75])), ("0", np.array([0.9, 0.1]))]
    task.write_predictions(examples, predictions, tmp_path / "p.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert lines == [{"id": "q7", "label": "1", "probs": [0.25, 0.75]}, {"label": "0", "probs": [0.9, 0.1]}]
    written = task.write_predictions(examples, predictions, tmp_path / "QQP.tsv")   # GLUE's submission format
    assert written == [tmp_path / "QQP.tsv"]
    assert (tmp_path / "QQP.tsv").read_text() == "index\tprediction\n0\t1\n1\t0\n"


def test_gold_labels_are_there_only_when_every_example_has_one():
    assert ClassificationTask("sst2").has_gold([example("good", label="1"), example("bad", label="0")])
    assert not ClassificationTask("sst2").has_gold([example("good", label="1"), example("a test line")])
