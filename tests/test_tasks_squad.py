"""minibert.tasks.squad: windows, targets, span prediction, the null answer,
the files written, and a tiny end-to-end fine-tuning run.

Hand-made contexts of words "w0 w1 w2 ..." (each word one token of the test
vocabulary) make every window and every token position easy to work out by
hand in the comments.
"""

import json
import math
import random
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from minibert.commands import finetune as finetune_command
from minibert.support import MiniBertError
from minibert.metrics import squad_v1_metrics, squad_v2_metrics
from minibert.model import BertModelOutput
from minibert.tasks.squad import (SQUAD_SETTINGS, SquadPredictions, SquadQuestion, SquadTask, answer_tokens,
                                  squad_dataset, squad_settings, token_spans)
from minibert.tokenization import load_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_models import save_tiny_model, tiny_config, write_vocab  # noqa: E402

WORDS = [f"w{i}" for i in range(40)]
QUESTION = "what did the cat sit on ?"
# Words of the test vocabulary: the question, the numbered words, and every
# character (so that any other word splits into single characters).
VOCAB_SENTENCES = [QUESTION, " ".join(WORDS), "the cat sat on the mat .",
                   "abcdefghijklmnopqrstuvwxyz 0123456789 . , ; : % ( ) - ’ “ ” !"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vocab")
    write_vocab(folder, VOCAB_SENTENCES)
    return load_tokenizer(folder)


def make_question(context, answer=None, question=QUESTION, qid="q", impossible=False, article=0, start=None):
    answers = []
    if answer is not None:
        answers = [(answer, context.index(answer) if start is None else start)]
    return SquadQuestion(qid, question, context, answers, impossible, article, "title")


def numbered_context(n):
    return " ".join(WORDS[:n])


def char_start(word_index):
    """Where word w{i} starts in numbered_context(n)."""
    return len(" ".join(WORDS[:word_index])) + (1 if word_index else 0)


def question_tokens(tokenizer, question=QUESTION):
    return tokenizer.backend.encode(question, add_special_tokens=False).ids


def context_positions(feature):
    return np.flatnonzero(feature["_offsets"][:, 0] >= 0)


def position_of(feature, word_index):
    """The feature position of word w{i}, or None if the window lacks it."""
    found = np.flatnonzero(feature["_offsets"][:, 0] == char_start(word_index))
    return int(found[0]) if len(found) else None


def plain(text):
    """Lower-cased, accents stripped: what the uncased tokenizer sees."""
    return "".join(c for c in unicodedata.normalize("NFD", text.lower()) if not unicodedata.combining(c))


# ----------------------------------------------------------------------------
# Features: windows, offsets, targets
# ----------------------------------------------------------------------------

# Accents (composed, and one "e" + combining acute at the end of a word),
# curly quotes, a dash, a percentage: offsets must index this text exactly.
ACCENTED = ("Zoë’s café (naïve façade) was “co-op”; 3.5% of the Cafe\u0301 sat on the mat. "
            "The cat sat on the mat! Then the cat sat on the big red mat.")


def test_windows_cover_the_context_every_doc_stride_tokens(tokenizer):
    task = SquadTask(doc_stride=5)
    q_ids = question_tokens(tokenizer)
    max_seq_len = len(q_ids) + 3 + 12                        # windows of 12 context tokens
    encoding = tokenizer.backend.encode(ACCENTED, add_special_tokens=False)
    spans = token_spans(ACCENTED, encoding.offsets)
    n = len(encoding.ids)
    assert n > 40                                            # several windows

    features = task.features([make_question(ACCENTED)], tokenizer, max_seq_len)
    # run_squad.py: windows start at 0, 5, 10, ... until one reaches the last token.
    starts = list(range(0, n, 5))
    starts = starts[:next(k for k, s in enumerate(starts) if s + 12 >= n) + 1]
    assert len(features) == len(starts)
    for feature, start in zip(features, starts):
        window = encoding.ids[start:start + 12]
        assert feature["input_ids"] == [tokenizer.cls_id] + q_ids + [tokenizer.sep_id] + window + [tokenizer.sep_id]
        assert feature["token_type_ids"] == [0] * (len(q_ids) + 2) + [1] * (len(window) + 1)
        assert len(feature["input_ids"]) <= max_seq_len
        assert feature["example"] == 0
        positions = context_positions(feature)
        assert positions.tolist() == list(range(len(q_ids) + 2, len(q_ids) + 2 + len(window)))
        assert feature["_offsets"][positions].tolist() == spans[start:start + 12].tolist()
    assert starts[-1] + 12 >= n                              # the last window reaches the end

    # Each token may start an answer in exactly one window: the one where it
    # is most central. Token 7 is in windows 0 (7 left, 4 right: score 4) and
    # 1 (2 left, 9 right: 2) -> window 0; token 9: window 0 scores min(9, 2) = 2,
    # window 1 min(4, 7) = 4 -> window 1.
    owners = {}
    for w, (feature, start) in enumerate(zip(features, starts)):
        for position in np.flatnonzero(feature["_max_context"]):
            token = start + position - (len(q_ids) + 2)
            assert token not in owners
            owners[token] = w
    assert sorted(owners) == list(range(n))
    assert owners[7] == 0 and owners[9] == 1


def test_offsets_map_back_to_the_original_text(tokenizer):
    (feature,) = SquadTask().features([make_question(ACCENTED)], tokenizer, 256)
    encoding = tokenizer.backend.encode(ACCENTED, add_special_tokens=False)
    spans = feature["_offsets"][context_positions(feature)]
    covered = set()
    for token, (start, end) in zip(encoding.tokens, spans.tolist()):
        text = ACCENTED[start:end]
        if token != "[UNK]":
            assert plain(text) == token.removeprefix("##"), (token, text)
        covered.update(range(start, end))
    # Every character except the spaces belongs to a token ...
    assert covered == {i for i, c in enumerate(ACCENTED) if not c.isspace()}
    # ... the combining accent too, although the tokenizer deletes it.
    accent = ACCENTED.index("\u0301")
    assert [ACCENTED[start:end] for start, end in spans.tolist() if end == accent + 1] == ["e\u0301"]
    # The answer is cut from the original text, accents and punctuation included.
    for answer in ["Zoë’s café", "(naïve façade)", "“co-op”;", "3.5%", "Cafe\u0301", "big red mat."]:
        (labelled,) = SquadTask().features([make_question(ACCENTED, answer)], tokenizer, 256)
        first, last = labelled["start_positions"], labelled["end_positions"]
        assert ACCENTED[labelled["_offsets"][first, 0]:labelled["_offsets"][last, 1]] == answer


def test_an_answer_is_labelled_only_in_the_windows_that_hold_it_whole(tokenizer):
    task = SquadTask(doc_stride=4)
    q_len = len(question_tokens(tokenizer))
    context = numbered_context(20)
    # Windows of 8 tokens every 4: w0-w7, w4-w11, w8-w15, w12-w19.
    crossing = task.features([make_question(context, "w10 w11 w12 w13")], tokenizer, q_len + 3 + 8)
    assert len(crossing) == 4
    labels = [(f["start_positions"], f["end_positions"]) for f in crossing]
    # Only w8-w15 holds w10..w13 whole; w4-w11 and w12-w19 cut it: [CLS] (0) there.
    assert labels == [(0, 0), (0, 0), (position_of(crossing[2], 10), position_of(crossing[2], 13)), (0, 0)]
    assert labels[2] == (q_len + 2 + 2, q_len + 2 + 5)

    inside_two = task.features([make_question(context, "w5 w6")], tokenizer, q_len + 3 + 8)
    assert [(f["start_positions"], f["end_positions"]) for f in inside_two] == [
        (q_len + 2 + 5, q_len + 2 + 6), (q_len + 2 + 1, q_len + 2 + 2), (0, 0), (0, 0)]

    impossible = task.features([make_question(context, impossible=True)], tokenizer, q_len + 3 + 8)
    assert all(f["start_positions"] == f["end_positions"] == 0 for f in impossible)


def test_answer_tokens_of_a_partly_covered_token():
    # Tokens "the" (0-3), "cat" (4-7), "sat" (8-11): the answer "at s" starts
    # inside "cat" and ends inside "sat", so it spans tokens 1..2.
    spans = np.array([[0, 3], [4, 7], [8, 11]])
    assert answer_tokens(spans, 5, "at s") == (1, 2)
    assert answer_tokens(spans, 4, "cat") == (1, 1)
    assert answer_tokens(spans, 3, " ") is None              # only whitespace: no token


def test_the_question_is_cut_to_max_query_len(tokenizer):
    long_question = " ".join(["what"] * 30)
    (feature,) = SquadTask(max_query_len=4).features([make_question("the cat", question=long_question)],
                                                      tokenizer, 64)
    assert feature["input_ids"][:6] == [tokenizer.cls_id] + question_tokens(tokenizer, long_question)[:4] + \
        [tokenizer.sep_id]
    with pytest.raises(MiniBertError, match="leaves no room for the context"):
        SquadTask().features([make_question("the cat", question=long_question)], tokenizer, 32)


# ----------------------------------------------------------------------------
# The head, the loss and the per-feature outputs
# ----------------------------------------------------------------------------


def test_head_loss_and_outputs_ignore_padding():
    task = SquadTask()
    head = task.make_head(tiny_config(50))
    assert torch.all(head.span.bias == 0)
    assert head(BertModelOutput(torch.randn(2, 5, 32))).shape == (2, 5, 2)

    logits = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [0.0, 2.0], [9.0, 9.0], [9.0, 9.0]],
                           [[0.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])
    batch = {"attention_mask": torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]),
             "start_positions": torch.tensor([1, 2]), "end_positions": torch.tensor([2, 1])}
    # Row 0: the padding logits (9) must not count. start CE = -log softmax([1, 3, 0])[1],
    # end CE = -log softmax([0, 0, 2])[2]; both argmaxes are right.
    ce = lambda values, i: -(values[i] - math.log(sum(math.exp(v) for v in values)))
    expected = (ce([1, 3, 0], 1) + ce([0, 0, 2], 2)) / 2 + (ce([0, 0, 2, 0, 0], 2) + ce([0, 1, 0, 0, 0], 1)) / 2
    loss, correct = task.losses(logits, batch)["span"]
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert correct.item() == 2
    assert task.counts(batch) == {"span": 2}
    assert task.loss(logits, batch).item() == pytest.approx(expected / 2, rel=1e-5)   # the mean over 2 features
    rows, weight = task.distributions(logits, batch)
    assert weight == 0.5 and rows.shape == (4, 5) and float(rows.softmax(-1)[0, 3:].sum()) == 0.0

    first, second = task.outputs(logits, batch)
    assert first.shape == (2, 3) and second.shape == (2, 5)
    np.testing.assert_allclose(first.sum(-1), [1, 1], rtol=1e-6)
    np.testing.assert_allclose(first[0], np.exp([1, 3, 0]) / np.exp([1, 3, 0]).sum(), rtol=1e-6)


# ----------------------------------------------------------------------------
# Predictions from hand-made probabilities
# ----------------------------------------------------------------------------

FLOOR = 1e-4   # the probability of every token not named


def fake_output(feature, starts=(), ends=(), cls=None):
    """A (2, T) output: `starts`/`ends` are (word index, probability) pairs;
    `cls` the (start, end) probabilities of [CLS]."""
    output = np.full((2, len(feature["input_ids"])), FLOOR, dtype=np.float32)
    for row, pairs in ((0, starts), (1, ends)):
        for word, p in pairs:
            output[row, position_of(feature, word)] = p
    if cls is not None:
        output[:, 0] = cls
    return output


@pytest.fixture
def windows_of_20(tokenizer):
    """Features of one question over w0..w19 in windows of 8 every 4:
    w0-w7, w4-w11, w8-w15, w12-w19."""
    def make(task, **kwargs):
        example = make_question(numbered_context(20), **kwargs)
        return [example], task.features([example], tokenizer, len(question_tokens(tokenizer)) + 3 + 8)
    return make


def test_the_best_span_over_all_windows_wins(windows_of_20):
    task = SquadTask(doc_stride=4)
    examples, features = windows_of_20(task)
    outputs = [fake_output(f) for f in features]
    outputs[0] = fake_output(features[0], starts=[(2, 0.5)], ends=[(3, 0.5)])
    outputs[1] = fake_output(features[1], starts=[(9, 0.9)], ends=[(10, 0.9)])   # w9: max context in w4-w11
    predictions = task.predict(examples, features, outputs)
    assert predictions.answers == {"q": "w9 w10"}
    assert predictions.null_odds is None                      # SQuAD 1.1

    # w9 may start an answer only in w4-w11 (2 tokens to its right there,
    # 1 to its left in w8-w15): a high start on it in w8-w15 is ignored ...
    outputs[0] = fake_output(features[0])
    outputs[1] = fake_output(features[1], starts=[(6, 0.5)], ends=[(7, 0.5)])
    outputs[2] = fake_output(features[2], starts=[(9, 0.99)], ends=[(10, 0.99)])
    assert task.predict(examples, features, outputs).answers == {"q": "w6 w7"}
    # ... while w13 is most central in w8-w15 (min(5, 2) vs w12-w19's min(1, 6)).
    outputs[2] = fake_output(features[2], starts=[(13, 0.99)], ends=[(14, 0.99)])
    assert task.predict(examples, features, outputs).answers == {"q": "w13 w14"}


def test_spans_longer_than_max_answer_len_or_reversed_are_skipped(windows_of_20):
    task = SquadTask(doc_stride=4, max_answer_len=4)
    examples, features = windows_of_20(task)
    outputs = [fake_output(f) for f in features]
    # w1 .. w5 is 5 tokens: too long for 4; the next best end is w3.
    outputs[0] = fake_output(features[0], starts=[(1, 0.9)], ends=[(5, 0.9), (3, 0.05)])
    assert task.predict(examples, features, outputs).answers == {"q": "w1 w2 w3"}
    task.max_answer_len = 5
    assert task.predict(examples, features, outputs).answers == {"q": "w1 w2 w3 w4 w5"}
    # An end before the start is no span: the best end after w5 is w6.
    outputs[0] = fake_output(features[0], starts=[(5, 0.9)], ends=[(3, 0.9), (6, 0.05)])
    assert task.predict(examples, features, outputs).answers == {"q": "w5 w6"}


def test_squad2_null_answer_and_threshold(windows_of_20):
    task = SquadTask(version="2.0", doc_stride=4)
    examples, features = windows_of_20(task)
    # [CLS] scores per window: log(.8 * .8), log(.5 * .5), log(.6 * .6), log(.9 * .9);
    # score_null is the lowest, log .25. The best span: log(.1 * .1).
    cls = [0.8, 0.5, 0.6, 0.9]
    outputs = [fake_output(f, cls=p) for f, p in zip(features, cls)]
    outputs[0] = fake_output(features[0], starts=[(2, 0.1)], ends=[(3, 0.1)], cls=0.8)
    predictions = task.predict(examples, features, outputs)
    score_diff = math.log(0.25) - math.log(0.01)             # = log 25 = 3.22 > 0
    assert predictions.answers == {"q": ""}
    assert predictions.null_odds["q"] == pytest.approx(score_diff, rel=1e-5)
    assert predictions.span_answers == {"q": "w2 w3"}       # what a threshold above log 25 would answer

    task.null_threshold = 3.3                                # above log 25: the span is answered
    assert task.predict(examples, features, outputs).answers == {"q": "w2 w3"}
    task.null_threshold = 3.2
    assert task.predict(examples, features, outputs).answers == {"q": ""}

    # SQuAD 1.1 never answers "".
    v1 = SquadTask(version="1.1", doc_stride=4)
    assert v1.predict(examples, features, outputs) == SquadPredictions({"q": "w2 w3"}, None)

    # A probability that underflowed to 0 still gives a finite score.
    outputs = [fake_output(f, cls=0.0) for f in features]
    assert math.isfinite(task.predict(examples, features, outputs).null_odds["q"])


def test_version_comes_from_the_file_or_the_questions(tmp_path):
    assert SquadTask().version_of([make_question("a b", "a")]) == "1.1"
    assert SquadTask().version_of([make_question("a b", "a"), make_question("a b", impossible=True)]) == "2.0"
    task = SquadTask()
    write_squad(tmp_path / "dev.json", [make_question("a b", "a")], "v2.0")
    task.read(tmp_path / "dev.json")
    assert task.version == "2.0"


# ----------------------------------------------------------------------------
# Metrics, files, settings
# ----------------------------------------------------------------------------


def write_squad(path, questions, version):
    """A SQuAD JSON file holding `questions`, grouped as squad_dataset groups them."""
    path.write_text(json.dumps({"version": version, "data": squad_dataset(questions)}), encoding="utf-8")


SMALL_SET = [make_question("the cat sat on the mat .", "the mat", qid="a", article=0),
             make_question("the dog ran in the park .", "the park", qid="b", article=0),
             make_question("the dog ran in the park .", impossible=True, qid="c", article=1)]


def test_threshold_search_scores_the_spans_that_the_threshold_blanked(tmp_path):
    # At null_threshold 0, "a" and "b" (answerable) are blanked by positive
    # null odds and only "c" is right: exact 1/3. The search sees their best
    # spans: from a threshold of 0.5 "a" is answered (right): exact 2/3, the
    # best; from 1.0 "b" too, which adds its partial f1; "c" stays "" below 3.0.
    path = tmp_path / "dev.json"
    write_squad(path, SMALL_SET, "v2.0")
    task = SquadTask(null_threshold=0.0)
    questions = task.read(path)
    predictions = SquadPredictions({"a": "", "b": "", "c": ""}, {"a": 0.5, "b": 1.0, "c": 3.0},
                                   span_answers={"a": "the mat", "b": "ran in the park", "c": "dog"})
    values = task.metrics(questions, predictions)
    assert values["exact"] == pytest.approx(100 / 3) and values["HasAns_exact"] == 0.0
    assert values["best_exact"] == pytest.approx(200 / 3) and values["best_exact_thresh"] == 0.5
    # b: "ran in the park" vs "the park" -> normalised "ran in park" vs "park": P 1/3, R 1, F1 1/2.
    assert values["best_f1"] == pytest.approx(100 * (1 + 0.5 + 1) / 3) and values["best_f1_thresh"] == 1.0
    # The answers at the threshold itself are scored the same either way.
    assert values["f1"] == task.metrics(questions, SquadPredictions(predictions.answers, predictions.null_odds))["f1"]


def test_metrics_equal_the_official_scores_of_the_file(tmp_path):
    path = tmp_path / "dev.json"
    write_squad(path, SMALL_SET, "v2.0")
    task = SquadTask(null_threshold=-1.0)
    questions = task.read(path)
    data = json.loads(path.read_text())["data"]
    predictions = SquadPredictions({"a": "mat", "b": "", "c": "park"}, {"a": -3.0, "b": 2.0, "c": -0.5})
    values = task.metrics(questions, predictions)
    assert values == squad_v2_metrics(data, predictions.answers, na_probs=predictions.null_odds,
                                      na_prob_thresh=-1.0)
    # "c" has null odds -0.5 > -1.0: scored as "" (right); "a" is right, "b" wrong.
    assert values["exact"] == pytest.approx(200 / 3)
    assert {"best_exact", "best_f1", "best_f1_thresh", "HasAns_f1", "NoAns_f1"} <= set(values)

    write_squad(path, SMALL_SET[:2], "1.1")
    questions = task.read(path)
    answers = SquadPredictions({"a": "mat", "b": "a park"})
    assert task.version == "1.1"
    assert task.metrics(questions, answers) == squad_v1_metrics(json.loads(path.read_text())["data"],
                                                                answers.answers)
    assert task.metrics(questions, answers) == {"exact_match": 100.0, "f1": 100.0}
    # A subset is scored on itself alone.
    assert task.metrics(questions[:1], SquadPredictions({"a": "mat"})) == {"exact_match": 100.0, "f1": 100.0}


def test_write_predictions(tmp_path):
    task = SquadTask(version="2.0")
    predictions = SquadPredictions({"a": "the mat", "b": "", "c": "park"}, {"a": -3.5, "b": 2.0, "c": 0.25})
    assert len(predictions) == 3
    written = task.write_predictions(SMALL_SET, predictions, tmp_path / "predictions.json")
    assert written == [tmp_path / "predictions.json", tmp_path / "predictions.null_odds.json"]
    assert json.loads((tmp_path / "predictions.json").read_text()) == predictions.answers
    assert json.loads((tmp_path / "predictions.null_odds.json").read_text()) == predictions.null_odds
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.json", "predictions.null_odds.json"]
    # a second run in the same folder keeps its own null odds
    task.write_predictions(SMALL_SET, predictions, tmp_path / "other.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "other.null_odds.json",
                                                          "predictions.json", "predictions.null_odds.json"]

    v1 = tmp_path / "v1"
    v1.mkdir()
    SquadTask(version="1.1").write_predictions(SMALL_SET[:2], SquadPredictions({"a": "mat", "b": "park"}),
                                               v1 / "out.json")
    assert json.loads((v1 / "out.json").read_text()) == {"a": "mat", "b": "park"}
    assert [p.name for p in v1.iterdir()] == ["out.json"]


def test_settings_round_trip_and_checks():
    task = SquadTask(version="v2.0", doc_stride=64, max_query_len=32, max_answer_len=20, n_best=10,
                     null_threshold=-1.5)
    record = {"task": "squad", "labels": None, "max_seq_len": 128, **task.settings}
    again = SquadTask(settings=record)
    assert again.settings == task.settings == {"squad_version": "2.0", "doc_stride": 64, "max_query_len": 32,
                                               "max_answer_len": 20, "n_best": 10, "null_threshold": -1.5}
    assert SquadTask(settings={"task": "squad", "max_seq_len": 384}).settings["doc_stride"] == 128
    for bad in ({"doc_stride": 0}, {"n_best": 2.5}, {"null_threshold": "high"}, {"squad_version": "3.0"}):
        with pytest.raises(MiniBertError):
            SquadTask(settings=bad)


# ----------------------------------------------------------------------------
# End to end: fine-tune a tiny model, load it back, predict
# ----------------------------------------------------------------------------

NAMES = ["cat", "dog", "man", "sun", "sky", "bird", "train", "river"]
COLORS = ["red", "blue", "green", "white", "black", "brown"]
FILLER = ("we ate bread and cheese for lunch . she wrote a letter to her friend in paris . "
          "the old man walked to the river slowly .").split()


def colour_questions(n, seed):
    """"what color is the X ?" over a random context holding "the X is COLOR .":
    the answer is always the word after "is", and only there is a colour."""
    rng = random.Random(seed)
    questions = []
    for i in range(n):
        name, colour = rng.choice(NAMES), rng.choice(COLORS)
        words = [rng.choice(FILLER) for _ in range(rng.randint(3, 55))]
        at = rng.randint(0, len(words))
        context = " ".join(words[:at] + ["the", name, "is", colour, "."] + words[at:])
        start = context.index(f"the {name} is {colour}") + len(f"the {name} is ")
        questions.append(SquadQuestion(f"{seed}-{i}", f"what color is the {name} ?", context, [(colour, start)],
                                       False, i // 5, "colours"))
    return questions


def make_task(name, labels=None, settings=None):
    assert name == "squad"
    return SquadTask(settings=settings)


@pytest.fixture
def one_thread():
    """A model this small runs fastest on one thread, and far faster than on
    two that fight over a busy machine's cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_fine_tune_load_and_predict(tmp_path, one_thread):
    save_tiny_model(tmp_path / "base", sentences=[" ".join(FILLER), " ".join(NAMES + COLORS), "what color is ?"])
    train, dev = colour_questions(96, seed=1), colour_questions(40, seed=2)
    task = SquadTask(max_query_len=16)
    # Contexts reach 60 tokens: with max_seq_len 64 some questions need two windows.
    assert len(task.features(train, load_tokenizer(tmp_path / "base"), 64)) > len(train)
    summary = finetune_command.fine_tune(task, tmp_path / "base", train, dev, tmp_path / "out", epochs=10, batch_size=8,
                                   learning_rate=3e-3, max_seq_len=64, progress=False, record_fields=task.settings)
    f1 = [epoch["f1"] for epoch in summary["epochs_history"]]
    # Measured: from 10-20 after the first epoch to 85-100 (over six data and training seeds).
    assert f1[0] < 50 and summary["best"]["f1"] > 80 and summary["best"]["f1"] - f1[0] > 40, f1

    model, loaded, tokenizer, record = finetune_command.load_task_model(tmp_path / "out", make_task)
    assert loaded.settings == task.settings and loaded.max_query_len == 16   # saved by fine_tune(record_fields=...)
    write_squad(tmp_path / "dev.json", dev, "1.1")
    loaded, examples, predictions = finetune_command.predict([tmp_path / "out"], tmp_path / "dev.json", make_task,
                                                       progress=False)
    assert loaded.metrics(examples, predictions) == pytest.approx(summary["best"])
    # An "ensemble" of the model with itself averages equal probabilities.
    _, _, twice = finetune_command.predict([tmp_path / "out"] * 2, tmp_path / "dev.json", make_task, progress=False)
    assert twice.answers == predictions.answers
    loaded.write_predictions(examples, predictions, tmp_path / "predictions.json")
    assert json.loads((tmp_path / "predictions.json").read_text()) == predictions.answers


def test_gold_answers_are_there_when_every_question_has_answers_or_is_unanswerable():
    assert SquadTask().has_gold(SMALL_SET)                                  # answers, or is_impossible
    assert not SquadTask().has_gold(SMALL_SET + [make_question("a file to predict .")])


# ---- coursework exercise: squad-span ------------------------------------------------------------


def _exercise_window(context_from=3, length=7, max_context=None):
    """[CLS] q [SEP] then context tokens from `context_from` (offsets -1 before)."""
    offsets = np.array([[-1, -1]] * context_from + [[2 * i, 2 * i + 1] for i in range(length - context_from)])
    allowed = np.array([i >= context_from for i in range(length)]) if max_context is None else np.array(max_context)
    return {"_offsets": offsets, "_max_context": allowed}


def test_exercise_squad_span_keeps_start_before_end_inside_the_context():
    task = SquadTask(version="1.1", max_answer_len=30, n_best=20)
    log_start = np.array([5.0, 0, 0, 1, 3, 0, 2])
    log_end = np.array([5.0, 0, 0, 4, 0, 1, 0])
    # [CLS] (10) is no span, and start 4 with end 3 (7) ends before it starts
    assert task.best_span(log_start, log_end, _exercise_window()) == (5.0, 3, 3)


def test_exercise_squad_span_respects_max_answer_len():
    log_start = np.array([0.0, 0, 0, 3, 0, 0, 0])
    log_end = np.array([0.0, 0, 0, 0, 0, 0, 4])
    assert SquadTask(version="1.1", max_answer_len=4).best_span(log_start, log_end, _exercise_window()) == (7.0, 3, 6)
    assert SquadTask(version="1.1", max_answer_len=2).best_span(log_start, log_end, _exercise_window()) == (4.0, 5, 6)


def test_exercise_squad_span_pairs_only_the_n_best_starts_and_ends():
    log_start = np.array([0.0, 0, 0, 0, 0, 0, 3])
    log_end = np.array([0.0, 0, 0, 3, 0, 0, 0])
    assert SquadTask(version="1.1", n_best=1).best_span(log_start, log_end, _exercise_window()) is None
    assert SquadTask(version="1.1", n_best=2).best_span(log_start, log_end, _exercise_window()) == (3.0, 3, 3)


def test_exercise_squad_span_starts_only_where_the_window_has_max_context():
    log_start = np.array([0.0, 0, 0, 5, 1, 0])
    log_end = np.array([0.0, 0, 0, 0, 2, 0])
    window = _exercise_window(length=6, max_context=[False, False, False, False, True, True])
    assert SquadTask(version="1.1").best_span(log_start, log_end, window) == (3.0, 4, 4)
    nowhere = _exercise_window(length=6, max_context=[False] * 6)
    assert SquadTask(version="1.1").best_span(log_start, log_end, nowhere) is None


DEFAULTS = dict(zip(SQUAD_SETTINGS, (None, 128, 64, 30, 20, 0)))


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
