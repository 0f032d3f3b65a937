"""minibert/support/distillation/word_vectors.py: a word2vec/GloVe text file gives vectors
for the vocabulary's words, and the teacher's word-piece embeddings are
copied at its width or randomly projected."""

import pytest
import torch

from distill_helpers import make_distillation_data
from helpers import error_line, run_script, run_script_in_process
from minibert.commands.distill import load_teacher
from minibert.distillation import DistillationSettings
from minibert.support.distillation.settings import check_files
from minibert.support.distillation.word_vectors import check_word_vectors, read_word_vectors, teacher_embedding_matrix
from minibert.support.errors import MiniBertError


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


def test_a_header_whose_dimension_disagrees_with_its_lines_or_is_too_wide_is_refused(tmp_path, capsys):
    path = tmp_path / "vectors.txt"
    path.write_text("2 2\nthe 1 2 3 4\nfilm 5 6 7 8\n", encoding="utf-8")   # read as it says: "the 1 2" no word
    for read in (lambda: read_word_vectors(path, ["the"]), lambda: check_word_vectors(path)):
        with pytest.raises(MiniBertError, match=r"vectors.txt: line 2: a word and 4 numbers, but the header "
                                                r"\(line 1\) says 2-dimensional vectors"):
            read()
    path.write_text("1 100000000000\nthe 1 2\n", encoding="utf-8")             # would ask for 18.4 TB
    with pytest.raises(MiniBertError, match=r"line 1: the header says 100,000,000,000-dimensional vectors; "
                                            r"expected 1 to 10,000"):
        check_word_vectors(path)
    assert "at most 10,000" in run_script("distill.py", "--help").stdout
    code, captured = run_script_in_process(capsys, "distill.py", "--embedding-dim", "100000000000")
    assert code == 2 and "--embedding-dim: expected an integer in [1, 10000]" in error_line(code, captured)
    path.write_text("the 1 2\nnew york 3 4\n", encoding="utf-8")              # no header: GloVe 840B's spaces
    assert read_word_vectors(path, ["new york"])[0]["new york"].tolist() == [3, 4]


def test_every_line_is_checked_before_the_slow_work(tmp_path):
    path = tmp_path / "vectors.txt"
    lines = [f"w{i} {i} 1" for i in range(2000)] + ["late 1 x"]                  # a word no vocabulary asks for
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_word_vectors(path, ["w1"])[1] == 2                              # reading the words alone misses it
    settings = DistillationSettings(embeddings=str(path))
    with pytest.raises(MiniBertError, match=r"vectors.txt: line 2001: expected 2 numbers after the word"):
        check_files(settings)                                                   # distill()'s first step
    path.write_text("a 1 2\n", encoding="utf-8")
    assert check_word_vectors(path) == 2
    with pytest.raises(MiniBertError, match="not a regular file"):
        check_word_vectors(tmp_path)


def test_teacher_embeddings_are_copied_at_its_width_or_randomly_projected(tmp_path):
    teacher = load_teacher(make_distillation_data(tmp_path) / "teacher")
    base_model = teacher.model.base_model
    weight = base_model.embeddings.word_embeddings.weight.detach()     # (V, 32)
    assert torch.equal(teacher_embedding_matrix(base_model, 32, seed=0), weight)
    projected = teacher_embedding_matrix(base_model, 12, seed=0)
    assert projected.shape == (weight.shape[0], 12)
    assert torch.equal(projected, teacher_embedding_matrix(base_model, 12, seed=0))
    ratio = projected.norm(dim=1) / weight.norm(dim=1)               # lengths roughly kept (Johnson-Lindenstrauss)
    assert 0.5 < float(ratio.median()) < 1.5
