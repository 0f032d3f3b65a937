"""minibert/support/words.py: the words augment.py and the student read, and
the lines of a part-of-speech tagged file."""

import pytest

from minibert.support.errors import MiniBertError
from minibert.support.words import split_words, tagged_lines


def test_split_words_lower_cases_and_splits_off_punctuation():
    assert split_words("Don't STOP, 2 cats!") == ["don", "'", "t", "stop", ",", "2", "cats", "!"]


def test_tagged_lines_skip_blank_and_docstart_lines_and_keep_their_numbers(tmp_path):
    path = tmp_path / "tagged.txt"
    path.write_text("-DOCSTART- -X- O\n\nThe DT B-NP O\nfilm NN\n", encoding="utf-8")
    assert list(tagged_lines(path)) == [(3, ["The", "DT", "B-NP", "O"]), (4, ["film", "NN"])]
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 NN\n".encode("latin-1"))
    with pytest.raises(MiniBertError, match="latin1.txt: not UTF-8 text"):
        list(tagged_lines(tmp_path / "latin1.txt"))
    with pytest.raises(MiniBertError, match="absent.txt: cannot read"):
        list(tagged_lines(tmp_path / "absent.txt"))
