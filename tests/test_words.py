"""minibert/support/distillation/words.py: the lines and word counts of a
part-of-speech tagged file."""

import pytest

from minibert.augment import split_words
from minibert.support.distillation.words import tagged_lines, tagged_word_counts
from minibert.support.errors import MiniBertError


def test_tagged_lines_skip_blank_and_docstart_lines_and_keep_their_numbers(tmp_path):
    path = tmp_path / "tagged.txt"
    path.write_text("-DOCSTART- -X- O\n\nThe DT B-NP O\nfilm NN\n", encoding="utf-8")
    assert list(tagged_lines(path)) == [(3, ["The", "DT", "B-NP", "O"]), (4, ["film", "NN"])]
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 NN\n".encode("latin-1"))
    with pytest.raises(MiniBertError, match="latin1.txt: not UTF-8 text"):
        list(tagged_lines(tmp_path / "latin1.txt"))
    with pytest.raises(MiniBertError, match="absent.txt: cannot read"):
        list(tagged_lines(tmp_path / "absent.txt"))


def test_tagged_word_counts_count_each_words_tags_lower_cased(tmp_path):
    path = tmp_path / "tags.txt"
    path.write_text("run VB\nRun NN\nrun VB\nU.S. NNP\n\nthe DT B-NP\n", encoding="utf-8")
    assert tagged_word_counts([path], split_words) == {"run": {"VB": 2, "NN": 1}, "the": {"DT": 1}}   # "u.s." is no one word


def test_bad_lexicon_files_are_named_with_their_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("-DOCSTART- -X- -X- O\n\n", encoding="utf-8")
    with pytest.raises(MiniBertError, match=r"empty\.txt: no 'word TAG' lines"):
        tagged_word_counts([empty], split_words)
    one_column = tmp_path / "one.txt"
    one_column.write_text("the DT\n\nlonely\n", encoding="utf-8")
    with pytest.raises(MiniBertError, match=r"one\.txt: line 3: one column 'lonely'"):
        tagged_word_counts([one_column], split_words)
    with pytest.raises(MiniBertError, match=r"missing\.txt: cannot read"):
        tagged_word_counts([tmp_path / "missing.txt"], split_words)


def test_prose_given_as_a_lexicon_is_one_line_naming_the_file_and_a_line(tmp_path):
    prose = tmp_path / "story.txt"
    prose.write_text("It was the best of times,\nit was the worst of times.\n\nThe cat sat on the mat.\n")
    with pytest.raises(MiniBertError) as caught:
        tagged_word_counts([prose], split_words)
    assert str(caught.value) == (f"{prose}: line 1: 'was' in the tag column, and a word there in 3 of 3 lines: "
                                 f"prose? expected 'word TAG' lines (a word and its part-of-speech tag, such as NN "
                                 f"or JJ)")
    tagged = tmp_path / "eng.train"
    tagged.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\nGerman JJ B-NP B-MISC\n")
    assert dict(tagged_word_counts([tagged], split_words)["rejects"]) == {"VBZ": 1}
