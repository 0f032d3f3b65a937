"""Extractive question answering: SQuAD v1.1 and v2.0 ([BERT] 4.2, 4.3).

The question and the paragraph are packed as `[CLS] question [SEP] context
[SEP]`. The head is one linear layer on every token: two numbers per token,
the logit that the answer starts there and the logit that it ends there
(Figure 4c; Google's run_squad.py `create_model`). Training maximises the
log-likelihood of the gold start and of the gold end.

Long paragraphs do not fit in max_seq_len tokens, so each question is read
through several overlapping *windows* of the context, starting every
doc_stride tokens (run_squad.py's "doc spans"). A window that does not hold
the whole answer is trained to point at [CLS], which is also the target of
an unanswerable SQuAD 2.0 question. At prediction time the best span over
all of a question's windows wins; for SQuAD 2.0 it is compared with the
[CLS] "null" score (docs/papers.md 3.3).

Features are dicts (minibert/finetuning.py): input_ids, token_type_ids,
"example", the targets "start_positions"/"end_positions", and two arrays
that are not batched: "_offsets" (T, 2), each token's character span in the
ORIGINAL context, (-1, -1) outside it; "_max_context" (T,), True where this
window gives the token the most context on both sides, the only windows in
which an answer may start there (run_squad.py `_check_is_max_context`).
The SQuAD files are read and written at the end of this file (`read_squad`,
`write_squad_predictions`).
"""

import math
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from minibert import metrics
from minibert.heads import MASKED_LOGIT, SpanHead
from minibert.support import MiniBertError
from minibert.support.files import read_json_object, write_json
from minibert.support.task_files import check_format, json_field, nonempty
from minibert.tasks import Task

# A probability that underflowed to 0 in float32 counts as the smallest
# positive float32, so that log-probabilities (and their differences) stay finite.
SMALLEST_PROBABILITY = float(np.finfo(np.float32).tiny)


# ----------------------------------------------------------------------------
# Windows over a long context, token spans, span scores
# ----------------------------------------------------------------------------


def context_windows(num_tokens, window_len, doc_stride):
    """(first token, number of tokens) of each window, run_squad.py's loop:
    windows of at most window_len tokens, the next starting doc_stride tokens
    later (or right after this one, if doc_stride is longer than a window),
    until one reaches the end. A context of no tokens gets one (empty)
    window, so every question has a feature."""
    windows, start = [], 0
    while True:
        length = min(num_tokens - start, window_len)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, doc_stride)


def max_context_window(windows, num_tokens):
    """For each context token, the window in which it has the most context.
    A token near a window's edge sees little of the text on one side, so
    run_squad.py scores each window for a token as min(tokens on its left,
    tokens on its right) + 0.01 * window length and keeps the best (the
    first on a tie)."""
    best_window, best_score = [0] * num_tokens, [-math.inf] * num_tokens
    for w, (start, length) in enumerate(windows):
        for token in range(start, start + length):
            score = min(token - start, start + length - 1 - token) + 0.01 * length
            if score > best_score[token]:
                best_window[token], best_score[token] = w, score
    return best_window


def token_spans(context, offsets):
    """The character span (start, end) of each context token, an (N, 2)
    array, each extended over the combining marks that follow it: an uncased
    tokenizer deletes accents, so in "Cafe\\u0301" (a combining acute accent)
    "##fe" covers "fe" but not the accent, which an answer would lose."""
    spans = []
    for start, end in offsets:
        while end < len(context) and unicodedata.combining(context[end]):
            end += 1
        spans.append((start, end))
    return np.array(spans, dtype=np.int32).reshape(-1, 2)


def answer_tokens(spans, answer_start, answer_text):
    """(first, last) context token of an answer given by its characters (a
    token it partly covers counts), or None when no token overlaps it (an
    answer of only whitespace, or one whose answer_start misses its text)."""
    answer_end = answer_start + len(answer_text)
    first = int(np.searchsorted(spans[:, 1], answer_start, side="right"))   # the first token ending after its start
    last = int(np.searchsorted(spans[:, 0], answer_end, side="left")) - 1   # the last token starting before its end
    return (first, last) if first <= last else None


def masked_logits(logits, attention_mask):
    """(B, T, 2) logits -> start and end logits (B, T) each, in float32,
    with padding at MASKED_LOGIT: its exp is 0, so padding gets no probability."""
    logits = logits.float().masked_fill(attention_mask[:, :, None] == 0, MASKED_LOGIT)
    return logits[..., 0], logits[..., 1]


def top_positions(scores, allowed, n):
    """The (at most) n positions of `allowed` with the highest scores, best first."""
    return allowed[np.argsort(-scores[allowed], kind="stable")[:n]]


# ----------------------------------------------------------------------------
# The task
# ----------------------------------------------------------------------------


class SquadTask(Task):
    """SQuAD v1.1 or v2.0. version: "1.1" or "2.0"; None until known: `read`
    sets it from the file (which decides how it is scored); for examples made
    by hand it is "2.0" exactly when some question is unanswerable.
    doc_stride, max_query_len, max_answer_len, n_best, null_threshold:
    run_squad.py's, with its defaults (docs/papers.md 3.2, 3.3). settings: a
    fine-tuned folder's task.json record, whose values replace the keyword
    arguments."""

    main_metric = "f1"
    uses_pooler = False       # the head reads every token, not the pooled [CLS] vector
    default_max_seq_len = 384

    def __init__(self, version=None, doc_stride=128, max_query_len=64, max_answer_len=30, n_best=20,
                 null_threshold=0.0, settings=None, name="squad", labels=None):
        self.name = name
        given = (version, doc_stride, max_query_len, max_answer_len, n_best, null_threshold)
        values = squad_settings(dict(zip(SQUAD_SETTINGS, given)), settings)
        (self.version, self.doc_stride, self.max_query_len, self.max_answer_len, self.n_best,
         self.null_threshold) = (values[key] for key in SQUAD_SETTINGS)

    @property
    def settings(self):
        """What task.json keeps, so that a loaded model predicts as it was trained."""
        return dict(zip(SQUAD_SETTINGS, (self.version, self.doc_stride, self.max_query_len, self.max_answer_len,
                                          self.n_best, self.null_threshold)))

    @property
    def feature_settings(self):
        """The settings that shape the features (a resumed run must keep them)."""
        return {"doc_stride": self.doc_stride, "max_query_len": self.max_query_len}

    def read(self, path):
        """The questions of a SQuAD JSON file (a list of SquadQuestion). Only
        the file's version is kept: `metrics` rebuilds the official "data"
        from the questions, which also scores a held-out subset correctly."""
        questions, self.version, _ = read_squad(path)
        return questions

    def check_examples(self, path, examples, training=False):
        """A warning naming the questions whose answer is not at its
        answer_start (check_answer_alignment); a training file where most
        are not is refused."""
        return check_answer_alignment(path, examples, refuse_most=training)

    def split_group(self, question):
        """split() keeps whole articles on one side, so no paragraph is both
        trained on and evaluated."""
        return question.article

    def version_of(self, examples):
        """"1.1" or "2.0": how `examples` are predicted and scored."""
        if self.version is not None:
            return self.version
        return "2.0" if any(example.is_impossible for example in examples) else "1.1"

    # ---- features ------------------------------------------------------------

    def features(self, examples, tokenizer, max_seq_len):
        """One feature per window of each question (see the module docstring).
        The question and the contexts are tokenized apart, without special
        tokens, by the `tokenizers` backend, whose offsets index the original
        text whatever the normalizer did (lower-casing, stripped accents).
        Each distinct context is tokenized once (about 5 questions each)."""
        backend = tokenizer.backend
        question_encodings = backend.encode_batch([example.question for example in examples], add_special_tokens=False)
        contexts = list(dict.fromkeys(example.context for example in examples))
        encoded = dict(zip(contexts, backend.encode_batch(contexts, add_special_tokens=False)))
        spans_of = {context: token_spans(context, encoded[context].offsets) for context in contexts}
        features = []
        for index, (example, question) in enumerate(zip(examples, question_encodings)):
            question_ids = question.ids[:self.max_query_len]   # run_squad.py cuts long questions
            context = encoded[example.context]
            features += self.question_features(index, example, question_ids, context.ids, spans_of[example.context],
                                               tokenizer, max_seq_len)
        return features

    def question_features(self, index, example, question_ids, context_ids, spans, tokenizer, max_seq_len):
        """`[CLS] question [SEP] window [SEP]` for each window of its context."""
        window_len = max_seq_len - len(question_ids) - 3   # [CLS] and two [SEP]
        if window_len < 1:
            raise MiniBertError(f"question {example.id!r}: a question of {len(question_ids)} tokens leaves no room for "
                                f"the context in max_seq_len {max_seq_len}; lower max_query_len ({self.max_query_len}) "
                                "or raise max_seq_len")
        windows = context_windows(len(context_ids), window_len, self.doc_stride)
        best_window = max_context_window(windows, len(context_ids))
        # Training targets come from the first answer, as in run_squad.py;
        # an unanswerable question has none and points at [CLS].
        answer = None
        if example.answers and not example.is_impossible:
            answer = answer_tokens(spans, example.answers[0][1], example.answers[0][0])
        offset = len(question_ids) + 2   # the position of the first context token in a feature
        features = []
        for w, (start, length) in enumerate(windows):
            input_ids = ([tokenizer.cls_id] + question_ids + [tokenizer.sep_id] + context_ids[start:start + length]
                         + [tokenizer.sep_id])
            token_type_ids = [0] * offset + [1] * (length + 1)
            offsets = np.full((len(input_ids), 2), -1, dtype=np.int32)
            offsets[offset:offset + length] = spans[start:start + length]
            max_context = np.zeros(len(input_ids), dtype=bool)
            max_context[offset:offset + length] = [best_window[t] == w for t in range(start, start + length)]
            start_position = end_position = 0   # [CLS]
            if answer is not None and start <= answer[0] and answer[1] < start + length:
                start_position, end_position = answer[0] - start + offset, answer[1] - start + offset
            features.append({"input_ids": input_ids, "token_type_ids": token_type_ids, "example": index,
                             "start_positions": start_position, "end_positions": end_position,
                             "_offsets": offsets, "_max_context": max_context})
        return features

    def make_head(self, config):
        return SpanHead(config)

    # ---- the objective ---------------------------------------------------------

    def loss(self, logits, batch):
        """L = -(1/B) sum_i (log p_start[s_i] + log p_end[e_i]) / 2 over the
        batch's B features, p = softmax over the feature's positions ([BERT]
        4.2: "the log-likelihood of the correct start and end positions";
        run_squad.py's total_loss halves their sum). Padding is masked out of
        the softmax: it depends on the batch, so it must not change the loss."""
        start_logits, end_logits = masked_logits(logits, batch["attention_mask"])
        start_loss = F.cross_entropy(start_logits, batch["start_positions"])
        end_loss = F.cross_entropy(end_logits, batch["end_positions"])
        return (start_loss + end_loss) / 2

    def counts(self, batch):
        return {"span": len(batch["start_positions"])}

    def losses(self, logits, batch):
        """B L, the SUM over this batch, in training.training_step's form (see ClassificationTask.losses)."""
        start_logits, end_logits = masked_logits(logits, batch["attention_mask"])
        both_right = ((start_logits.argmax(-1) == batch["start_positions"]) &
                      (end_logits.argmax(-1) == batch["end_positions"]))
        return {"span": (self.loss(logits, batch) * len(both_right), both_right.sum())}

    def distributions(self, logits, batch):
        """What the loss compares, as (rows, weight): the start and the end
        distributions over each feature's positions (padding at MASKED_LOGIT,
        probability 0), weight 1/2 each, as the loss averages the two."""
        start_logits, end_logits = masked_logits(logits, batch["attention_mask"])
        return torch.cat([start_logits, end_logits]), 0.5                  # (2B, T)

    # ---- predictions and metrics -------------------------------------------

    def outputs(self, logits, batch):
        """Per feature, a (2, real tokens) array: the start and end probabilities
        of each token (not logits: an ensemble averages numbers on one scale)."""
        start_logits, end_logits = masked_logits(logits, batch["attention_mask"])
        probabilities = torch.stack([start_logits.softmax(-1), end_logits.softmax(-1)], dim=1).cpu().numpy()
        lengths = batch["attention_mask"].sum(-1).tolist()
        return [probabilities[row, :, :n] for row, n in enumerate(lengths)]

    def predict(self, examples, features, outputs):
        """The answer of each question, from the outputs of all its windows.

        A span is scored log p_start + log p_end (run_squad.py adds the raw
        logits, which are not on one scale across windows and models; each
        window's log-probabilities are, so an ensemble can average them). In
        each window the n_best most likely starts (among the tokens this
        window is the max-context window for) and ends (among its context
        tokens, not all tokens as in run_squad.py, so a window always has a
        candidate) are paired, start <= end, at most max_answer_len tokens;
        the best pair over all windows is the answer, cut from the context.

        SQuAD 2.0 (docs/papers.md 3.3): score_null is the lowest [CLS] score
        log p_start[0] + log p_end[0] over the windows, score_diff =
        score_null - best span score, and the answer is "" iff score_diff >
        null_threshold."""
        version = self.version_of(examples)
        windows_of = [[] for _ in examples]
        for feature, output in zip(features, outputs):
            windows_of[feature["example"]].append((feature, output))
        answers, null_odds, span_answers = {}, {}, {}
        for example, windows in zip(examples, windows_of):
            best_score, best_text, score_null = -math.inf, "", math.inf
            for feature, probabilities in windows:
                log_start, log_end = np.log(np.maximum(probabilities.astype(np.float64), SMALLEST_PROBABILITY))
                score_null = min(score_null, log_start[0] + log_end[0])
                span = self.best_span(log_start, log_end, feature)
                if span is not None and span[0] > best_score:
                    best_score = span[0]
                    best_text = example.context[feature["_offsets"][span[1], 0]:feature["_offsets"][span[2], 1]]
            if version == "2.0":
                # With no candidate span at all (an empty context), score_diff is +inf: no answer.
                score_diff = score_null - best_score
                null_odds[example.id] = float(score_diff)
                span_answers[example.id] = best_text
                best_text = "" if score_diff > self.null_threshold else best_text
            answers[example.id] = best_text
        if version == "1.1":
            return SquadPredictions(answers)
        return SquadPredictions(answers, null_odds, span_answers)

    def best_span(self, log_start, log_end, feature):
        """(score, start position, end position) of the best span of one
        window, or None if it has no allowed span."""
        # exercise: squad-span
        starts = top_positions(log_start, np.flatnonzero(feature["_max_context"]), self.n_best)
        ends = top_positions(log_end, np.flatnonzero(feature["_offsets"][:, 0] >= 0), self.n_best)
        if len(starts) == 0 or len(ends) == 0:
            return None
        scores = log_start[starts][:, None] + log_end[ends][None, :]   # (starts, ends)
        lengths = ends[None, :] - starts[:, None] + 1
        scores = np.where((lengths >= 1) & (lengths <= self.max_answer_len), scores, -np.inf)
        i, j = np.unravel_index(np.argmax(scores), scores.shape)
        return None if scores[i, j] == -np.inf else (float(scores[i, j]), int(starts[i]), int(ends[j]))
        # end exercise

    def metrics(self, examples, predictions):
        """evaluate-v1.1.py: exact_match, f1. evaluate-v2.0.py with the null
        odds as its na_prob_file: exact, f1, HasAns_*/NoAns_*, best_exact/best_f1
        and their thresholds (what null_threshold should be). Given the best
        spans and na_prob_thresh = null_threshold, exact and f1 score the
        answers as predicted, while the search can try every threshold."""
        dataset = squad_dataset(examples)
        if self.version_of(examples) == "1.1":
            return metrics.squad_v1_metrics(dataset, predictions.answers)
        answers = predictions.answers if predictions.span_answers is None else predictions.span_answers
        return metrics.squad_v2_metrics(dataset, answers, na_probs=predictions.null_odds,
                                        na_prob_thresh=self.null_threshold)

    def has_gold(self, examples):
        """Whether every question has its answers or is unanswerable (so it can be scored)."""
        return all(example.answers or example.is_impossible for example in examples)

    def write_predictions(self, examples, predictions, path):
        """{id: answer} and, for SQuAD 2.0, the null odds (write_squad_predictions); returns the paths written."""
        return write_squad_predictions(examples, predictions, path)


# ----------------------------------------------------------------------------
# The files: SQuAD JSON, the predictions and null odds; the checks of the settings
# ----------------------------------------------------------------------------

# What task.json keeps of the SQuAD task, so that a loaded model makes its
# features and predictions as it was trained (SquadTask.settings).
SQUAD_SETTINGS = ("squad_version", "doc_stride", "max_query_len", "max_answer_len", "n_best", "null_threshold")


def squad_settings(values, settings=None):
    """SquadTask's settings: `values` ({SQUAD_SETTINGS name: value}, its
    keyword arguments) with those of `settings` (a fine-tuned folder's
    task.json record) in their place, checked; the version "1.1", "2.0" or
    None (a "v" prefix dropped), null_threshold a float."""
    values = {**values, **{key: settings[key] for key in SQUAD_SETTINGS if settings and key in settings}}
    values["squad_version"] = _checked_version(values["squad_version"])
    for key in ("doc_stride", "max_query_len", "max_answer_len", "n_best"):
        if not isinstance(values[key], int) or isinstance(values[key], bool) or values[key] < 1:
            raise MiniBertError(f"squad: {key} must be a positive integer, got {values[key]!r}")
    if not isinstance(values["null_threshold"], (int, float)) or not math.isfinite(values["null_threshold"]):
        raise MiniBertError(f"squad: null_threshold must be a number, got {values['null_threshold']!r}")
    values["null_threshold"] = float(values["null_threshold"])
    return values


def _checked_version(version):
    if version is None:
        return None
    version = str(version).removeprefix("v")
    if version not in ("1.1", "2.0"):
        raise MiniBertError(f"squad: unknown SQuAD version {version!r} (expected 1.1 or 2.0)")
    return version


@dataclass
class SquadQuestion:
    """One SQuAD question with its paragraph. `answers` is a list of
    (text, start character in context) pairs: several per dev question, none
    for an unanswerable (v2.0) question."""
    id: str
    question: str
    context: str
    answers: list
    is_impossible: bool
    article: int           # index of the article in the file's "data" list
    title: str



def _squad_question(path, qa, context, article, title, where):
    """One entry of a paragraph's "qas" list, checked."""
    question = json_field(path, qa, "question", str, where)
    question_id = json_field(path, qa, "id", str, where)
    is_impossible = qa.get("is_impossible", False)
    if not isinstance(is_impossible, bool):
        raise MiniBertError(f"{path}: {where}: 'is_impossible' must be true or false")
    answers = []
    for k, answer in enumerate(json_field(path, qa, "answers", list, where)):
        text = json_field(path, answer, "text", str, f"{where}.answers[{k}]")
        start = json_field(path, answer, "answer_start", int, f"{where}.answers[{k}]")
        answers.append((text, start))
    if is_impossible and answers:
        raise MiniBertError(f"{path}: {where}: an unanswerable question (is_impossible) with answers")
    return SquadQuestion(question_id, question, context, answers, is_impossible, article, title)


def _squad_version(path, dataset, flags_impossible):
    """"1.1" or "2.0": the file's "version" field ("1.1", "v2.0"), or without
    one, "2.0" exactly when the questions carry is_impossible flags."""
    if "version" not in dataset:
        return "2.0" if flags_impossible else "1.1"
    version = str(dataset["version"]).removeprefix("v")
    if version not in ("1.1", "2.0"):
        raise MiniBertError(f"{path}: unknown SQuAD version {dataset['version']!r} (expected 1.1 or v2.0)")
    return version


def read_squad(path):
    """(questions, version, data) of a SQuAD v1.1 or v2.0 JSON file.

    `version` is "1.1" or "2.0"; `data` is the file's "data" list, which the
    official metric (`minibert.metrics.squad_v1_metrics` / `squad_v2_metrics`)
    scores against. v2.0's "plausible_answers" of unanswerable questions are
    not kept. Answers whose answer_start does not point at their text are kept
    as they are; `misaligned_answers` lists them (none in the official files).
    """
    check_format(path, "squad", ("squad-json", "json"))
    dataset = read_json_object(path)
    data = dataset.get("data")
    if not isinstance(data, list):
        raise MiniBertError(f"{path}: no 'data' list of articles (is this a SQuAD file?)")
    questions, flags_impossible = [], False
    for a, article in enumerate(data):
        paragraphs = json_field(path, article, "paragraphs", list, f"data[{a}]")
        title = str(article.get("title", ""))
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = json_field(path, paragraph, "context", str, where)
            for q, qa in enumerate(json_field(path, paragraph, "qas", list, where)):
                questions.append(_squad_question(path, qa, context, a, title, f"{where}.qas[{q}]"))
                flags_impossible = flags_impossible or "is_impossible" in qa
    version = _squad_version(path, dataset, flags_impossible)
    if version == "1.1" and any(question.is_impossible for question in questions):
        raise MiniBertError(f"{path}: a version 1.1 file with unanswerable (is_impossible) questions")
    return nonempty(path, questions, "no questions in 'data'"), version, data


def misaligned_answers(questions):
    """(question id, answer text) of each answer whose answer_start does not
    index its text in the context. Measured on ../shared/data: none of the
    34,726 answers of SQuAD 1.1 dev, none of the 10,052 of the SQuAD 2.0 half."""
    return [(question.id, text) for question in questions for text, start in question.answers
            if question.context[start:start + len(text)] != text]


def check_answer_alignment(path, questions, refuse_most=False, shown=5):
    """A warning (a string) naming the first `shown` questions whose answer
    text is not at its answer_start in the context, or None when every answer
    is aligned. Such answers would be trained on and scored at the wrong span.
    refuse_most: a file where most answers are misaligned (a training file)
    is refused: its offsets are not character offsets into these contexts."""
    misaligned = misaligned_answers(questions)
    if not misaligned:
        return None
    total = sum(len(question.answers) for question in questions)
    ids = ", ".join(dict.fromkeys(question_id for question_id, _ in misaligned[:shown]))
    if refuse_most and 2 * len(misaligned) > total:
        raise MiniBertError(f"{path}: {len(misaligned):,} of {total:,} answers are not at their answer_start in "
                            f"the context (questions {ids}, ...): the offsets do not index these contexts")
    return (f"{path}: {len(misaligned):,} of {total:,} answers are not at their answer_start in the context "
            f"(questions {ids}{', ...' if len(misaligned) > shown else ''}); they are used as written")


def squad_dataset(questions):
    """The official "data" structure (articles -> paragraphs -> qas) of a list
    of SquadQuestion, in their order: what evaluate-v1.1.py and
    evaluate-v2.0.py read. It holds exactly these questions, so a held-out
    subset of a file is scored on itself alone."""
    articles = {}
    for question in questions:
        article = articles.setdefault(question.article, {"title": question.title, "paragraphs": {}})
        paragraph = article["paragraphs"].setdefault(question.context, {"context": question.context, "qas": []})
        paragraph["qas"].append({"id": question.id, "question": question.question,
                                 "answers": [{"text": text, "answer_start": start} for text, start in question.answers],
                                 "is_impossible": question.is_impossible})
    return [{"title": article["title"], "paragraphs": list(article["paragraphs"].values())}
            for article in articles.values()]


# The null odds file is named after the predictions file (null_odds_file).
NULL_ODDS_SUFFIX = ".null_odds.json"


def null_odds_file(path):
    """Where the null odds of the predictions file `path` go: its name with
    `.null_odds.json` in place of its suffix (pred.json -> pred.null_odds.json)."""
    path = Path(path)
    return path.with_name(path.stem + NULL_ODDS_SUFFIX)


@dataclass
class SquadPredictions:
    """What SquadTask.predict returns.
    answers: {question id: answer text}, "" for "no answer".
    null_odds: {question id: score_diff} for SQuAD 2.0 (None for 1.1): how
    much more the model believes in "no answer" than in its best span.
    span_answers: for SQuAD 2.0, {question id: the best span's text}, the
    answer each question gets at a threshold high enough to answer it. The
    threshold search scores these (what evaluate-v2.0.py expects its
    predictions to be): with answers already blanked at null_threshold, no
    lower threshold could ever find an answer."""
    answers: dict
    null_odds: Optional[dict] = None
    span_answers: Optional[dict] = None

    def __len__(self):
        return len(self.answers)


def write_squad_predictions(questions, predictions, path):
    """The official predictions file {question id: answer} and, for SQuAD
    2.0, {question id: score_diff} (evaluate-v2.0.py's na_prob_file)
    named after it: pred.json -> pred.null_odds.json, so that two prediction
    runs in one folder keep their own. Returns the paths written."""
    path = Path(path)
    write_json(path, {question.id: predictions.answers[question.id] for question in questions})
    if predictions.null_odds is None:
        return [path]
    null_odds_path = null_odds_file(path)
    write_json(null_odds_path, {question.id: predictions.null_odds[question.id] for question in questions})
    return [path, null_odds_path]
