"""minibert/support/task_registry.py: the task table names each task once, and
SQuAD's settings and the NER tag set are checked before they reach the
features or the head."""

import pytest

from minibert.support.errors import MiniBertError
from minibert.support.task_files import NerSentence
from minibert.support.task_registry import (CLASSIFICATION_LABELS, SQUAD_SETTINGS, TASK_NAMES, WITH_F1,
                                            check_known_tags, check_tag_set, squad_settings)

DEFAULTS = dict(zip(SQUAD_SETTINGS, (None, 128, 64, 30, 20, 0)))


def test_the_table_names_each_task_once_and_each_f1_task_has_a_positive_class():
    assert len(set(TASK_NAMES)) == len(TASK_NAMES) == 7
    for name, labels in CLASSIFICATION_LABELS.items():
        assert len(set(labels)) == len(labels) >= 2, name
    # The F1 these tasks add is that of the class "1" (ClassificationTask.metrics), so each must have one.
    assert all("1" in CLASSIFICATION_LABELS[name] for name in WITH_F1)


def test_squad_settings_take_the_record_over_the_arguments_and_normalise():
    values = squad_settings(DEFAULTS, {"squad_version": "v2.0", "doc_stride": 64, "task": "squad"})
    assert values == {**DEFAULTS, "squad_version": "2.0", "doc_stride": 64, "null_threshold": 0.0}
    assert isinstance(values["null_threshold"], float)
    assert squad_settings(DEFAULTS) == {**DEFAULTS, "null_threshold": 0.0}


@pytest.mark.parametrize("bad, message", [({"doc_stride": 0}, "doc_stride must be a positive integer"),
                                          ({"n_best": True}, "n_best must be a positive integer"),
                                          ({"null_threshold": float("nan")}, "null_threshold must be a number"),
                                          ({"squad_version": "3.0"}, "unknown SQuAD version '3.0'")])
def test_bad_squad_settings_are_named(bad, message):
    with pytest.raises(MiniBertError, match=message):
        squad_settings(DEFAULTS, bad)


def test_the_tag_set_must_be_known_and_hold_every_tag():
    with pytest.raises(MiniBertError, match="the tag set is unknown"):
        check_tag_set(None)
    check_tag_set(["O", "B-PER"])
    sentence = NerSentence(["Jim", "Rome"], ["B-PER", "B-LOC"], [7, 8])
    check_known_tags(["B-PER"], ["O", "B-PER"], sentence, 2)
    with pytest.raises(MiniBertError, match=r"line 7 \(sentence 2\): tag 'B-LOC' is not one of the model's labels"):
        check_known_tags(sentence.tags, ["O", "B-PER"], sentence, 2)
