"""minibert.metrics: every expected value is worked out by hand in the comments.

The rules are the official scripts' (docs/papers.md section 4): SQuAD's
evaluate-v1.1.py / evaluate-v2.0.py, conlleval, GLUE's accuracy and F1.
"""

import pytest
import torch

from minibert.support import MiniBertError
from minibert.metrics import (accuracy, binary_f1, conll_chunks, conlleval, exact_match_score, f1_score,
                              f1_score_v1, iob1_to_iob2, normalize_answer, squad_v1_metrics, squad_v2_metrics)

# ----------------------------------------------------------------------------
# GLUE: accuracy and binary F1
# ----------------------------------------------------------------------------

# MRPC-style: 1 = paraphrase.
LABELS = [1, 1, 1, 0, 0, 1]
PREDICTIONS = [1, 0, 1, 1, 0, 1]


def test_accuracy():
    # Equal at positions 0, 2, 4, 5: 4 of 6 = 66.67 %.
    assert accuracy(PREDICTIONS, LABELS) == pytest.approx(400 / 6)
    assert accuracy(torch.tensor(PREDICTIONS), torch.tensor(LABELS)) == pytest.approx(400 / 6)


def test_binary_f1_of_the_positive_class():
    # positive 1: TP at 0, 2, 5 = 3; FP at 3 (predicted 1, gold 0) = 1; FN at 1 = 1.
    # F1 = 2*3 / (2*3 + 1 + 1) = 6/8 = 75 %.  (P = R = 3/4.)
    assert binary_f1(PREDICTIONS, LABELS) == pytest.approx(75.0)
    # positive 0: TP at 4 = 1; FP at 1 (predicted 0, gold 1); FN at 3. F1 = 2/(2+1+1) = 50 %.
    assert binary_f1(PREDICTIONS, LABELS, positive=0) == pytest.approx(50.0)
    # No positive on either side: 0, as scikit-learn reports it.
    assert binary_f1([0, 0], [0, 0]) == 0.0


def test_classification_bad_input():
    with pytest.raises(MiniBertError, match="3 predictions but 2 labels"):
        accuracy([1, 0, 1], [1, 0])
    with pytest.raises(MiniBertError, match="no predictions"):
        binary_f1([], [])


# ----------------------------------------------------------------------------
# SQuAD: normalization, EM, F1
# ----------------------------------------------------------------------------


def test_normalize_answer():
    # lower -> drop punctuation -> drop whole-word articles -> collapse whitespace
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple a day") == "apple day"
    # Articles only as whole words: 'theater', 'another', 'Athena' keep theirs.
    assert normalize_answer("the theater, another Athena") == "theater another athena"
    # Punctuation is deleted, not turned into a space ...
    assert normalize_answer("U.S.A.") == "usa"
    assert normalize_answer("rock-and-roll") == "rockandroll"
    # ... and before the articles go, so a hyphenated article is glued on and kept.
    assert normalize_answer("The-end") == "theend"
    # Tabs, newlines and runs of spaces collapse to one space; ends are stripped.
    assert normalize_answer("\t Super \n  Bowl  50 ") == "super bowl 50"
    # Only ASCII punctuation goes (string.punctuation): the en dash stays.
    assert normalize_answer("1990–1995") == "1990–1995"


def test_exact_match_and_f1():
    assert exact_match_score("the Denver Broncos.", "Denver Broncos") == 1
    assert exact_match_score("Broncos", "Denver Broncos") == 0
    # pred [denver, broncos, won], gold [denver, broncos]: overlap 2,
    # P = 2/3, R = 1, F1 = 2*(2/3)*1 / (5/3) = 0.8.
    assert f1_score("the Denver Broncos won", "Denver Broncos") == pytest.approx(0.8)
    # Multiset overlap: pred [new, york, new, york], gold [new, york]: common
    # new x1, york x1 = 2; P = 2/4, R = 1, F1 = 1 / 1.5 = 2/3.
    assert f1_score("New York, New York", "new york") == pytest.approx(2 / 3)
    assert f1_score("Paris", "London") == 0


def test_f1_of_empty_answers_v2_and_v1():
    # v2.0: an empty side is "no answer": 1 iff both are empty ("The" normalizes to "").
    assert f1_score("", "") == 1
    assert f1_score("The", "") == 1
    assert f1_score("Paris", "") == 0
    # v1.1 has no such rule: no overlap is 0, even for two empty answers.
    assert f1_score_v1("", "") == 0
    assert f1_score_v1("the Denver Broncos won", "Denver Broncos") == pytest.approx(0.8)


# ----------------------------------------------------------------------------
# SQuAD 1.1
# ----------------------------------------------------------------------------


def squad(*questions):
    """A SQuAD "data" list with one article and one paragraph holding `questions`."""
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": list(questions)}]}]


def question(qid, *answers, impossible=None):
    qa = {"id": qid, "question": "?", "answers": [{"text": text, "answer_start": 0} for text in answers]}
    if impossible is not None:
        qa["is_impossible"] = impossible
    return qa


V1_DATASET = squad(
    question("q1", "Denver Broncos", "The Broncos", "Broncos"),
    question("q2", "Denver Broncos", "Broncos"),
    question("q3", "Santa Clara"),
)


def test_squad_v1_takes_the_max_over_gold_answers(capsys):
    # q1 "the Denver Broncos team" -> [denver, broncos, team]:
    #    vs "Denver Broncos": P 2/3, R 1 -> F1 0.8;  vs "The Broncos" / "Broncos": P 1/3, R 1 -> 0.5.
    #    max F1 0.8, EM 0.
    # q2 "Broncos": EM 1 (third gold), F1 1.
    # q3 missing: scores 0 and still counts.
    # EM = 100 * 1/3 = 33.33; F1 = 100 * (0.8 + 1) / 3 = 60.
    predictions = {"q1": "the Denver Broncos team", "q2": "Broncos"}
    result = squad_v1_metrics(V1_DATASET, predictions)
    assert result == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(60.0)}
    assert "unanswered" in capsys.readouterr().err   # the script flags the missing question


def test_squad_v1_gold_of_only_an_article():
    # Gold "The" and prediction "a" both normalize to "": EM 1, but v1.1's F1
    # is 0 (no overlapping token), so EM 100 and F1 0.
    result = squad_v1_metrics(squad(question("q1", "The")), {"q1": "a"})
    assert result == {"exact_match": 100.0, "f1": 0.0}


def test_squad_v1_bad_input():
    with pytest.raises(MiniBertError, match="not in the dataset, e.g. 'q9'"):
        squad_v1_metrics(V1_DATASET, {"q1": "Broncos", "q9": "x"})
    with pytest.raises(MiniBertError, match="pass json\\['data'\\]"):
        squad_v1_metrics({"version": "1.1", "data": V1_DATASET}, {})
    with pytest.raises(MiniBertError, match="no gold answer"):
        squad_v1_metrics(squad(question("q1")), {"q1": ""})
    with pytest.raises(MiniBertError, match="expected a string"):
        squad_v1_metrics(V1_DATASET, {"q1": None})


# ----------------------------------------------------------------------------
# SQuAD 2.0
# ----------------------------------------------------------------------------

# Three answerable questions (q1, q2, q4) and two unanswerable ones (q3, q5).
V2_DATASET = squad(
    question("q1", "Denver Broncos", impossible=False),
    question("q2", "Paris", impossible=False),
    question("q3", impossible=True),
    question("q4", "blue whale", impossible=False),
    question("q5", impossible=True),
)
V2_PREDICTIONS = {"q1": "Denver Broncos", "q2": "London", "q3": "Berlin", "q4": "whale", "q5": ""}
# Raw scores:            q1      q2     q3 (gold [""])   q4 ([whale] vs [blue, whale])   q5
#   EM                    1       0       0               0                               1
#   F1                    1       0       0               P 1, R 1/2 -> 2/3               1
NA_PROBS = {"q1": 0.1, "q2": 0.4, "q4": 0.5, "q3": 0.6, "q5": 0.9}


def test_squad_v2_unanswerable_questions_and_breakdown():
    # No na_probs: every prediction stands.
    # exact = 100 * 2/5 = 40;  f1 = 100 * (1 + 0 + 0 + 2/3 + 1) / 5 = 53.33.
    # HasAns (q1, q2, q4): exact 1/3 -> 33.33, f1 (1 + 0 + 2/3)/3 -> 55.56.
    # NoAns (q3, q5): exact and f1 1/2 -> 50.
    result = squad_v2_metrics(V2_DATASET, V2_PREDICTIONS)
    assert result == {
        "exact": pytest.approx(40.0), "f1": pytest.approx(800 / 15), "total": 5,
        "HasAns_exact": pytest.approx(100 / 3), "HasAns_f1": pytest.approx(500 / 9), "HasAns_total": 3,
        "NoAns_exact": pytest.approx(50.0), "NoAns_f1": pytest.approx(50.0), "NoAns_total": 2,
    }
    assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                            "NoAns_exact", "NoAns_f1", "NoAns_total"]   # the script's order


def test_squad_v2_gold_that_normalizes_to_nothing_is_no_answer():
    # Gold "The" is dropped by normalization, so gold is [""]: "" scores 1.
    # The question still counts as answerable ("answers" is non-empty), and
    # only HasAns_* appear: there is no unanswerable question.
    result = squad_v2_metrics(squad(question("q1", "The")), {"q1": ""})
    assert result == {"exact": 100.0, "f1": 100.0, "total": 1,
                      "HasAns_exact": 100.0, "HasAns_f1": 100.0, "HasAns_total": 1}


def test_squad_v2_na_prob_threshold_replaces_predictions():
    # thresh 0.5: q3 (0.6) and q5 (0.9) exceed it and count as "": both
    # unanswerable -> 1 each. q4 (0.5) is not above 0.5 and keeps its 2/3.
    # exact = (1 + 0 + 1 + 0 + 1)/5 = 60;  f1 = (1 + 0 + 1 + 2/3 + 1)/5 = 73.33.
    result = squad_v2_metrics(V2_DATASET, V2_PREDICTIONS, na_probs=NA_PROBS, na_prob_thresh=0.5)
    assert result["exact"] == pytest.approx(60.0)
    assert result["f1"] == pytest.approx(1100 / 15)
    assert result["NoAns_exact"] == pytest.approx(100.0)


def test_squad_v2_best_threshold_search():
    # Start: everything "" -> the 2 unanswerable questions score 1 each: 2.
    # Then in na_prob order, each question keeps its prediction:
    #                      EM running (best)        F1 running (best)
    #   q1 0.1  has, +1     3  (new best @ 0.1)      3      (new best @ 0.1)
    #   q2 0.4  has, +0     3                        3
    #   q4 0.5  has         3  (+0)                  3.667  (+2/3, new best @ 0.5)
    #   q3 0.6  no, "Berlin" -1   2                  2.667
    #   q5 0.9  no, ""  +0  2                        2.667
    # best_exact = 100 * 3/5 = 60 @ 0.1;  best_f1 = 100 * (11/3)/5 = 73.33 @ 0.5
    # (the same 73.33 that thresh 0.5 gives in the test above).
    result = squad_v2_metrics(V2_DATASET, V2_PREDICTIONS, na_probs=NA_PROBS)
    assert result["best_exact"] == pytest.approx(60.0)
    assert result["best_exact_thresh"] == 0.1
    assert result["best_f1"] == pytest.approx(1100 / 15)
    assert result["best_f1_thresh"] == 0.5
    # With the default thresh 1.0 no na_prob exceeds it: the plain scores.
    assert result["exact"] == pytest.approx(40.0)
    assert list(result)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


def test_squad_v2_best_threshold_starts_at_zero():
    # Answering "" everywhere is best here: q1 (answerable) is wrong, q2
    # (unanswerable) answered. Start 1; q1 +0 -> 1 (not better); q2 -1 -> 0.
    # best = 100 * 1/2 = 50, and the threshold is the script's initial 0.0,
    # although every na_prob (like BERT's score differences) is negative.
    dataset = squad(question("q1", "Paris"), question("q2"))
    result = squad_v2_metrics(dataset, {"q1": "London", "q2": "Berlin"}, na_probs={"q1": -3.0, "q2": -1.0})
    assert (result["best_exact"], result["best_exact_thresh"]) == (50.0, 0.0)
    assert (result["best_f1"], result["best_f1_thresh"]) == (50.0, 0.0)


def test_squad_v2_missing_and_unknown_ids():
    # evaluate-v2.0.py fails on a missing prediction (KeyError in the
    # HasAns/NoAns breakdown), so there is no official number: refuse.
    partial = {qid: text for qid, text in V2_PREDICTIONS.items() if qid != "q4"}
    with pytest.raises(MiniBertError, match="1 questions have none, e.g. 'q4'"):
        squad_v2_metrics(V2_DATASET, partial)
    with pytest.raises(MiniBertError, match="predictions: 1 question ids are not in the dataset"):
        squad_v2_metrics(V2_DATASET, {**V2_PREDICTIONS, "q9": ""})
    with pytest.raises(MiniBertError, match="na_probs: 1 questions have none"):
        squad_v2_metrics(V2_DATASET, V2_PREDICTIONS, na_probs={k: v for k, v in NA_PROBS.items() if k != "q1"})
    with pytest.raises(MiniBertError, match="na_probs: 1 question ids are not in the dataset"):
        squad_v2_metrics(V2_DATASET, V2_PREDICTIONS, na_probs={**NA_PROBS, "q9": 0.0})
    with pytest.raises(MiniBertError, match="appears twice"):
        squad_v2_metrics(squad(question("q1"), question("q1")), {"q1": ""})


# ----------------------------------------------------------------------------
# conlleval
# ----------------------------------------------------------------------------


def test_chunks_iob2():
    assert conll_chunks(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]
    # Two touching entities of one type: the B- starts the second.
    assert conll_chunks(["B-PER", "B-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 2)]
    assert conll_chunks(["O", "O"]) == []


def test_chunks_iob1():
    # I- after O (or at the sentence start) starts a chunk.
    assert conll_chunks(["I-ORG", "I-ORG", "O", "I-PER"]) == [("ORG", 0, 1), ("PER", 3, 3)]
    # IOB1's B-: a second PER directly after the first.
    assert conll_chunks(["I-PER", "B-PER", "I-PER", "O"]) == [("PER", 0, 0), ("PER", 1, 2)]


def test_chunks_type_switch_and_sentence_end():
    # A type change ends one chunk and starts the next, with I- or B-.
    assert conll_chunks(["I-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]
    assert conll_chunks(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]
    # A chunk still open at the last token ends there.
    assert conll_chunks(["O", "B-MISC", "I-MISC"]) == [("MISC", 1, 2)]


def test_chunks_iobes():
    assert conll_chunks(["S-PER", "B-LOC", "E-LOC", "S-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)]
    # After E- a new chunk starts even with I- of the same type.
    assert conll_chunks(["B-ORG", "E-ORG", "I-ORG"]) == [("ORG", 0, 1), ("ORG", 2, 2)]


def test_chunks_reject_bad_tags():
    for bad in ["PER", "B-", "X-PER", "b-PER"]:
        with pytest.raises(MiniBertError, match="bad NER tag"):
            conll_chunks(["O", bad])


def test_conlleval_precision_recall_f1():
    gold = [["B-ORG", "O", "B-MISC", "O"],      # EU rejects German call
            ["B-PER", "I-PER"],                 # Peter Blackburn
            ["O", "B-LOC", "I-LOC"],            # in New York
            ["O", "O"]]
    predicted = [["B-ORG", "O", "B-PER", "O"],   # ORG right; MISC predicted as PER
                 ["B-PER", "O"],                 # PER too short: wrong end
                 ["O", "B-LOC", "I-LOC"],        # LOC right
                 ["B-ORG", "O"]]                 # a spurious ORG
    # Gold chunks: ORG, MISC, PER, LOC = 4. Predicted: ORG, PER, PER(0-0), LOC, ORG = 5.
    # Correct: ORG (sentence 1), LOC (sentence 3) = 2.
    # P = 2/5 = 40, R = 2/4 = 50, F1 = 2*40*50/90 = 44.44.
    # Tokens 4+2+3+2 = 11; right tags 3+1+3+1 = 8 -> accuracy 72.73.
    result = conlleval(gold, predicted)
    assert result["precision"] == pytest.approx(40.0)
    assert result["recall"] == pytest.approx(50.0)
    assert result["f1"] == pytest.approx(4000 / 90)
    assert result["accuracy"] == pytest.approx(800 / 11)
    per_type = result["per_type"]
    assert list(per_type) == ["LOC", "MISC", "ORG", "PER"]
    # ORG: 1 correct of 2 predicted, 1 gold -> P 50, R 100, F1 2*50*100/150 = 66.67.
    assert per_type["ORG"] == {"precision": 50.0, "recall": 100.0, "f1": pytest.approx(200 / 3),
                               "support": 1, "predicted": 2, "correct": 1}
    # MISC never predicted and PER never right: all 0 (conlleval's default).
    assert per_type["MISC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1, "predicted": 0, "correct": 0}
    assert per_type["PER"]["f1"] == 0.0 and per_type["PER"]["predicted"] == 2
    assert per_type["LOC"]["f1"] == 100.0


def test_conlleval_iob1_gold_against_iob2_predictions():
    # The same chunks in two encodings: PER 0-1, LOC 3-3 on both sides, so
    # F1 is 100, while only the O and the I-PER tags are equal (2 of 4: 50 %),
    # which is why token accuracy is not the NER metric.
    result = conlleval([["I-PER", "I-PER", "O", "I-LOC"]], [["B-PER", "I-PER", "O", "B-LOC"]])
    assert (result["precision"], result["recall"], result["f1"]) == (100.0, 100.0, 100.0)
    assert result["accuracy"] == 50.0


def test_conlleval_sentences_do_not_join():
    # I-PER ending one sentence and I-PER starting the next are two chunks.
    result = conlleval([["O", "I-PER"], ["I-PER"]], [["O", "I-PER"], ["I-PER"]])
    assert result["per_type"]["PER"]["support"] == 2
    assert result["f1"] == 100.0


def test_conlleval_bad_input():
    with pytest.raises(MiniBertError, match="2 gold sentences but 1 predicted"):
        conlleval([["O"], ["O"]], [["O"]])
    with pytest.raises(MiniBertError, match="sentence 1: 2 gold tags but 1 predicted"):
        conlleval([["O"], ["O", "B-PER"]], [["O"], ["O"]])


def test_iob1_to_iob2():
    tags = ["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC", "I-ORG"]
    # I- starting a chunk (after O, at the start, or after another type) becomes B-;
    # IOB1's B- (a LOC right after a LOC) stays B-.
    assert iob1_to_iob2(tags) == ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "B-ORG"]
    assert conll_chunks(iob1_to_iob2(tags)) == conll_chunks(tags)
    # IOB2 input comes back unchanged.
    iob2 = ["B-MISC", "I-MISC", "B-MISC", "O"]
    assert iob1_to_iob2(iob2) == iob2
    assert iob1_to_iob2([]) == []
    with pytest.raises(MiniBertError, match="not an IOB1 tag"):
        iob1_to_iob2(["S-PER"])


# ---- coursework exercises: conll-chunks, squad-f1 -----------------------------------------------


def test_exercise_conll_chunks_reads_iob2():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-MISC"]
    assert conll_chunks(tags) == [("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 5), ("MISC", 7, 7)]


def test_exercise_conll_chunks_reads_iob1_and_type_changes():
    # IOB1: I- after O starts a chunk; B- only splits two adjacent chunks of one type
    assert conll_chunks(["I-ORG", "I-ORG", "B-ORG", "O", "I-PER"]) == [("ORG", 0, 1), ("ORG", 2, 2), ("PER", 4, 4)]
    # a change of type ends a chunk even without B-
    assert conll_chunks(["I-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2)]
    assert conll_chunks(["O", "O"]) == [] and conll_chunks([]) == []


def test_exercise_conll_chunks_reads_iobes():
    assert conll_chunks(["S-PER", "B-LOC", "E-LOC", "S-LOC", "O"]) == [("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)]


def test_exercise_squad_f1_scores_the_token_overlap():
    from minibert.metrics import _overlap_f1
    # 2 common tokens: precision 2/3, recall 2/4, F1 = 2 * (2/3) * (1/2) / (2/3 + 1/2) = 4/7
    assert _overlap_f1(["the", "big", "cat"], ["a", "big", "cat", "sat"]) == pytest.approx(4 / 7)
    # a multiset: "cat" twice predicted, once in the gold, counts once
    assert _overlap_f1(["cat", "cat"], ["cat"]) == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    assert _overlap_f1(["dog"], ["cat"]) == 0
    assert _overlap_f1(["a", "b"], ["b", "a"]) == pytest.approx(1.0)


def test_exercise_squad_f1_through_the_official_normalisation():
    # after normalize_answer: "eiffel tower" against "eiffel tower in paris": P = 1, R = 2/4
    assert f1_score("The Eiffel Tower!", "the Eiffel tower, in Paris") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert f1_score("Paris", "paris.") == pytest.approx(1.0)
