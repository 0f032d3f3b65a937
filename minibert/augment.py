"""The transfer set: new sentences made from the training set, for distillation.

A student learns more from its teacher when it sees more inputs than the
labelled training set. Tang et al. 2019 perturb the training sentences
([Tang] section 3): for each sentence, `n_iter` samples (20 for single
sentences, 10 for pairs); in each sample, for each word draw u ~ U(0, 1):

    u < p_mask                 the word becomes [MASK]           (p_mask = 0.1)
    u < p_mask + p_pos         a word with the same part-of-speech tag,
                               drawn by unigram frequency        (p_pos = 0.1)
    otherwise                  the word is kept

then, with probability p_ng (0.25), only one random n-gram of the sample is
kept: n uniform in 1..max_n (max_n = 5), capped by the sentence length, a
contiguous window. Masking asks the teacher what a sentence means with a word
missing; POS replacement gives grammatical new sentences; n-grams, short phrases.

A sample is dropped when it equals an original sentence or an earlier sample
(it would add nothing), and, as in the authors' code (castorini/d-bert,
augment_data.py), when every word was masked or replaced (nothing of the
original is left to anchor it). Pairs are "augmented consistently" by
default, or each sentence on its own as the authors' code does (`augment_pair`).

The tags come from a `PosLexicon` learned from any tagged corpus ("word TAG"
lines, e.g. CoNLL-2003's POS column): each word gets its most frequent tag
(the authors tagged with NLTK; a lexicon needs no tagger, at the price that a
word always has the same tag). Words it does not know are only masked.

Texts are lower-cased and split into words and punctuation marks (`split_words`);
samples are words joined by single spaces. Example i draws from its own numpy Generator,
seeded with seed_from(seed, "augment", i), whatever the other examples
([Tang] arXiv:1903.12136, section 3).
"""

import re
from collections import defaultdict

import numpy as np
from tqdm.auto import tqdm

from minibert.support.errors import MiniBertError
from minibert.support.runtime import seed_from
from minibert.support.student_files import check_augmentation, tagged_word_counts

MASK = "[MASK]"

# ---- Words --------------------------------------------------------------------------------------

WORD = re.compile(r"\w+|[^\w\s]")      # a run of letters and digits, or one punctuation mark


def split_words(text):
    """Lower-cased words and punctuation marks: "Don't!" -> don ' t !

    The unit that augmentation masks or replaces and that the student's word
    vocabulary counts (distillation.words_of). The authors' code splits with
    NLTK; a regular expression is minibert's simpler choice, with no tagger's
    tokenizer to install. Lower-cased so that "The" and "the" are one word
    with one vector."""
    return WORD.findall(text.lower())


# ---- One sample ---------------------------------------------------------------------------------


def _fate(word, u, lexicon, p_mask, p_pos, rng):
    """(new word, whether it was masked or replaced) for a draw u ~ U(0, 1)."""
    # exercise: augment-mask-pos
    if u < p_mask:
        return MASK, True
    tag = lexicon.tag_of(word)
    if u < p_mask + p_pos and tag is not None:
        # may draw the word itself; the authors' code counts it as replaced too
        return lexicon.sample(tag, rng), True
    return word, False
    # end exercise


def _ngram(words, rng, max_n):
    """One random contiguous window of n words, n uniform in 1..max_n, capped
    by the length (so a 3-word sentence gives n in 1..3, not 3 most of the time)."""
    if not words:
        return words
    n = int(rng.integers(1, min(max_n, len(words)) + 1))
    start = int(rng.integers(0, len(words) - n + 1))
    return words[start:start + n]


def _augment(words, lexicon, rng, p_mask, p_pos, p_ng, max_n):
    """(sample, whether any word was kept) for one sentence."""
    draws = rng.random(len(words))
    fates = [_fate(word, u, lexicon, p_mask, p_pos, rng) for word, u in zip(words, draws)]
    sample = [new for new, _ in fates]
    kept_any = not all(changed for _, changed in fates)
    if rng.random() < p_ng:
        sample = _ngram(sample, rng, max_n)
    return sample, kept_any


def _augment_pair(words_a, words_b, lexicon, rng, p_mask, p_pos, p_ng, max_n, scheme="consistent"):
    """((sample_a, sample_b), whether any word of the pair was kept) for one pair."""
    if scheme == "independent":      # the authors' augment_paired_data.py: each sentence as a single one
        (sample_a, kept_a), (sample_b, kept_b) = (_augment(words, lexicon, rng, p_mask, p_pos, p_ng, max_n)
                                                  for words in (words_a, words_b))
        return (sample_a, sample_b), kept_a or kept_b
    types = list(dict.fromkeys(words_a + words_b))  # distinct words, in order of first appearance
    draws = rng.random(len(types))
    fates = {word: _fate(word, u, lexicon, p_mask, p_pos, rng) for word, u in zip(types, draws)}
    kept_any = not all(changed for _, changed in fates.values())
    samples = []
    for words in (words_a, words_b):
        sample = [fates[word][0] for word in words]
        if rng.random() < p_ng:  # each sentence its own n-gram, as the paper's per-sentence rule
            sample = _ngram(sample, rng, max_n)
        samples.append(sample)
    return tuple(samples), kept_any


def augment_words(words, lexicon, rng, p_mask=0.1, p_pos=0.1, p_ng=0.25, max_n=5):
    """One perturbed copy of a sentence's words ([Tang] section 3): each word
    masked with probability p_mask, replaced by a word of its POS tag with
    probability p_pos (unknown words: kept), then with probability p_ng only a
    random n-gram (n in 1..max_n) is kept. `rng` is a numpy.random.Generator."""
    check_augmentation(p_mask, p_pos, p_ng, max_n)
    return _augment(list(words), _EMPTY_LEXICON if lexicon is None else lexicon, rng, p_mask, p_pos, p_ng, max_n)[0]


def augment_pair(words_a, words_b, lexicon, rng, p_mask=0.1, p_pos=0.1, p_ng=0.25, max_n=5, scheme="consistent"):
    """One perturbed copy of a sentence pair, augmented consistently (or, with
    scheme="independent", each sentence on its own as by `augment_words`, the
    first sentence's draws first: the authors' augment_paired_data.py).

    Our reading of [Tang] section 3 for pairs (the paper gives no detail): each
    distinct word gets one fate per sample (kept, masked, or replaced by one
    drawn word) wherever it occurs in either sentence, so a word shared by
    premise and hypothesis stays shared and the pair keeps the alignment its
    label depends on. The n-gram step is applied to each sentence on its own."""
    check_augmentation(p_mask, p_pos, p_ng, max_n, scheme)
    return _augment_pair(list(words_a), list(words_b), _EMPTY_LEXICON if lexicon is None else lexicon, rng,
                         p_mask, p_pos, p_ng, max_n, scheme)[0]


# ---- The transfer set ---------------------------------------------------------------------------


def transfer_set(texts_a, texts_b=None, lexicon=None, n_iter=20, seed=0, p_mask=0.1, p_pos=0.1, p_ng=0.25,
                 max_n=5, progress=False, pair_scheme="consistent"):
    """The augmented samples of every example: a list of (text_a, text_b or
    None, source_index), words joined by single spaces.

    Up to `n_iter` samples per example ([Tang]: 20 for single sentences, 10
    for pairs), the originals not included (the caller adds them); a sample
    equal to any original (after `split_words`), to an earlier sample, or
    with every word masked or replaced is dropped (only this filter looks
    across examples, as the authors' did). Without a lexicon, words are only
    masked (and n-grams taken); pairs are perturbed by `pair_scheme`."""
    check_augmentation(p_mask, p_pos, p_ng, max_n, pair_scheme, n_iter)
    texts_a = list(texts_a)
    if texts_b is not None:
        texts_b = list(texts_b)
        if len(texts_b) != len(texts_a):
            raise MiniBertError(f"texts_b: {len(texts_b)} second sentences for {len(texts_a)} first sentences")
    lexicon = _EMPTY_LEXICON if lexicon is None else lexicon

    words_a = [split_words(text) for text in texts_a]
    words_b = None if texts_b is None else [split_words(text) for text in texts_b]
    seen = {_key(words_a[i], None if words_b is None else words_b[i]) for i in range(len(texts_a))}

    samples = []
    for i in tqdm(range(len(texts_a)), desc="augmenting", unit="example", disable=not progress):
        rng = np.random.default_rng(seed_from(seed, "augment", i))
        for _ in range(n_iter):
            if words_b is None:
                sample_a, kept_any = _augment(words_a[i], lexicon, rng, p_mask, p_pos, p_ng, max_n)
                sample_b = None
            else:
                (sample_a, sample_b), kept_any = _augment_pair(words_a[i], words_b[i], lexicon, rng,
                                                               p_mask, p_pos, p_ng, max_n, pair_scheme)
            key = _key(sample_a, sample_b)
            if kept_any and key not in seen:
                seen.add(key)
                samples.append((key[0], key[1], i))
    return samples


def _key(words_a, words_b):
    """(text_a, text_b or None): what two samples must share to be duplicates."""
    return " ".join(words_a), None if words_b is None else " ".join(words_b)


# ---- The part-of-speech lexicon -----------------------------------------------------------------


class PosLexicon:
    """word -> its most frequent tag; tag -> the words whose tag it is, with
    their counts, to draw replacements by unigram frequency ([Tang] section 3).

    `counts` maps word -> {tag: count}. A word is sampled for its most frequent
    tag only, with weight its total count, so a replacement always has the tag
    of the word it replaces: tag_of(sample(tag_of(w))) == tag_of(w).
    """

    def __init__(self, counts):
        self._tag = {}
        total = {}
        for word, tag_counts in counts.items():
            # max keeps the first-seen tag on a tie: deterministic for a file
            self._tag[word] = max(tag_counts, key=tag_counts.get)
            total[word] = sum(tag_counts.values())
        words_by_tag = defaultdict(list)
        for word, tag in self._tag.items():
            words_by_tag[tag].append(word)
        # Per tag: its words and their cumulative counts. A draw r ~ U(0, total)
        # falls in word i's interval [cum[i-1], cum[i]) with probability count_i / total.
        self._words = {tag: words for tag, words in words_by_tag.items()}
        self._cumulative = {tag: np.cumsum([total[w] for w in words]) for tag, words in words_by_tag.items()}

    @classmethod
    def from_file(cls, path):
        """The lexicon of one tagged file (support/student_files.tagged_word_counts), its words
        those that split_words keeps whole."""
        return cls(tagged_word_counts([path], split_words))

    def tag_of(self, word):
        """The word's most frequent tag, or None for a word the lexicon does not know."""
        return self._tag.get(word)

    def sample(self, tag, rng):
        """A word whose tag is `tag`, drawn with probability proportional to its count."""
        if tag not in self._words:
            raise MiniBertError(f"PosLexicon.sample: no word has the tag {tag!r}")
        cumulative = self._cumulative[tag]
        index = np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")
        return self._words[tag][index]

    def __len__(self):
        return len(self._tag)


_EMPTY_LEXICON = PosLexicon({})
