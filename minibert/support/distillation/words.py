"""Support for minibert/augment.py: the words and tags of a part-of-speech
tagged file ("word TAG ..." per line, as CoNLL-2003's) that augment.PosLexicon
learns from, and the checks of augment.py's arguments."""

from collections import Counter, defaultdict

import numpy as np

from minibert.support.errors import MiniBertError

def tagged_lines(path):
    """(1-based line number, whitespace-separated fields) of each line that is
    neither blank nor a CoNLL "-DOCSTART-" line."""
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                fields = line.split()
                if fields and fields[0] != "-DOCSTART-":
                    yield number, fields
    except UnicodeDecodeError:
        raise MiniBertError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read ({e.strerror or e})") from None


def tagged_word_counts(paths, split_words):
    """word -> Counter({tag: count}) of tagged files: lines "word TAG [more
    columns]", the first two whitespace-separated columns (CoNLL-2003's "word
    POS chunk NER" gives its POS column). Blank lines and "-DOCSTART-" lines
    are skipped; words are lower-cased. Only words that `split_words` (the
    lesson's, augment.split_words) keeps whole are used ("u.s." is not: the sentences would never contain it as one word)."""
    counts = defaultdict(Counter)
    for path in paths:
        lines, worded, first = 0, 0, None
        for number, fields in tagged_lines(path):
            if len(fields) < 2:
                raise MiniBertError(f"{path}: line {number}: one column {fields[0]!r}; "
                                    f"expected 'word TAG' (a word and its part-of-speech tag)")
            lines += 1
            # Tag sets write their tags in capitals or punctuation (NN, JJ, NOUN, ","); prose has words there.
            if any(c.islower() for c in fields[1]):
                worded += 1
                first = first or (number, fields[1])
            word = fields[0].lower()
            if split_words(word) == [word]:
                counts[word][fields[1]] += 1
        if lines == 0:
            raise MiniBertError(f"{path}: no 'word TAG' lines (the file is empty or has only "
                                f"blank and -DOCSTART- lines)")
        if worded > lines / 2:
            raise MiniBertError(f"{path}: line {first[0]}: {first[1]!r} in the tag column, and a word there in "
                                f"{worded:,} of {lines:,} lines: prose? expected 'word TAG' lines (a word and its "
                                f"part-of-speech tag, such as NN or JJ)")
    if not counts:
        raise MiniBertError(f"{', '.join(map(str, paths))}: no usable words (every word has punctuation inside)")
    return counts


PAIR_SCHEMES = ("consistent", "independent")   # one fate per word across the pair; each sentence on its own


def check_augmentation(p_mask, p_pos, p_ng, max_n, pair_scheme="consistent", n_iter=1):
    """augment.py's arguments: probabilities, n-gram and sample counts, the pair scheme."""
    if pair_scheme not in PAIR_SCHEMES:
        raise MiniBertError(f"pair scheme {pair_scheme!r}: expected consistent or independent")
    for name, p in (("p_mask", p_mask), ("p_pos", p_pos), ("p_ng", p_ng)):
        if not 0 <= p <= 1:
            raise MiniBertError(f"{name} = {p}: expected a probability in [0, 1]")
    if p_mask + p_pos > 1:
        raise MiniBertError(f"p_mask + p_pos = {p_mask} + {p_pos} > 1: a word is masked, replaced or kept, "
                            f"so the two probabilities must add up to at most 1")
    if not (isinstance(max_n, (int, np.integer)) and max_n >= 1):
        raise MiniBertError(f"max_n = {max_n}: expected an integer >= 1 (the longest n-gram)")
    if not (isinstance(n_iter, (int, np.integer)) and n_iter >= 1):
        raise MiniBertError(f"n_iter = {n_iter}: expected an integer >= 1 (samples per example)")
