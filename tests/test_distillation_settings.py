"""minibert/support/distillation/settings.py: the checks that fail a run
before any work is done (and distillation.DistillationSettings' per-task
defaults, which they check)."""

import dataclasses

import pytest

from minibert.distillation import PAPER_CONFIGS, DistillationSettings
from minibert.support.distillation.settings import check_files, check_run, pos_file_path
from minibert.support.errors import MiniBertError
from minibert.tasks import CLASSIFICATION, make_task


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
