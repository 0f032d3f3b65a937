"""CoNLL-2003 NER (minibert/tasks/ner.py): word pieces <-> words, long
sentences in windows, IOB1 files trained as IOB2, conlleval scores, the
predictions file, and a whole fine-tuning run on a tiny random model."""

import random

import numpy as np
import pytest
import torch

from minibert.commands import finetune as finetune_command
from minibert.support import MiniBertError
from minibert.model import BertConfig, BertModelOutput
from minibert.heads import IGNORE_INDEX
from minibert.tasks.ner import (NerExamples, NerSentence, NerTask, check_known_tags, check_tag_set, first_pieces,
                                iob2_to_iob1, tagging_scheme, window_starts)
from minibert.tokenization import load_tokenizer
from tiny_models import SENTENCES, save_tiny_model, write_vocab

LABELS = ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """The tiny vocabulary: whole words of tests/tiny_models.SENTENCES, and
    single characters for everything else (so "Smith" is s ##m ##i ##t ##h)."""
    folder = tmp_path_factory.mktemp("vocab")
    write_vocab(folder)
    return load_tokenizer(folder)


def sentence(words, tags=None):
    return NerSentence(list(words), None if tags is None else list(tags), list(range(1, len(words) + 1)))


def one_hot_outputs(task, features, tags_per_sentence):
    """Fake model outputs: per token, probability 1 for the tag its word should get."""
    outputs = []
    for feature in features:
        probabilities = np.full((len(feature["input_ids"]), len(task.labels)), 0.01)
        for token, word in enumerate(feature["_word_starting_here"]):
            if word is not None:
                probabilities[token, task.labels.index(tags_per_sentence[feature["example"]][word])] = 1.0
        outputs.append(probabilities)
    return outputs


# ----------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------


def test_only_the_first_piece_of_each_word_is_labelled(tokenizer):
    task = NerTask(labels=LABELS)
    example = sentence(["Mr", "Smith", "saw", "U.S.", "troops"], ["O", "I-PER", "O", "I-LOC", "O"])
    (feature,) = task.features([example], tokenizer, max_seq_len=64)
    tokens = tokenizer.convert_ids_to_tokens(feature["input_ids"])
    assert tokens == ["[CLS]", "m", "##r", "s", "##m", "##i", "##t", "##h", "s", "##a", "##w",
                      "u", ".", "s", ".", "t", "##r", "##o", "##o", "##p", "##s", "[SEP]"]
    # "U.S." is four tokenizer words (punctuation is split off) but one CoNLL
    # word: only its first piece "u" carries the word's tag.
    O, B_LOC, B_PER = (LABELS.index(tag) for tag in ("O", "B-LOC", "B-PER"))
    x = IGNORE_INDEX
    assert feature["labels"] == [x, O, x, B_PER, x, x, x, x, O, x, x, B_LOC, x, x, x, O, x, x, x, x, x, x]
    assert feature["_word_starting_here"] == [None, 0, None, 1, None, None, None, None, 2, None, None,
                                              3, None, None, None, 4, None, None, None, None, None, None]
    assert feature["token_type_ids"] == [0] * len(tokens) and feature["example"] == 0


def test_iob1_tags_are_trained_as_iob2(tokenizer, tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\n"
                    "John NNP B-NP I-PER\nSmith NNP I-NP I-PER\nand CC O O\nMary NNP B-NP I-PER\n"
                    "Jones NNP I-NP I-PER\nsaw VBD O O\nParis NNP B-NP I-LOC\nBerlin NNP B-NP B-LOC\n\n")
    task = NerTask()
    examples = task.read(path)
    # the file has only I- tags (and one B- between two places); IOB2 starts every entity with B-
    assert task.labels == ["O", "B-LOC", "B-PER", "I-PER"]
    assert task.label_to_id == {"O": 0, "B-LOC": 1, "B-PER": 2, "I-PER": 3}
    (feature,) = task.features(examples, tokenizer, max_seq_len=64)
    labelled = [task.labels[label] for label in feature["labels"] if label != IGNORE_INDEX]
    assert labelled == ["B-PER", "I-PER", "O", "B-PER", "I-PER", "O", "B-LOC", "B-LOC"]


def test_labels_are_fixed_once_the_head_is_made(tmp_path, tokenizer):
    path = tmp_path / "more.txt"
    path.write_text("Rome NNP B-NP I-LOC\nfell VBD O O\n\nIBM NNP B-NP I-ORG\n\n")
    task = NerTask()
    with pytest.raises(MiniBertError, match="read the training file"):
        task.make_head(BertConfig(vocab_size=10))
    task.read(path)
    task.make_head(BertConfig(vocab_size=10))
    assert task.labels == ["O", "B-LOC", "B-ORG"]
    path.write_text("Anna NNP B-NP I-PER\n\n")
    examples = task.read(path)   # after make_head: read no longer adds labels ...
    assert task.labels == ["O", "B-LOC", "B-ORG"]
    with pytest.raises(MiniBertError, match="'B-PER' is not one of the model's labels"):
        task.features(examples, tokenizer, 64)   # ... and an unknown tag is an error


def test_window_starts_cut_between_words():
    assert window_starts([0, 0, 1, 1, 1, 2, 3], budget=10) == [0]
    assert window_starts([0, 0, 1, 1, 1, 2, 3], budget=4) == [0, 2, 6]
    # a word longer than a window is itself cut, at the budget
    assert window_starts([0, 1, 1, 1, 1, 1, 2], budget=3) == [0, 1, 4]


def test_long_sentences_are_split_into_windows_and_rejoined(tokenizer):
    task = NerTask(labels=LABELS)
    words = "Mr Smith flew from Paris to New York yesterday with Anna".split()
    tags = ["O", "I-PER", "O", "O", "I-LOC", "O", "I-LOC", "I-LOC", "O", "O", "I-PER"]
    short = sentence(["the", "cat"], ["O", "O"])
    (whole,) = task.features([sentence(words, tags)], tokenizer, max_seq_len=128)
    features = task.features([short, sentence(words, tags)], tokenizer, max_seq_len=8)

    windows = [f for f in features if f["example"] == 1]
    assert len(windows) > 3 and all(len(f["input_ids"]) <= 8 for f in features)
    # no piece is lost or repeated: the windows' pieces are the whole sentence's pieces
    assert sum((f["input_ids"][1:-1] for f in windows), []) == whole["input_ids"][1:-1]
    assert sum((f["labels"][1:-1] for f in windows), []) == whole["labels"][1:-1]
    starting = [word for f in windows for word in f["_word_starting_here"] if word is not None]
    assert starting == list(range(len(words)))   # every word's first piece, once, in order
    # a window starts at a word (its first piece), except inside "yesterday":
    # y ##e ##s ##t ##e ##r ##d ##a ##y is 9 pieces, more than a window's 6
    pieces = tokenizer.convert_ids_to_tokens([f["input_ids"][1] for f in windows])
    assert [p for p in pieces if p.startswith("##")] == ["##d"]

    gold_iob2 = [["O", "O"], ["O", "B-PER", "O", "O", "B-LOC", "O", "B-LOC", "I-LOC", "O", "O", "B-PER"]]
    predictions = task.predict([short, sentence(words)], features, one_hot_outputs(task, features, gold_iob2))
    assert predictions == gold_iob2


def test_a_word_without_pieces_is_tagged_o(tokenizer):
    task = NerTask(labels=LABELS)
    example = sentence(["Anna", "\u200b", "sat"], ["I-PER", "O", "O"])   # a zero-width space: no piece at all
    features = task.features([example], tokenizer, 64)
    assert [w for w in features[0]["_word_starting_here"] if w is not None] == [0, 2]
    outputs = one_hot_outputs(task, features, [["B-PER", "B-PER", "B-PER"]])
    assert task.predict([example], features, outputs) == [["B-PER", "O", "B-PER"]]


# ----------------------------------------------------------------------------
# Head, objective, outputs
# ----------------------------------------------------------------------------


def test_head_loss_and_outputs():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=10, hidden_size=32, num_attention_heads=4, initializer_range=0.02)
    task = NerTask(labels=LABELS)
    head = task.make_head(config).eval()
    assert torch.all(head.classifier.bias == 0) and 0.005 < head.classifier.weight.std() < 0.05
    hidden = torch.randn(2, 4, 32)
    logits = head(BertModelOutput(hidden))
    assert logits.shape == (2, 4, len(LABELS))

    labels = torch.tensor([[IGNORE_INDEX, 2, IGNORE_INDEX, IGNORE_INDEX], [IGNORE_INDEX, 0, 1, IGNORE_INDEX]])
    batch = {"labels": labels, "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])}
    assert task.counts(batch) == {"ner": 3}
    loss, correct = task.losses(logits, batch)["ner"]
    kept = labels != IGNORE_INDEX
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits[kept], labels[kept], reduction="sum"))
    assert int(correct) == int((logits[kept].argmax(-1) == labels[kept]).sum())
    # the paper's loss is the mean over the 3 labelled pieces; losses is its sum, what training.training_step adds up
    assert torch.allclose(task.loss(logits, batch), loss / 3)
    rows, weight = task.distributions(logits, batch)
    assert weight == 1.0 and torch.equal(rows, logits[kept])

    nothing = {"labels": torch.full((2, 4), IGNORE_INDEX), "attention_mask": batch["attention_mask"]}
    loss, correct = task.losses(logits, nothing)["ner"]          # a window of only continuation pieces
    assert float(loss.detach()) == 0.0 and int(correct) == 0 and task.counts(nothing) == {"ner": 0}

    first, second = task.outputs(logits, batch)
    assert first.shape == (3, len(LABELS)) and second.shape == (4, len(LABELS))   # padding trimmed
    assert np.allclose(first.sum(-1), 1.0)


# ----------------------------------------------------------------------------
# Metrics and the predictions file
# ----------------------------------------------------------------------------


def test_metrics_are_conlleval_on_gold_iob1_and_predicted_iob2():
    task = NerTask(labels=LABELS)
    examples = [sentence(["John", "Smith", "in", "Rome"], ["I-PER", "I-PER", "O", "I-LOC"]),
                sentence(["Bonn", "Paris"], ["I-LOC", "B-LOC"])]
    predictions = [["B-PER", "I-PER", "O", "B-ORG"], ["B-LOC", "I-LOC"]]
    # gold entities: PER 0-1, LOC 3-3; LOC 0-0, LOC 1-1. Predicted: PER 0-1 (right), ORG 3-3, LOC 0-1.
    scores = task.metrics(examples, predictions)
    assert set(scores) == {"precision", "recall", "f1", "per_type"}
    assert scores["precision"] == pytest.approx(100 / 3) and scores["recall"] == pytest.approx(25.0)
    assert scores["f1"] == pytest.approx(2 * (100 / 3) * 25 / (100 / 3 + 25))
    assert scores["per_type"]["PER"]["f1"] == 100.0
    assert scores["per_type"]["LOC"]["support"] == 3 and scores["per_type"]["LOC"]["correct"] == 0
    assert scores["per_type"]["ORG"]["predicted"] == 1

    with pytest.raises(MiniBertError, match="no tag column"):
        task.metrics([sentence(["Rome"])], [["B-LOC"]])


CONLL_FILE = """-DOCSTART- -X- -X- O

EU NNP B-NP I-ORG
rejects VBZ B-VP O
German JJ B-NP I-MISC
call NN I-NP O
. . O O

Peter NNP B-NP I-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP I-LOC
1996-08-22 CD I-NP O
"""


def test_predictions_file_is_the_input_plus_one_column(tmp_path, tokenizer):
    source, written = tmp_path / "eval.txt", tmp_path / "predictions.txt"
    source.write_text(CONLL_FILE)
    task = NerTask()
    examples = task.read(source)
    assert isinstance(examples, NerExamples) and len(examples) == 3
    assert task.labels == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    features = task.features(examples, tokenizer, max_seq_len=10)
    gold_iob2 = [["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER"], ["B-LOC", "O"]]
    predictions = task.predict(examples, features, one_hot_outputs(task, features, gold_iob2))
    assert predictions == gold_iob2
    task.write_predictions(examples, predictions, written)

    # written in the file's own scheme, IOB1: the predicted column equals the gold one
    expected = [line if not line else line + " " + line.split()[-1]   # -DOCSTART- gets O
                for line in CONLL_FILE.splitlines()]
    assert written.read_text().splitlines() == expected
    assert task.metrics(examples, predictions)["f1"] == 100.0

    with pytest.raises(MiniBertError, match="examples NerTask.read returned"):
        task.write_predictions(list(examples), predictions, written)



def test_predictions_next_to_iob2_gold_stay_iob2(tmp_path, tokenizer):
    source, written = tmp_path / "eval.txt", tmp_path / "predictions.txt"
    source.write_text("EU B-ORG\nrejects O\nGerman B-MISC\n\nPeter B-PER\nBlackburn I-PER\n")
    task = NerTask()
    examples = task.read(source)
    assert tagging_scheme(examples) == "IOB2"
    task.write_predictions(examples, [["B-ORG", "O", "O"], ["B-PER", "I-PER"]], written)
    assert written.read_text().splitlines() == ["EU B-ORG B-ORG", "rejects O O", "German B-MISC O", "",
                                                "Peter B-PER B-PER", "Blackburn I-PER I-PER"]


def test_iob2_to_iob1_inverts_iob1_to_iob2():
    from minibert.metrics import iob1_to_iob2
    iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "B-ORG"]
    assert iob1_to_iob2(iob1) == ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "B-ORG"]
    assert iob2_to_iob1(iob1_to_iob2(iob1)) == iob1
    assert iob2_to_iob1(["O", "I-PER", "B-LOC"]) == ["O", "I-PER", "I-LOC"]   # an entity opened by I- stays one
    assert tagging_scheme([sentence(["Rome"])]) == "IOB2"                      # no tags: the model's own

# ----------------------------------------------------------------------------
# A whole run
# ----------------------------------------------------------------------------

FIRST_NAMES = ["John", "Mary", "Anna", "Peter"]
SURNAMES = ["Smith", "Jones", "Brown", "Lee"]
CITIES = ["Paris", "London", "Berlin", "Rome"]
THINGS = ["park", "river", "station", "door"]


def tiny_conll(count, seed):
    """`count` sentences with a learnable pattern, as a CoNLL file (IOB1,
    word POS chunk NER): "Mr" + a first name (+ a surname) is a person, a
    city is a place, "the" + a thing is no entity. In IOB1 every entity
    starts with I-, so the model sees B-PER, I-PER, B-LOC only as IOB2."""
    rng = random.Random(seed)
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(count):
        person = [(rng.choice(FIRST_NAMES), "I-PER")] + [(rng.choice(SURNAMES), "I-PER")] * rng.randint(0, 1)
        place = [(rng.choice(CITIES), "I-LOC")] if rng.random() < 0.7 else [("the", "O"), (rng.choice(THINGS), "O")]
        if rng.random() < 0.5:
            words = [("Mr", "O")] + person + [("went", "O"), (rng.choice(["to", "in"]), "O")] + place + [(".", "O")]
        else:
            words = place + [("saw", "O"), ("Mr", "O")] + person + [(".", "O")]
        lines += [f"{word} X X {tag}" for word, tag in words] + [""]
    return "\n".join(lines) + "\n"


def make_task(name, labels=None, settings=None):
    """finetune_command.load_task_model's task factory, for the one task here."""
    assert name == "conll2003"
    return NerTask(labels=labels)


def test_fine_tune_learns_and_the_saved_model_predicts(tmp_path):
    # The vocabulary has the first names, cities and things as whole words;
    # the surnames are spelled in single-character pieces. The layers perturb
    # the embeddings less than save_tiny_model's default (made for probes),
    # so that a few dozen steps of fine-tuning can learn the pattern.
    vocabulary = " ".join(FIRST_NAMES + CITIES + THINGS + ["mr", "went", "saw"]).lower()
    save_tiny_model(tmp_path / "base", sentences=SENTENCES + [vocabulary], layer_scale=0.05)
    (tmp_path / "train.txt").write_text(tiny_conll(48, seed=1))
    (tmp_path / "eval.txt").write_text(tiny_conll(16, seed=2))
    task = NerTask()
    train, evaluation = task.read(tmp_path / "train.txt"), task.read(tmp_path / "eval.txt")
    assert task.labels == ["O", "B-LOC", "B-PER", "I-PER"]

    summary = finetune_command.fine_tune(task, tmp_path / "base", train, evaluation, tmp_path / "out", epochs=10,
                                   batch_size=8, learning_rate=3e-3, max_seq_len=64, warmup=0.0, progress=False)
    losses = [record["ner_loss"] for record in summary["history"] if "ner_loss" in record]
    f1s = [metrics["f1"] for metrics in summary["epochs_history"]]
    assert losses[-1] < 0.3 * losses[0]
    assert f1s[-1] > f1s[0] and summary["best"]["f1"] >= 80.0

    model, loaded, _, record = finetune_command.load_task_model(tmp_path / "out", make_task)
    assert loaded.labels == task.labels and record["max_seq_len"] == 64
    loaded_task, examples, predictions = finetune_command.predict([tmp_path / "out"], tmp_path / "eval.txt", make_task,
                                                            progress=False)
    assert loaded_task.metrics(examples, predictions)["f1"] == pytest.approx(summary["best"]["f1"])
    loaded_task.write_predictions(examples, predictions, tmp_path / "predictions.txt")
    columns = [line.split() for line in (tmp_path / "predictions.txt").read_text().splitlines() if line]
    assert all(len(fields) == 5 for fields in columns)


def test_gold_tags_are_there_only_when_every_sentence_has_them():
    assert NerTask().has_gold([sentence(["Rome"], ["I-LOC"])])
    assert not NerTask().has_gold([sentence(["Rome"], ["I-LOC"]), sentence(["Paris"])])


# ---- coursework exercise: first-piece-labels ----------------------------------------------------


def test_exercise_first_piece_labels_marks_the_first_piece_of_each_word():
    # "Johanson lives in Wellington": Johan ##son | lives | in | Well ##ing ##ton
    assert first_pieces([0, 0, 1, 2, 3, 3, 3]) == [0, None, 1, 2, 3, None, None]
    assert first_pieces([0, 1, 2]) == [0, 1, 2]
    assert first_pieces([]) == []


def test_exercise_first_piece_labels_starts_a_window_in_the_middle_of_a_word():
    # a window cut inside a word: its first piece is still the first of that word seen
    assert first_pieces([4, 4, 5, 5, 6]) == [4, None, 5, None, 6]
    assert first_pieces([2]) == [2]


def test_the_tag_set_must_be_known_and_hold_every_tag():
    with pytest.raises(MiniBertError, match="the tag set is unknown"):
        check_tag_set(None)
    check_tag_set(["O", "B-PER"])
    sentence = NerSentence(["Jim", "Rome"], ["B-PER", "B-LOC"], [7, 8])
    check_known_tags(["B-PER"], ["O", "B-PER"], sentence, 2)
    with pytest.raises(MiniBertError, match=r"line 7 \(sentence 2\): tag 'B-LOC' is not one of the model's labels"):
        check_known_tags(sentence.tags, ["O", "B-PER"], sentence, 2)
