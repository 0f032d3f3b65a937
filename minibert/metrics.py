"""Evaluation metrics for the fine-tuning tasks, equal to the official scripts.

A fine-tuned BERT is only comparable with the paper when it is scored the way
the paper's numbers were scored, so every function here reproduces an
official script, quirks included (docs/papers.md section 4):

    accuracy, binary_f1          GLUE (4.3): accuracy; F1 of the positive class
                                 for MRPC and QQP
    squad_v1_metrics             SQuAD 1.1, evaluate-v1.1.py (4.1)
    squad_v2_metrics             SQuAD 2.0, evaluate-v2.0.py (4.1), with the
                                 no-answer threshold search BERT's
                                 null_odds.json is made for (3.3)
    conll_chunks, conlleval      CoNLL NER, the conlleval Perl script and its
                                 Python port sighsmile/conlleval (4.2)
    iob1_to_iob2                 CoNLL-2003's IOB1 tags -> IOB2

Every score is a percentage (0-100), as the official scripts print it.
Arguments that cannot be scored (lengths that differ, question ids the
dataset does not have, malformed tags) raise `MiniBertError`; the checks
are minibert/support/checks.py.
"""

import collections
import re
import string
import sys

from minibert.support.checks import check_predictions, check_v2_inputs, paired, squad_questions
from minibert.support import MiniBertError

# ----------------------------------------------------------------------------
# Classification (GLUE)
# ----------------------------------------------------------------------------


def accuracy(predictions, labels):
    """Percentage of predictions equal to their label (SST-2, MNLI, QNLI, SNLI, ...)."""
    predictions, labels = paired(predictions, labels)
    correct = sum(prediction == label for prediction, label in zip(predictions, labels))
    return 100.0 * correct / len(labels)


def binary_f1(predictions, labels, positive=1):
    """F1 (percent) of the `positive` class, GLUE's F1 for MRPC and QQP.

    GLUE scores with scikit-learn's `f1_score(labels, predictions)`, whose
    positive class is 1 (paraphrase, duplicate). F1 = 2 TP / (2 TP + FP + FN),
    the form scikit-learn computes; 0 when neither side has a positive, as
    scikit-learn returns then (with a warning).
    """
    predictions, labels = paired(predictions, labels)
    pairs = list(zip(predictions, labels))
    true_positives = sum(pred == positive and label == positive for pred, label in pairs)
    false_positives = sum(pred == positive and label != positive for pred, label in pairs)
    false_negatives = sum(pred != positive and label == positive for pred, label in pairs)
    denominator = 2 * true_positives + false_positives + false_negatives
    return 100.0 * 2 * true_positives / denominator if denominator else 0.0


# ----------------------------------------------------------------------------
# SQuAD: evaluate-v1.1.py and evaluate-v2.0.py
# ----------------------------------------------------------------------------

_PUNCTUATION = set(string.punctuation)                 # ASCII only, as the scripts
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)  # whole words: 'theater' keeps its 'the'


def normalize_answer(text):
    """Lower-case, delete punctuation, delete articles, collapse whitespace.

    The order is the scripts' white_space_fix(remove_articles(remove_punc(
    lower(s)))), and it matters: punctuation is deleted, not replaced by a
    space, so "The-end" becomes "theend" and keeps its article.
    """
    text = text.lower()
    text = "".join(character for character in text if character not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match_score(prediction, ground_truth):
    """1 if the two answers are equal after `normalize_answer`, else 0."""
    return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def _overlap_f1(prediction_tokens, gold_tokens):
    """F1 of the multiset overlap of two token lists; 0 when nothing overlaps."""
    # exercise: squad-f1
    common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)
    # end exercise


def f1_score(prediction, ground_truth):
    """Token F1 of two answers, evaluate-v2.0.py's `compute_f1`.

    An empty answer (after normalization) is "no answer": it scores 1 against
    another empty answer and 0 against anything else.
    """
    prediction_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(ground_truth).split()
    if not prediction_tokens or not gold_tokens:
        return int(prediction_tokens == gold_tokens)
    return _overlap_f1(prediction_tokens, gold_tokens)


def f1_score_v1(prediction, ground_truth):
    """Token F1 as evaluate-v1.1.py computes it: like `f1_score`, except that
    two empty answers score 0 (no overlap), not 1. SQuAD 1.1 has no
    unanswerable questions, so this only shows when a gold text is all
    articles and punctuation."""
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def squad_v1_metrics(dataset, predictions):
    """evaluate-v1.1.py: {"exact_match", "f1"} in percent.

    `dataset` is the JSON's "data" list; `predictions` maps question id ->
    answer text. Each question scores the maximum over its gold answers. A
    question with no prediction scores 0 and still counts in the mean; the
    script prints a line for it, and so does this (one line for all of them).
    """
    questions = squad_questions(dataset)
    check_predictions(predictions, questions)
    exact_match = f1 = 0
    unanswered = []
    for qa in questions:
        if qa["id"] not in predictions:
            unanswered.append(qa["id"])
            continue
        ground_truths = [answer["text"] for answer in qa["answers"]]
        if not ground_truths:
            raise MiniBertError(f"SQuAD 1.1 dataset: question {qa['id']!r} has no gold answer "
                                "(a SQuAD 2.0 file? use squad_v2_metrics)")
        prediction = predictions[qa["id"]]
        exact_match += max(exact_match_score(prediction, truth) for truth in ground_truths)
        f1 += max(f1_score_v1(prediction, truth) for truth in ground_truths)
    if unanswered:
        print(f"{len(unanswered)} unanswered questions (e.g. {unanswered[0]}) will receive score 0.", file=sys.stderr)
    total = len(questions)
    return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _v2_gold_answers(qa):
    """The gold texts that normalize to something; [""] for an unanswerable
    question, so that only the empty answer matches it."""
    texts = [answer["text"] for answer in qa["answers"] if normalize_answer(answer["text"])]
    return texts or [""]


def _apply_no_answer_threshold(scores, na_probs, has_answer, na_prob_thresh):
    """A question whose no-answer probability exceeds the threshold is scored
    as if answered "": 1 if it is unanswerable, 0 otherwise."""
    return {qid: float(not has_answer[qid]) if na_probs[qid] > na_prob_thresh else score
            for qid, score in scores.items()}


def _mean_scores(exact, f1, qids):
    """{"exact", "f1", "total"} over the questions `qids` (the script's make_eval_dict)."""
    total = len(qids)
    return {"exact": 100.0 * sum(exact[qid] for qid in qids) / total,
            "f1": 100.0 * sum(f1[qid] for qid in qids) / total,
            "total": total}


def _find_best_thresh(predictions, scores, na_probs, has_answer):
    """The threshold on the no-answer probability that maximizes the mean
    score, and that mean: evaluate-v2.0.py's `find_best_thresh`.

    It starts from answering "" everywhere (each unanswerable question scores
    1, each answerable one 0), then, in increasing order of na_prob, lets one
    more question keep its prediction: an answerable one gains its raw score,
    an unanswerable one loses its point if the prediction is not "". The
    script's quirks are kept: the threshold starts at 0.0 (whatever the
    scale of na_probs), a new best must be strictly better, and a threshold
    that falls inside a run of equal na_probs is reported as it is.
    """
    score = best_score = sum(1 for qid in has_answer if not has_answer[qid])
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda qid: na_probs[qid]):   # stable: ties keep na_probs' order
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:   # the raw text: " " counts as an answer here, as in the script
            score += -1
        if score > best_score:
            best_score, best_thresh = score, na_probs[qid]
    return 100.0 * best_score / len(scores), best_thresh


def squad_v2_metrics(dataset, predictions, na_probs=None, na_prob_thresh=1.0):
    """evaluate-v2.0.py, in percent.

    `dataset` is the JSON's "data" list; `predictions` maps every question id
    to its answer ("" = no answer). `na_probs` (the script's na_prob_file)
    maps every question id to a no-answer score, e.g. the score differences
    of BERT's null_odds.json; a question whose score exceeds `na_prob_thresh`
    is scored as answered "".

    Returns "exact", "f1", "total"; "HasAns_*" and "NoAns_*" for the
    answerable and unanswerable questions, each only when there are some;
    and with `na_probs` also "best_exact", "best_exact_thresh", "best_f1",
    "best_f1_thresh" (see `_find_best_thresh`). A question is answerable when
    its "answers" list is non-empty, as in the script ("is_impossible" is not
    read). Every question needs a prediction (the script fails without one).
    """
    questions = squad_questions(dataset)
    check_v2_inputs(predictions, na_probs, questions)
    threshold_search = na_probs is not None
    if na_probs is None:
        na_probs = {qid: 0.0 for qid in predictions}   # the script's default: nothing exceeds 1.0

    has_answer = {qa["id"]: bool(qa["answers"]) for qa in questions}
    exact_raw, f1_raw = {}, {}
    for qa in questions:
        prediction, golds = predictions[qa["id"]], _v2_gold_answers(qa)
        exact_raw[qa["id"]] = max(exact_match_score(prediction, gold) for gold in golds)
        f1_raw[qa["id"]] = max(f1_score(prediction, gold) for gold in golds)
    exact = _apply_no_answer_threshold(exact_raw, na_probs, has_answer, na_prob_thresh)
    f1 = _apply_no_answer_threshold(f1_raw, na_probs, has_answer, na_prob_thresh)

    result = _mean_scores(exact, f1, list(exact))
    for prefix, answerable in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid in has_answer if has_answer[qid] == answerable]
        if qids:
            result.update({f"{prefix}_{key}": value for key, value in _mean_scores(exact, f1, qids).items()})
    if threshold_search:
        # The search uses the raw scores: it asks what each threshold *would* score.
        result["best_exact"], result["best_exact_thresh"] = _find_best_thresh(predictions, exact_raw, na_probs,
                                                                              has_answer)
        result["best_f1"], result["best_f1_thresh"] = _find_best_thresh(predictions, f1_raw, na_probs, has_answer)
    return result


# ----------------------------------------------------------------------------
# CoNLL NER: conlleval
# ----------------------------------------------------------------------------


def _split_tag(tag):
    """"B-PER" -> ("B", "PER"); "O" -> ("O", None)."""
    if tag == "O":
        return "O", None
    prefix, _, chunk_type = str(tag).partition("-")
    if prefix not in ("B", "I", "E", "S") or not chunk_type:
        raise MiniBertError(f"bad NER tag {tag!r}: expected 'O' or B-, I-, E-, S- and a type, e.g. 'B-PER'")
    return prefix, chunk_type


def _breaks(previous, current):
    """For two non-O tags: does a chunk end between them (and so a new one
    start)? Yes when the type changes, the current tag is B or S, or the
    previous tag is E or S."""
    (previous_prefix, previous_type), (prefix, chunk_type) = previous, current
    return chunk_type != previous_type or prefix in ("B", "S") or previous_prefix in ("E", "S")


def starts_chunk(previous_tag, tag):
    """conlleval's startOfChunk: I- after O starts a chunk too, which is what
    lets IOB1 (where a chunk usually starts with I-) score correctly."""
    previous, current = _split_tag(previous_tag), _split_tag(tag)
    if current[0] == "O":
        return False
    return previous[0] == "O" or _breaks(previous, current)


def ends_chunk(previous_tag, tag):
    """conlleval's endOfChunk, the mirror of `starts_chunk`."""
    previous, current = _split_tag(previous_tag), _split_tag(tag)
    if previous[0] == "O":
        return False
    return current[0] == "O" or _breaks(previous, current)


def conll_chunks(tags):
    """The chunks (entities) of one sentence's tags, as (type, start, end)
    with `end` the index of the chunk's last token (inclusive).

    The rules are those of conlleval (docs/papers.md 4.2), written as the
    Python port sighsmile/conlleval writes them; they read IOB1, IOB2 and
    IOBES alike. On B/I/O tags they are exactly the Perl script's rules (the
    Perl script knows no S- tag). The sentence is padded with O on both
    sides, as conlleval treats a sentence boundary.

        ["B-PER", "I-PER", "O", "I-LOC"] -> [("PER", 0, 1), ("LOC", 3, 3)]
    """
    # exercise: conll-chunks
    chunks, start, previous = [], None, "O"
    for position, tag in enumerate(list(tags) + ["O"]):   # the final O closes a chunk at the sentence end
        if ends_chunk(previous, tag):
            chunks.append((_split_tag(previous)[1], start, position - 1))
        if starts_chunk(previous, tag):
            start = position
        previous = tag
    return chunks
    # end exercise


def _precision_recall_f1(correct, predicted, gold):
    """conlleval's formulas, in percent; each is 0 when undefined."""
    precision = 100 * correct / predicted if predicted > 0 else 0.0
    recall = 100 * correct / gold if gold > 0 else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def conlleval(gold_sentences, predicted_sentences):
    """Entity-level precision, recall and F1 (percent) as conlleval prints them.

    Both arguments are lists of sentences, each a list of tags. A predicted
    chunk is correct iff a gold chunk has the same start, end and type. The
    result: "precision", "recall", "f1" over all chunks; "accuracy", the
    percentage of tokens whose tag is right (conlleval prints it; it is not
    the NER metric); and "per_type", {type: {"precision", "recall", "f1",
    "support" (gold chunks), "predicted", "correct"}} for every type that
    occurs on either side, in sorted order.

    Sentences are scored one by one, which is conlleval's blank line: a
    chunk never runs across a sentence boundary, and the boundary is not a
    token of the accuracy.
    """
    gold_sentences, predicted_sentences = list(gold_sentences), list(predicted_sentences)
    if len(gold_sentences) != len(predicted_sentences):
        raise MiniBertError(f"{len(gold_sentences)} gold sentences but {len(predicted_sentences)} predicted ones")
    gold_counts, predicted_counts, correct_counts = (collections.Counter() for _ in range(3))
    tokens = correct_tags = 0
    for index, (gold, predicted) in enumerate(zip(gold_sentences, predicted_sentences)):
        gold, predicted = list(gold), list(predicted)
        if len(gold) != len(predicted):
            raise MiniBertError(f"sentence {index}: {len(gold)} gold tags but {len(predicted)} predicted tags")
        tokens += len(gold)
        correct_tags += sum(g == p for g, p in zip(gold, predicted))
        gold_chunks, predicted_chunks = conll_chunks(gold), conll_chunks(predicted)
        gold_counts.update(chunk_type for chunk_type, _, _ in gold_chunks)
        predicted_counts.update(chunk_type for chunk_type, _, _ in predicted_chunks)
        correct_counts.update(chunk_type for chunk_type, _, _ in set(gold_chunks) & set(predicted_chunks))
    if tokens == 0:
        raise MiniBertError("conlleval: no tokens to score")

    result = _precision_recall_f1(sum(correct_counts.values()), sum(predicted_counts.values()),
                                  sum(gold_counts.values()))
    result["accuracy"] = 100 * correct_tags / tokens
    result["per_type"] = {}
    for chunk_type in sorted(set(gold_counts) | set(predicted_counts)):
        scores = _precision_recall_f1(correct_counts[chunk_type], predicted_counts[chunk_type],
                                      gold_counts[chunk_type])
        scores.update(support=gold_counts[chunk_type], predicted=predicted_counts[chunk_type],
                      correct=correct_counts[chunk_type])
        result["per_type"][chunk_type] = scores
    return result


def iob1_to_iob2(tags):
    """One sentence's IOB1 tags as IOB2: every chunk starts with B-.

    CoNLL-2003's shared files are IOB1: a chunk starts with I-, and B- only
    marks a chunk that directly follows one of the same type. IOB2 gives the
    classifier one consistent tag for "first word of an entity". The chunks
    are unchanged (conlleval scores both files the same).

        ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]
        -> ["B-PER", "I-PER", "B-PER", "O", "B-LOC"]
    """
    tags = list(tags)
    for tag in tags:
        if _split_tag(tag)[0] not in ("O", "B", "I"):
            raise MiniBertError(f"iob1_to_iob2: {tag!r} is not an IOB1 tag (only O, B- and I-)")
    converted = ["O"] * len(tags)
    for chunk_type, start, end in conll_chunks(tags):
        converted[start] = f"B-{chunk_type}"
        for position in range(start + 1, end + 1):
            converted[position] = f"I-{chunk_type}"
    return converted
