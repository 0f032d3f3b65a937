"""minibert.support.metric_inputs: what the metrics cannot score is refused
in one line (the metrics' own tests check the messages through them)."""

import numpy as np
import pytest

from minibert.support.errors import MiniBertError
from minibert.support.metric_inputs import check_predictions, check_v2_inputs, paired, squad_questions

DATA = [{"paragraphs": [{"context": "a b", "qas": [{"id": "q1", "answers": []}, {"id": "q2", "answers": []}]}]}]


def test_paired_turns_arrays_into_lists_of_one_length():
    assert paired(np.array([1, 0]), (1, 1)) == ([1, 0], [1, 1])
    with pytest.raises(MiniBertError, match="2 predictions but 1 labels"):
        paired([1, 0], [1])


def test_squad_questions_are_in_file_order_and_distinct():
    assert [qa["id"] for qa in squad_questions(DATA)] == ["q1", "q2"]
    with pytest.raises(MiniBertError, match="pass json\\['data'\\]"):
        squad_questions({"data": DATA})
    twice = [{"paragraphs": [{"qas": [{"id": "q", "answers": []}] * 2}]}]
    with pytest.raises(MiniBertError, match="appears twice"):
        squad_questions(twice)


def test_predictions_and_no_answer_scores_cover_the_dataset():
    questions = squad_questions(DATA)
    check_predictions({"q1": ""}, questions)
    with pytest.raises(MiniBertError, match="expected a string"):
        check_predictions({"q1": None}, questions)
    with pytest.raises(MiniBertError, match="predictions: 1 questions have none, e.g. 'q2'"):
        check_v2_inputs({"q1": ""}, None, questions)
    with pytest.raises(MiniBertError, match="na_probs: 1 question ids are not in the dataset"):
        check_v2_inputs({"q1": "", "q2": ""}, {"q1": 0.0, "q2": 0.0, "q3": 0.0}, questions)
    check_v2_inputs({"q1": "", "q2": ""}, {"q1": 0.0, "q2": 1.0}, questions)
