"""minibert/distillation.py's student inputs: the word vocabulary
(specials first, then words by frequency, "[MASK]" one word), its file, and
the teacher's pieces without [CLS]/[SEP]."""

import pytest

from distill_helpers import make_distillation_data
from minibert.distillation import PieceTokenizer, WordTokenizer, build_vocabulary
from minibert.support.errors import MiniBertError
from minibert.tokenization import load_tokenizer


def test_the_word_vocabulary_has_specials_first_then_words_by_frequency():
    texts = ["the film was good", "The plot was bad [MASK] ,", "the [MASK] film"]
    words = build_vocabulary(texts)
    assert words[:6] == ["[PAD]", "[UNK]", "[MASK]", "the", "film", "was"]   # 3, 2, 2 occurrences; ties a-z
    assert build_vocabulary(texts, min_count=2) == ["[PAD]", "[UNK]", "[MASK]", "the", "film", "was"]
    tokenizer = WordTokenizer(words, max_seq_len=3)
    assert tokenizer.encode_many(["The [MASK] unseen-word", ""]) == [[3, 2, 1], [1]]   # truncated; empty -> [UNK]


def test_the_vocabulary_file_round_trips_and_a_bad_one_is_named(tmp_path):
    tokenizer = WordTokenizer(build_vocabulary(["a good film"]), 8)
    tokenizer.save(tmp_path)
    assert (tmp_path / "vocab.txt").read_text() == "[PAD]\n[UNK]\n[MASK]\na\nfilm\ngood\n"
    assert WordTokenizer.load(tmp_path, 8).words == tokenizer.words
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[MASK]\na\na\n")
    with pytest.raises(MiniBertError, match="vocab.txt: a word appears twice"):
        WordTokenizer.load(tmp_path, 8)
    (tmp_path / "vocab.txt").write_text("[UNK]\n[PAD]\n[MASK]\n")
    with pytest.raises(MiniBertError, match=r"expected the first lines to be \[PAD\], \[UNK\], \[MASK\]"):
        WordTokenizer.load(tmp_path, 8)


def test_the_teachers_pieces_come_without_cls_and_sep(tmp_path):
    teacher_tokenizer = load_tokenizer(make_distillation_data(tmp_path) / "teacher")
    pieces = PieceTokenizer(teacher_tokenizer, max_seq_len=8)
    assert pieces.encode_many(["good film", "[MASK] plot"]) == [
        teacher_tokenizer.convert_tokens_to_ids(["good", "film"]),
        teacher_tokenizer.convert_tokens_to_ids(["[MASK]", "plot"])]
