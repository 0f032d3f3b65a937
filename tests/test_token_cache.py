"""minibert/support/token_cache.py: the corpus split into documents and
sentences, tokenized once into memory-mapped arrays, keyed by its inputs."""

import numpy as np
import pytest

from minibert.pretraining_data import SENTENCE_END, split_sentences
from minibert.support.errors import MiniBertError
from minibert.support.token_cache import TokenCache, build_token_cache, check_token_cache, is_token_cache, read_documents
from minibert.tokenization import Tokenizer

SPLITTER = (split_sentences, SENTENCE_END.pattern)     # the lesson's rule and what the cache key records of it


def test_a_blank_line_or_a_new_file_starts_a_new_document(tmp_path):
    (tmp_path / "a.txt").write_text("one. two.\nthree.\n\n\nfour.\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("five.\n", encoding="utf-8")
    assert list(read_documents([tmp_path / "a.txt", tmp_path / "b.txt"])) == [["one. two.", "three."], ["four."],
                                                                             ["five."]]


def test_the_cache_holds_every_sentence_once_and_is_reused_for_the_same_inputs(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat. The dog ran.\n\nA bird sang.\n", encoding="utf-8")
    tokenizer = Tokenizer.train_wordpiece([corpus], vocab_size=60, do_lower_case=True)
    folder = build_token_cache([corpus], tokenizer, tmp_path / "cache", *SPLITTER, progress=False)
    assert is_token_cache(folder) and not is_token_cache(tmp_path)
    cache = TokenCache(check_token_cache(folder, tokenizer))
    assert cache.sentence_documents.tolist() == [0, 0, 1]
    first = tokenizer.backend.encode("The cat sat.", add_special_tokens=False).ids
    assert np.asarray(cache.sentence(0)).tolist() == first
    assert build_token_cache([corpus], tokenizer, tmp_path / "cache", *SPLITTER, progress=False) == folder
    other = Tokenizer.train_wordpiece([corpus], vocab_size=60, do_lower_case=False)
    with pytest.raises(MiniBertError, match="made with a different vocabulary"):
        check_token_cache(folder, other)
    assert build_token_cache([corpus], other, tmp_path / "cache", *SPLITTER, progress=False) != folder
