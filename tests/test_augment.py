"""The transfer set of Tang et al. 2019 (minibert/augment.py): masking and
POS replacement at their rates, replacements that keep the tag, n-grams,
pairs augmented consistently, the deduplicated and seeded transfer set, the
lexicon read from a tagged file, and errors that name the argument."""

from pathlib import Path

import numpy as np
import pytest

from minibert.augment import MASK, PosLexicon, augment_pair, augment_words, split_words, transfer_set
from minibert.support.errors import MiniBertError

SHARED_CONLL = Path(__file__).resolve().parents[2] / "shared" / "data" / "conll2003" / "eng.train"

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
    from minibert.augment import _fate
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
    from minibert.augment import _fate
    lexicon = PosLexicon({"cat": {"NN": 1}, "dog": {"NN": 1}})
    rng = np.random.default_rng(0)
    assert _fate("cat", 0.3, lexicon, 0.3, 0.0, rng) == ("cat", False)         # u == p_mask: not masked
    assert _fate("cat", 0.29, lexicon, 0.3, 0.0, rng) == (MASK, True)
