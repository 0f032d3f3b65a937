"""minibert/support/word_vectors.py: a word2vec/GloVe text file gives vectors
for the vocabulary's words, and the teacher's word-piece embeddings are
copied at its width or randomly projected."""

import pytest
import torch

from distill_helpers import make_distillation_data
from minibert import distillation
from minibert.support.errors import MiniBertError
from minibert.support.word_vectors import read_word_vectors, teacher_embedding_matrix


def test_word_vectors_are_read_for_the_vocabulary_words_they_have(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("4 3\nThe 1 2 3\nzebra 9 9 9\nfilm 0.5 0 -1\nthe 7 7 7\n", encoding="utf-8")
    vectors, dim = read_word_vectors(path, ["[PAD]", "[UNK]", "[MASK]", "the", "film", "good"])
    assert dim == 3 and set(vectors) == {"the", "film"}              # zebra: not in the vocabulary
    assert vectors["the"].tolist() == [1, 2, 3]                      # the first spelling wins
    with pytest.raises(MiniBertError, match="3-dimensional vectors, but --embedding-dim is 300"):
        read_word_vectors(path, ["the"], dim=300)
    (tmp_path / "bad.txt").write_text("a 1 2\nb 1\n", encoding="utf-8")
    with pytest.raises(MiniBertError, match=r"bad.txt: line 2: 1 numbers; expected 2"):
        read_word_vectors(tmp_path / "bad.txt", ["a"])


def test_teacher_embeddings_are_copied_at_its_width_or_randomly_projected(tmp_path):
    teacher = distillation.load_teacher(make_distillation_data(tmp_path) / "teacher")
    base_model = teacher.model.base_model
    weight = base_model.embeddings.word_embeddings.weight.detach()     # (V, 32)
    assert torch.equal(teacher_embedding_matrix(base_model, 32, seed=0), weight)
    projected = teacher_embedding_matrix(base_model, 12, seed=0)
    assert projected.shape == (weight.shape[0], 12)
    assert torch.equal(projected, teacher_embedding_matrix(base_model, 12, seed=0))
    ratio = projected.norm(dim=1) / weight.norm(dim=1)               # lengths roughly kept (Johnson-Lindenstrauss)
    assert 0.5 < float(ratio.median()) < 1.5
