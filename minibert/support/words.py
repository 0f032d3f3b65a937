"""Support for minibert/augment.py and minibert/distillation.py: how a text
becomes the lower-cased words both of them read, and the lines of a
part-of-speech tagged file ("word TAG ..." per line, as CoNLL-2003's)."""

import re

from minibert.support.errors import MiniBertError

MASK = "[MASK]"

_WORD = re.compile(r"\w+|[^\w\s]")


def split_words(text):
    """Lower-cased words and punctuation marks: "Don't!" -> don ' t !"""
    return _WORD.findall(text.lower())


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
