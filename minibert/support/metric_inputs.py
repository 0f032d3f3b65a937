"""The checks on what minibert/metrics.py is given: what the official
scripts would silently misread or crash on raises a one-line MiniBertError
instead (lengths that differ, question ids the dataset does not have,
answers that are not text, a question without a prediction).
"""

from minibert.support.errors import MiniBertError


def as_list(values):
    """A Python list of a list, tuple, NumPy array or torch tensor."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def paired(predictions, labels):
    """Both as lists, which must pair up one to one and not be empty."""
    predictions, labels = as_list(predictions), as_list(labels)
    if len(predictions) != len(labels):
        raise MiniBertError(f"{len(predictions)} predictions but {len(labels)} labels: they must pair up one to one")
    if not predictions:
        raise MiniBertError("no predictions to score")
    return predictions, labels


def squad_questions(dataset):
    """The question dicts ("qas") of a SQuAD "data" list, in file order: the
    order in which the official scripts loop, and so add up, the scores."""
    questions = []
    try:
        for article in dataset:
            for paragraph in article["paragraphs"]:
                questions.extend(paragraph["qas"])
    except (KeyError, TypeError):
        raise MiniBertError("SQuAD dataset: expected the JSON's 'data' list (articles -> 'paragraphs' -> 'qas'); "
                            "pass json['data'], not the whole file") from None
    seen = set()
    for qa in questions:
        if not isinstance(qa, dict) or "id" not in qa or "answers" not in qa:
            raise MiniBertError(f"SQuAD dataset: every question needs an 'id' and 'answers', got {str(qa)[:80]}")
        if qa["id"] in seen:
            raise MiniBertError(f"SQuAD dataset: question id {qa['id']!r} appears twice")
        seen.add(qa["id"])
    if not questions:
        raise MiniBertError("SQuAD dataset: it holds no questions")
    return questions


def check_known_ids(by_id, questions, what):
    """Every key of `by_id` must be a question of the dataset. The official
    scripts silently ignore other ids; here they are an error, because they
    mean the predictions were made for another dataset or version."""
    known = {qa["id"] for qa in questions}
    unknown = [qid for qid in by_id if qid not in known]
    if unknown:
        raise MiniBertError(f"{what}: {len(unknown)} question ids are not in the dataset, e.g. {unknown[0]!r}")


def check_answers_are_text(predictions):
    for qid, answer in predictions.items():
        if not isinstance(answer, str):
            raise MiniBertError(f"predictions: the answer to {qid!r} is {type(answer).__name__}, expected a string")


def check_predictions(predictions, questions):
    """SQuAD predictions: {question id: answer text}, for questions of the dataset only."""
    check_known_ids(predictions, questions, "predictions")
    check_answers_are_text(predictions)


def check_v2_inputs(predictions, na_probs, questions):
    """evaluate-v2.0.py needs a prediction, and with na_probs a no-answer
    score, for every question (it fails with a KeyError without one)."""
    check_predictions(predictions, questions)
    missing = [qa["id"] for qa in questions if qa["id"] not in predictions]
    if missing:
        raise MiniBertError(f"predictions: {len(missing)} questions have none, e.g. {missing[0]!r} "
                            "(predict \"\" for no answer)")
    if na_probs is not None:
        check_known_ids(na_probs, questions, "na_probs")
        missing = [qa["id"] for qa in questions if qa["id"] not in na_probs]
        if missing:
            raise MiniBertError(f"na_probs: {len(missing)} questions have none, e.g. {missing[0]!r}")
