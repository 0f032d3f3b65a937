"""minibert/support/student_files.py: what the distillation lessons read and check (tagged files,
word vectors, the student's vocabulary, a run's settings).
"""

import dataclasses

import pytest
import torch

from distill_helpers import make_distillation_data
from helpers import error_line, run_script, run_script_in_process
from minibert.distillation import split_words
from minibert.distillation import DistillationSettings, PAPER_CONFIGS, PieceTokenizer, WordTokenizer, build_vocabulary
from minibert.commands.distill import load_teacher
from minibert.support import MiniBertError
from minibert.support.student_files import (check_files, check_run, check_word_vectors, pos_file_path,
                                            read_word_vectors, tagged_lines, tagged_word_counts,
                                            teacher_embedding_matrix)
from minibert.tasks import CLASSIFICATION, make_task
from minibert.tokenization import load_tokenizer


# ==============================================================================
# minibert/support/student_files.py: the lines and word counts of a
# part-of-speech tagged file.
# ==============================================================================

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


# ==============================================================================
# minibert/support/student_files.py: a word2vec/GloVe text file gives vectors
# for the vocabulary's words, and the teacher's word-piece embeddings are
# copied at its width or randomly projected.
# ==============================================================================

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


# ==============================================================================
# minibert/distillation.py's student inputs: the word vocabulary
# (specials first, then words by frequency, "[MASK]" one word), its file, and
# the teacher's pieces without [CLS]/[SEP].
# ==============================================================================

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


# ==============================================================================
# minibert/support/student_files.py: the checks that fail a run
# before any work is done (and distillation.DistillationSettings' per-task
# defaults, which they check).
# ==============================================================================

def test_defaults_are_resolved_per_task_and_teacher():
    single = DistillationSettings().resolved(make_task("sst2"), with_teacher=True)
    assert (single.hidden_size, single.n_iter, single.alpha, single.lr) == (150, 20, 0.0, 1.0)
    pair = DistillationSettings(optimizer="adam", hidden_size=64).resolved(make_task("mrpc"), with_teacher=False)
    assert (pair.hidden_size, pair.n_iter, pair.alpha, pair.lr) == (64, 10, 1.0, 5e-4)


def test_without_a_pos_file_the_error_says_to_pass_one(tmp_path):
    with pytest.raises(MiniBertError, match="lexicon: pass --pos-file FILE"):
        pos_file_path(None)
    (tmp_path / "pos.txt").write_text("the DT\n")
    assert pos_file_path(str(tmp_path / "pos.txt")) == tmp_path / "pos.txt"


def test_a_run_that_cannot_work_fails_before_any_work(tmp_path):
    with pytest.raises(MiniBertError, match="--embeddings nope.txt: expected random, teacher or a word-vectors file"):
        check_files(DistillationSettings(embeddings="nope.txt"))
    settings = DistillationSettings().resolved(make_task("sst2"), with_teacher=False)
    with pytest.raises(MiniBertError, match="--task conll2003: distillation is for sentence classification"):
        check_run(settings, make_task("conll2003", labels=["O"]), False, False, CLASSIFICATION)
    with pytest.raises(MiniBertError, match="--embeddings teacher needs --teacher DIR"):
        check_run(DistillationSettings(embeddings="teacher", alpha=1.0), make_task("sst2"), False, False,
                  CLASSIFICATION)
    with pytest.raises(MiniBertError, match="--optimizer 'sgd': expected adadelta or adam"):
        check_run(DistillationSettings(optimizer="sgd", alpha=1.0), make_task("sst2"), False, False, CLASSIFICATION)


def test_bf16_is_off_unless_asked_and_survives_resolving():
    assert DistillationSettings().resolved(make_task("sst2"), with_teacher=True).bf16 is False
    assert DistillationSettings(bf16=True).resolved(make_task("mrpc"), with_teacher=False).bf16 is True


def test_embeddings_modes_follow_the_starting_vectors_and_contradictions_are_refused():
    sst2 = make_task("sst2")
    assert DistillationSettings().resolved(sst2, True).embeddings_mode == "rand"
    assert DistillationSettings(embeddings="teacher").resolved(sst2, True).embeddings_mode == "nonstatic"
    assert DistillationSettings(embeddings_mode="static").resolved(sst2, True).embeddings_mode == "static"
    assert "freeze_embeddings" not in dataclasses.asdict(DistillationSettings())    # one setting: embeddings_mode
    rand_with_vectors = DistillationSettings(embeddings="teacher", embeddings_mode="rand").resolved(sst2, True)
    with pytest.raises(MiniBertError, match="--embeddings-mode rand starts from random vectors"):
        check_run(rand_with_vectors, sst2, True, True, CLASSIFICATION)
    with pytest.raises(MiniBertError, match="--distill-term 'l2': expected one of mse, squared-l2"):
        check_run(DistillationSettings(distill_term="l2").resolved(sst2, True), sst2, True, True, CLASSIFICATION)


def test_the_papers_sst2_configuration_is_multichannel_hidden_150_fc_200():
    paper = PAPER_CONFIGS["sst2"]
    assert paper == {"embeddings_mode": "multichannel", "embedding_dim": 300, "hidden_size": 150, "fc_size": 200,
                     "dropout": 0.1, "batch_size": 50}
