"""minibert/distillation.py (Tang et al. 2019) on tiny models and tiny data,
in seconds: THE loss by hand, the student learns a teacher's logits, its
embeddings' starting points, the transfer set: masking and POS replacement
at their rates, replacements that keep the tag, n-grams, pairs augmented
consistently, the deduplicated and seeded transfer set, the lexicon read
from a tagged file, and errors that name the argument."""

import math

import numpy as np
import pytest
import torch

from distill_helpers import one_thread
from helpers import REPO
from minibert import distillation
from minibert.distillation import (MASK, DistillationObjective, PosLexicon, augment_pair, augment_words,
                                   distillation_loss, split_words, student_features, student_logits, transfer_set)
from minibert.finetuning import LengthGroupedBatches
from minibert.heads import IGNORE_INDEX
from minibert.lstm import BiLSTMClassifier
from minibert.distillation import DistillationSettings, WordTokenizer, build_vocabulary, optimizer_factory
from minibert.lstm import StudentConfig
from minibert.support import MiniBertError
from minibert.support.student_files import collate_student, pos_file_path
from minibert.tasks import make_task
from minibert.support.task_files import ClassificationExample
from minibert.commands.trainer import Context, TrainingConfig, train

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


# ----------------------------------------------------------------------------
# THE loss
# ----------------------------------------------------------------------------


def test_the_loss_of_one_example_worked_by_hand():
    # z^(S) = (1, 0), z^(B) = (3, 0), gold class 1, alpha 0.25, K = 2:
    # L_CE = -log(e^0 / (e^1 + e^0)) = log(1 + e) = 1.3132617; L_distill = ((1 - 3)^2 + 0^2) / 2 = 2
    # L = 0.25 * 1.3132617 + 0.75 * 2 = 1.8283154
    L, sums = distillation_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[3.0, 0.0]]), torch.tensor([1]), 0.25)
    assert float(L) == pytest.approx(1.8283154, abs=1e-6)
    assert float(sums["gold"]) == pytest.approx(0.25 * math.log(1 + math.e), rel=1e-6)
    assert float(sums["distill"]) == pytest.approx(0.75 * 2, rel=1e-6)


class FixedLogits(torch.nn.Module):
    """A 'student' whose logits are given: the loss can be checked by hand."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, input_ids, attention_mask, input_ids_b=None, attention_mask_b=None):
        return self.logits


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_the_loss_is_alpha_ce_on_gold_labels_plus_one_minus_alpha_mse_on_logits(alpha):
    student = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    teacher = torch.tensor([[1.0, 0.0], [0.0, 3.0], [-1.0, 1.0]])
    labels = torch.tensor([0, 0, IGNORE_INDEX])                   # the third is an augmented sample: no gold label
    # by hand: CE over the two labelled rows; MSE = mean over rows of the mean over the 2 classes
    ce = (-math.log(math.exp(2) / (math.exp(2) + 1)) - math.log(1 / (1 + math.e))) / 2
    mse = ((1 + 0) / 2 + (0 + 4) / 2 + (0 + 4) / 2) / 3
    expected = alpha * ce + (1 - alpha) * mse
    assert float(distillation_loss(student, teacher, labels, alpha)[0]) == pytest.approx(expected, rel=1e-6)

    # what training.training_step does with the objective: each term's sum over its count, added
    batch = {"input_ids": torch.ones(3, 2, dtype=torch.long), "attention_mask": torch.ones(3, 2),
             "labels": labels, "teacher_logits": teacher}
    objective = DistillationObjective(alpha)
    counts = objective.counts(batch)
    terms = objective.losses(FixedLogits(student), batch)
    combined = sum(loss_sum / max(counts[term], 1) for term, (loss_sum, _) in terms.items())   # as train() does
    assert float(combined) == pytest.approx(expected, rel=1e-6)
    assert set(terms) == {name for name, weight in (("distill", 1 - alpha), ("gold", alpha)) if weight > 0}
    if alpha < 1:
        assert counts["distill"] == 3 and int(terms["distill"][1]) == 2   # rows 0 and 1 agree with the teacher
    if alpha > 0:
        assert counts["gold"] == 2 and int(terms["gold"][1]) == 1         # row 0 right, row 1 wrong


# ----------------------------------------------------------------------------
# The student learns the teacher's logits
# ----------------------------------------------------------------------------


def synthetic_transfer_set(n=200, seed=0):
    """Sentences of random words and a fixed 'teacher': each word adds its own fixed vector to the logits
    (K = 3), so the logits are a learnable function of the words."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(20)]
    word_logits = {w: rng.normal(size=3).astype(np.float32) for w in words}
    texts = [" ".join(rng.choice(words, size=rng.integers(2, 8))) for _ in range(n)]
    logits = np.stack([sum(word_logits[w] for w in t.split()) for t in texts]).astype(np.float32)
    return texts, logits


def mse_to_teacher(model, features):
    model.eval()
    with torch.no_grad():
        batch = collate_student(features, 0)
        return float(torch.nn.functional.mse_loss(student_logits(model, batch), batch["teacher_logits"]))


def test_the_student_learns_to_match_a_fixed_teachers_logits(tmp_path):
    texts, logits = synthetic_transfer_set()
    task = make_task("sst2")          # single sentences, no gold labels: only the teacher's 3 logits count
    examples = [ClassificationExample(t, None, None, None, i + 1) for i, t in enumerate(texts)]
    tokenizer = WordTokenizer(build_vocabulary(texts), max_seq_len=16)
    features = student_features(task, examples, tokenizer, logits)
    torch.manual_seed(0)
    model = BiLSTMClassifier(StudentConfig(tokenizer.vocab_size, 3, embedding_dim=16, hidden_size=16, fc_size=32,
                                           dropout=0.0))
    batches = LengthGroupedBatches(features, batch_size=20, seed=0, pad_id=0, collate=collate_student)
    before = mse_to_teacher(model, features)
    settings = DistillationSettings(optimizer="adadelta", lr=1.0)    # the default optimizer, as distill.py runs it
    config = TrainingConfig(total_steps=15 * len(batches), seed=0, max_grad_norm=0.0, log_every=10**6)
    train(model, batches, DistillationObjective(alpha=0.0), config, Context(torch.device("cpu")),
          tmp_path / "checkpoint.pt", progress=False, optimizer_factory=optimizer_factory(settings))
    after = mse_to_teacher(model, features)
    assert after <= before / 5, (before, after)      # the MSE to the teacher's logits falls at least 5x


def test_training_py_still_defaults_to_adamw_with_warmup_and_decay(tmp_path):
    """The optimizer_factory hook is optional: without it, train builds BERT's AdamW + schedule."""
    model = torch.nn.Linear(2, 2)
    batches = [{"x": torch.ones(4, 2), "attention_mask": torch.ones(4, 1)}] * 4

    class Objective:
        def counts(self, batch):
            return {"loss": 4}

        def losses(self, model, batch):
            return {"loss": (model(batch["x"]).sum(), 0)}
    config = TrainingConfig(total_steps=4, learning_rate=0.1, warmup_steps=2, log_every=1)
    summary = train(model, batches, Objective(), config, Context(torch.device("cpu")), tmp_path / "c.pt",
                    progress=False)
    assert [round(r["lr"], 6) for r in summary["history"]] == [0.1, 0.1, 0.05, 0.0]
    state = torch.load(tmp_path / "c.pt", weights_only=True)
    assert "exp_avg" in next(iter(state["optimizer"]["state"].values()))      # AdamW's state


def test_batches_carry_ids_masks_gold_labels_and_the_teachers_logits():
    task = make_task("mrpc")
    tokenizer = WordTokenizer(build_vocabulary(["a good film", "bad"]), 8)
    examples = [ClassificationExample("a good film", "bad", "1", None, 2),
                ClassificationExample("bad", "", None, None, 3)]
    logits = np.array([[0.5, -1.0], [2.0, 0.0]], dtype=np.float32)
    batch = collate_student(student_features(task, examples, tokenizer, logits), tokenizer.pad_id)
    # the vocabulary: [PAD] [UNK] [MASK] a bad film good (ties alphabetically)
    assert batch["input_ids"].tolist() == [[3, 6, 5], [4, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["input_ids_b"].tolist() == [[4], [1]]                  # an empty second sentence reads as [UNK]
    assert batch["labels"].tolist() == [1, IGNORE_INDEX]                # the augmented sample has no gold label
    assert batch["teacher_logits"].tolist() == logits.tolist()


# ----------------------------------------------------------------------------
# The student's embeddings
# ----------------------------------------------------------------------------


def test_word_vectors_fill_the_student_words_they_have(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("4 3\nThe 1 2 3\nzebra 9 9 9\nfilm 0.5 0 -1\nthe 7 7 7\n", encoding="utf-8")
    tokenizer = WordTokenizer(["[PAD]", "[UNK]", "[MASK]", "the", "film", "good"], max_seq_len=8)
    settings = DistillationSettings(embeddings=str(path), hidden_size=4).resolved(make_task("sst2"), True)
    model, report = distillation.build_student(make_task("sst2"), tokenizer, settings)
    assert model.config.embedding_dim == 3 and "vectors for 2 of 3 words" in report
    assert model.embedding.weight[4].tolist() == [0.5, 0.0, -1.0]
    assert model.embedding.weight[5].abs().max() <= 0.25             # no vector: random U(-0.25, 0.25)


# ----------------------------------------------------------------------------
# The transfer set
# ----------------------------------------------------------------------------

SHARED_SST2 = REPO.parent / "shared" / "data" / "sst2" / "train.tsv"
SHARED_CONLL = REPO.parent / "shared" / "data" / "conll2003" / "eng.train"

# Three tags with 20 words each, every word seen 5 times: a replacement draws
# the word it replaces with probability 1/20.
TAGS = {"NN": [f"noun{i}" for i in range(20)], "VB": [f"verb{i}" for i in range(20)],
        "JJ": [f"adj{i}" for i in range(20)]}


def write_lexicon(path, extra_lines=()):
    lines = ["-DOCSTART- -X- -X- O", ""]
    for tag, words in TAGS.items():
        for word in words:
            lines += [f"{word.upper()} {tag} I-NP O"] * 5  # upper case: the lexicon lower-cases
        lines.append("")
    lines += extra_lines
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def lexicon(tmp_path_factory):
    return PosLexicon.from_file(write_lexicon(tmp_path_factory.mktemp("lexicon") / "tagged.txt"))


def long_sentence():
    """60 known words (every tag, every third word) and 10 unknown ones."""
    words = [TAGS[tag][i % 20] for i in range(20) for tag in TAGS]
    return words + [f"unknown{i}" for i in range(10)]


# ----------------------------------------------------------------------------
# The lexicon
# ----------------------------------------------------------------------------


def test_split_words_lower_cases_and_splits_off_punctuation():
    assert split_words("Don't STOP, 2 cats!") == ["don", "'", "t", "stop", ",", "2", "cats", "!"]


def test_lexicon_gives_each_word_its_most_frequent_tag(tmp_path):
    path = tmp_path / "tags.txt"
    path.write_text("run VB\nRun NN\nrun VB\nU.S. NNP\n\nthe DT\n", encoding="utf-8")
    lexicon = PosLexicon.from_file(path)
    assert lexicon.tag_of("run") == "VB"  # 2 x VB (lower-cased "Run" counts) against 1 x NN
    assert lexicon.tag_of("the") == "DT"
    assert lexicon.tag_of("u.s.") is None  # not one word for split_words: never in a sentence
    assert lexicon.tag_of("cat") is None
    assert len(lexicon) == 2


def test_unigram_sampling_follows_the_counts(tmp_path):
    path = tmp_path / "tags.txt"
    path.write_text("often NN\n" * 9 + "rarely NN\n", encoding="utf-8")
    lexicon = PosLexicon.from_file(path)
    rng = np.random.default_rng(0)
    draws = [lexicon.sample("NN", rng) for _ in range(4000)]
    assert set(draws) == {"often", "rarely"}
    assert draws.count("often") / len(draws) == pytest.approx(0.9, abs=0.02)


@pytest.mark.shared_data
@pytest.mark.skipif(not SHARED_CONLL.is_file(), reason="needs ../shared/data/conll2003/eng.train, absent here")
def test_conll_pos_column_gives_a_sane_lexicon():
    lexicon = PosLexicon.from_file(SHARED_CONLL)
    assert lexicon.tag_of("the") == "DT"
    assert lexicon.tag_of("said") == "VBD"
    assert lexicon.tag_of(",") == ","
    assert 10_000 < len(lexicon) < 30_000  # eng.train has about 21,000 distinct lower-cased words


# ----------------------------------------------------------------------------
# One sample
# ----------------------------------------------------------------------------


def test_masking_and_pos_replacement_happen_at_their_rates(lexicon):
    rng = np.random.default_rng(1)
    words = long_sentence()[:60]  # known words only: each can be replaced
    masked = replaced = total = 0
    for _ in range(1500):
        sample = augment_words(words, lexicon, rng, p_mask=0.1, p_pos=0.1, p_ng=0)
        assert len(sample) == len(words)
        masked += sum(new == MASK for new in sample)
        replaced += sum(new not in (MASK, old) for old, new in zip(words, sample))
        total += len(words)
    # 90,000 draws: the standard error of each fraction is about 0.001
    assert masked / total == pytest.approx(0.1, abs=0.006)
    assert replaced / total == pytest.approx(0.1 * 19 / 20, abs=0.006)  # 1 in 20 draws is the word itself


def test_pos_replacements_keep_the_tag_and_unknown_words_are_only_masked(lexicon):
    rng = np.random.default_rng(2)
    words = long_sentence()
    for _ in range(300):
        sample = augment_words(words, lexicon, rng, p_mask=0.2, p_pos=0.6, p_ng=0)
        for old, new in zip(words, sample):
            if new != MASK:
                assert lexicon.tag_of(new) == lexicon.tag_of(old)
                if lexicon.tag_of(old) is None:
                    assert new == old


def test_ngram_samples_are_contiguous_windows_of_1_to_5_words(lexicon):
    rng = np.random.default_rng(3)
    words = long_sentence()[:12]
    lengths = set()
    for _ in range(300):
        sample = augment_words(words, lexicon, rng, p_mask=0, p_pos=0, p_ng=1)
        assert 1 <= len(sample) <= 5
        assert any(words[start:start + len(sample)] == sample for start in range(len(words)))
        lengths.add(len(sample))
    assert lengths == {1, 2, 3, 4, 5}
    # capped by the sentence length
    short = [augment_words(words[:2], lexicon, rng, p_mask=0, p_pos=0, p_ng=1) for _ in range(50)]
    assert {len(s) for s in short} == {1, 2}


def test_pair_words_shared_by_both_sentences_get_the_same_fate(lexicon):
    rng = np.random.default_rng(4)
    words_a = ["noun1", "verb2", "adj3", "noun4", "unknown"]
    words_b = ["adj3", "noun9", "noun1", "unknown", "verb5"]
    changed = 0
    for _ in range(300):
        sample_a, sample_b = augment_pair(words_a, words_b, lexicon, rng, p_mask=0.3, p_pos=0.3, p_ng=0)
        fate_a = dict(zip(words_a, sample_a))
        fate_b = dict(zip(words_b, sample_b))
        for word in set(words_a) & set(words_b):
            assert fate_a[word] == fate_b[word]
            changed += fate_a[word] != word
    assert changed > 300  # shared words were masked or replaced often, not just kept


def test_independent_pairs_perturb_each_sentence_as_a_single_sentence_with_the_same_draws(lexicon):
    words_a, words_b = ["noun1", "verb2", "adj3", "noun4"], ["adj3", "noun9", "noun1"]
    pair = augment_pair(words_a, words_b, lexicon, np.random.default_rng(3), p_mask=0.3, p_pos=0.3, p_ng=0.5,
                        scheme="independent")
    rng = np.random.default_rng(3)                   # the first sentence's draws, then the second's
    alone = (augment_words(words_a, lexicon, rng, p_mask=0.3, p_pos=0.3, p_ng=0.5),
             augment_words(words_b, lexicon, rng, p_mask=0.3, p_pos=0.3, p_ng=0.5))
    assert pair == alone
    shared_fates_differ = 0
    for seed in range(200):                          # a shared word no longer has one fate across the pair
        a, b = augment_pair(["noun1"], ["noun1"], lexicon, np.random.default_rng(seed), p_mask=0.5, p_pos=0,
                            p_ng=0, scheme="independent")
        shared_fates_differ += a != b
    assert 70 < shared_fates_differ < 130            # P(one masked, not the other) = 2 * 0.5 * 0.5
    with pytest.raises(MiniBertError, match="pair scheme 'both': expected consistent or independent"):
        augment_pair(words_a, words_b, lexicon, rng, scheme="both")


# ----------------------------------------------------------------------------
# The transfer set
# ----------------------------------------------------------------------------

SENTENCES = ["Noun1 verb2 adj3 noun4 verb5 adj6 noun7 verb8.", "Adj1 noun2!", "noun3 verb3 unknown words here",
             "verb9"]
SECOND = ["noun1 verb7 adj3", "adj1 adj2 noun2", "noun3", "verb9 verb9"]


def test_transfer_set_is_deduplicated_and_points_back_to_its_sources(lexicon):
    samples = transfer_set(SENTENCES, lexicon=lexicon, n_iter=20, seed=5, p_mask=0.2, p_pos=0.2, p_ng=0.25)
    originals = {" ".join(split_words(text)) for text in SENTENCES}
    texts = [a for a, _, _ in samples]
    assert len(texts) == len(set(texts))
    assert not originals & set(texts)
    for index in range(3):
        assert 1 <= sum(source == index for _, _, source in samples) <= 20
    for text_a, text_b, source in samples:
        assert text_b is None
        words = text_a.split(" ")
        original = split_words(SENTENCES[source])
        assert len(words) <= len(original)
        assert all(word == MASK or lexicon.tag_of(word) is not None or word in original for word in words)
    # "verb9" alone: each sample masks or replaces its only word, or keeps it and equals the original
    assert not [a for a, _, source in samples if source == 3]


def test_transfer_set_is_deterministic_for_a_seed_and_changes_with_it(lexicon):
    first = transfer_set(SENTENCES, lexicon=lexicon, n_iter=10, seed=6)
    assert transfer_set(SENTENCES, lexicon=lexicon, n_iter=10, seed=6) == first
    assert transfer_set(SENTENCES, lexicon=lexicon, n_iter=10, seed=7) != first
    # an example's samples do not depend on the other examples
    alone = transfer_set(SENTENCES[:1], lexicon=lexicon, n_iter=10, seed=6)
    assert alone == [sample for sample in first if sample[2] == 0]


def test_transfer_set_of_pairs_keeps_both_sentences(lexicon):
    samples = transfer_set(SENTENCES, SECOND, lexicon=lexicon, n_iter=10, seed=8, p_mask=0.2, p_pos=0.2)
    assert samples
    originals = {(" ".join(split_words(a)), " ".join(split_words(b))) for a, b in zip(SENTENCES, SECOND)}
    pairs = [(a, b) for a, b, _ in samples]
    assert len(pairs) == len(set(pairs))
    assert not originals & set(pairs)
    for index in range(len(SENTENCES)):
        assert sum(source == index for _, _, source in samples) <= 10
    for text_a, text_b, source in samples:
        assert isinstance(text_b, str) and text_b
        assert len(text_b.split(" ")) <= len(split_words(SECOND[source]))


def test_transfer_set_without_a_lexicon_only_masks(lexicon):
    samples = transfer_set(SENTENCES[:1], n_iter=20, seed=9, p_mask=0.3, p_pos=0.3, p_ng=0)
    original = split_words(SENTENCES[0])
    for text_a, _, _ in samples:
        assert all(new in (old, MASK) for old, new in zip(original, text_a.split(" ")))


# ----------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("arguments, message", [
    (dict(p_mask=1.5), r"p_mask = 1\.5: expected a probability in \[0, 1\]"),
    (dict(p_pos=-0.1), r"p_pos = -0\.1"),
    (dict(p_ng=2), r"p_ng = 2"),
    (dict(p_mask=0.6, p_pos=0.5), r"p_mask \+ p_pos = 0\.6 \+ 0\.5 > 1"),
    (dict(max_n=0), r"max_n = 0: expected an integer >= 1"),
    (dict(n_iter=0), r"n_iter = 0: expected an integer >= 1"),
])
def test_bad_arguments_are_named(lexicon, arguments, message):
    with pytest.raises(MiniBertError, match=message):
        transfer_set(SENTENCES, lexicon=lexicon, **arguments)
    if "n_iter" not in arguments:
        with pytest.raises(MiniBertError, match=message):
            augment_words(["noun1"], lexicon, np.random.default_rng(0), **arguments)
        with pytest.raises(MiniBertError, match=message):
            augment_pair(["noun1"], ["verb1"], lexicon, np.random.default_rng(0), **arguments)


def test_pairs_of_unequal_length_are_an_error(lexicon):
    with pytest.raises(MiniBertError, match="texts_b: 1 second sentences for 4 first sentences"):
        transfer_set(SENTENCES, SECOND[:1], lexicon=lexicon)


# ---- coursework exercise: augment-mask-pos ------------------------------------------------------


def test_exercise_augment_mask_pos_masks_replaces_or_keeps_one_word():
    from minibert.distillation import _fate
    lexicon = PosLexicon({"cat": {"NN": 3}, "dog": {"NN": 1}, "runs": {"VBZ": 2}})
    rng = np.random.default_rng(0)
    assert _fate("cat", 0.05, lexicon, 0.1, 0.1, rng) == (MASK, True)          # u < p_mask
    assert _fate("zebra", 0.05, lexicon, 0.1, 0.1, rng) == (MASK, True)        # masking needs no tag
    assert _fate("cat", 0.5, lexicon, 0.1, 0.1, rng) == ("cat", False)         # u >= p_mask + p_pos: kept
    assert _fate("zebra", 0.15, lexicon, 0.1, 0.1, rng) == ("zebra", False)    # no tag: kept
    assert _fate("runs", 0.1, lexicon, 0.1, 0.1, rng) == ("runs", True)        # the only VBZ word
    # replaced by a word of the same tag, drawn from the lexicon with the same generator
    draws = [_fate("dog", 0.15, lexicon, 0.1, 0.1, np.random.default_rng(seed)) for seed in range(40)]
    expected = [lexicon.sample("NN", np.random.default_rng(seed)) for seed in range(40)]
    assert draws == [(word, True) for word in expected]
    assert {word for word, _ in draws} == {"cat", "dog"}


def test_exercise_augment_mask_pos_with_no_replacement_probability():
    from minibert.distillation import _fate
    lexicon = PosLexicon({"cat": {"NN": 1}, "dog": {"NN": 1}})
    rng = np.random.default_rng(0)
    assert _fate("cat", 0.3, lexicon, 0.3, 0.0, rng) == ("cat", False)         # u == p_mask: not masked
    assert _fate("cat", 0.29, lexicon, 0.3, 0.0, rng) == (MASK, True)


@pytest.mark.shared_data
@pytest.mark.skipif(not SHARED_CONLL.is_file() or not SHARED_SST2.is_file(),
                    reason="needs ../shared/data/conll2003/eng.train and sst2/train.tsv, absent here")
def test_real_sst2_sentences_are_augmented_with_the_default_conll_lexicon():
    task = make_task("sst2")
    examples = task.read(SHARED_SST2)[:100]
    settings = DistillationSettings(n_iter=3).resolved(task, True)
    transfer = distillation.make_transfer_set(examples, PosLexicon.from_file(pos_file_path(str(SHARED_CONLL))), settings)
    augmented = transfer[100:]
    assert transfer[:100] == examples and 150 < len(augmented) <= 300 and all(e.label is None for e in augmented)
    assert any("[MASK]" in e.text_a for e in augmented)
    tokenizer = WordTokenizer(build_vocabulary([e.text_a for e in transfer]), 128)
    masked = next(e.text_a for e in augmented if "[MASK]" in e.text_a)
    assert tokenizer.mask_id in tokenizer.encode_many([masked])[0]        # "[MASK]" is one word, id 2


# ---- coursework exercise: distillation-loss -----------------------------------------------------


def test_exercise_distillation_loss_mixes_cross_entropy_and_logit_distance():
    z_student = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    z_teacher = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    labels = torch.tensor([0, IGNORE_INDEX])             # the second is an augmented sample: no gold label
    loss, sums = distillation_loss(z_student, z_teacher, labels, alpha=0.5)
    # L_distill per example: (1/K) ||z_t - z_s||^2 = 0.5 and 1.0; L_CE on the first only: log(1 + e^-1)
    assert sums["distill"].item() == pytest.approx(0.5 * 1.5)
    assert sums["gold"].item() == pytest.approx(0.5 * math.log(1 + math.exp(-1)))
    assert loss.item() == pytest.approx(0.5 * 1.5 / 2 + 0.5 * math.log(1 + math.exp(-1)) / 1)


def test_exercise_distillation_loss_leaves_out_a_term_of_weight_zero():
    z_student = torch.tensor([[2.0, 0.0, -1.0]])
    z_teacher = torch.tensor([[1.0, 1.0, 1.0]])
    loss, sums = distillation_loss(z_student, z_teacher, torch.tensor([2]), alpha=0.0)
    assert set(sums) == {"distill"} and loss.item() == pytest.approx((1 + 1 + 4) / 3)
    loss, sums = distillation_loss(z_student, z_teacher, torch.tensor([2]), alpha=1.0)
    log_z = math.log(math.exp(2) + 1 + math.exp(-1))
    assert set(sums) == {"gold"} and loss.item() == pytest.approx(log_z + 1, rel=1e-6)


def test_the_papers_squared_l2_term_is_k_times_the_mse_term():
    z_student = torch.tensor([[2.0, 0.0, -1.0]])
    z_teacher = torch.tensor([[1.0, 1.0, 1.0]])
    labels = torch.tensor([IGNORE_INDEX])
    loss, _ = distillation_loss(z_student, z_teacher, labels, alpha=0.0, distill_term="squared-l2")
    assert loss.item() == pytest.approx(1 + 1 + 4)                    # ||z_t - z_s||^2, no 1/K
    loss, _ = distillation_loss(z_student, z_teacher, labels, alpha=0.0)
    assert loss.item() == pytest.approx((1 + 1 + 4) / 3)              # the default: torch's MSE


def test_unlabelled_target_teacher_gives_augmented_samples_the_teachers_argmax_as_label():
    z_student = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    z_teacher = torch.tensor([[0.0, 0.0], [3.0, 1.0]])                 # the teacher says class 0 for the second
    labels = torch.tensor([0, IGNORE_INDEX])
    loss, sums = distillation_loss(z_student, z_teacher, labels, alpha=0.5, unlabelled="teacher")
    ce_first, ce_second = math.log(1 + math.exp(-1)), math.log(1 + math.exp(2))   # -log softmax(z_s)[0] each
    assert sums["gold"].item() == pytest.approx(0.5 * (ce_first + ce_second))
    distill = 0.5 * ((1 + 0) / 2 + (9 + 1) / 2)                        # (1 - alpha) (1/K) ||z_t - z_s||^2, summed
    assert loss.item() == pytest.approx(distill / 2 + 0.5 * (ce_first + ce_second) / 2)   # CE now over both rows
    objective = DistillationObjective(0.5, unlabelled="teacher")
    assert objective.counts({"labels": labels, "teacher_logits": z_teacher}) == {"distill": 2, "gold": 2}
    assert DistillationObjective(0.5).counts({"labels": labels, "teacher_logits": z_teacher}) == {"distill": 2,
                                                                                                  "gold": 1}
