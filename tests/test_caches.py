"""minibert/support/caches.py: the pretraining token cache and the distillation transfer cache."""

import dataclasses
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from distill_helpers import make_distillation_data, make_teacher, one_thread
from minibert import distillation
from minibert.commands import distill as distill_command
from minibert.distillation import DistillationSettings
from minibert.pretraining import SENTENCE_END, split_sentences
from minibert.support.caches import (CACHE_FORMAT, TokenCache, build_token_cache, check_token_cache, is_token_cache,
                                     load_transfer_cache, read_documents, save_transfer_cache, transfer_key)
from minibert.support import MiniBertError
from minibert.support.task_files import ClassificationExample
from minibert.tasks import make_task
from minibert.tokenization import Tokenizer
from tiny_models import sentiment_rows, write_sst2


# ==============================================================================
# minibert/support/caches.py: the corpus split into documents and
# sentences, tokenized once into memory-mapped arrays, keyed by its inputs.
# ==============================================================================

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


# ==============================================================================
# minibert/support/caches.py: the transfer set and the teacher's
# logits are computed once, read back while nothing they depend on changes,
# and recomputed when the teacher, the data or the settings change.
# ==============================================================================

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_distillation_data(tmp_path_factory.mktemp("cache"))


def test_teacher_logits_are_cached_and_recomputed_when_teacher_data_or_settings_change(setup, tmp_path, monkeypatch):
    calls = []
    real = distillation.teacher_logits

    def counting(teacher, examples, *args, **kwargs):
        calls.append(len(examples))
        return real(teacher, examples, *args, **kwargs)
    monkeypatch.setattr(distillation, "teacher_logits", counting)
    train_file = tmp_path / "train.tsv"
    shutil.copy(setup / "train.tsv", train_file)
    settings = DistillationSettings(n_iter=2, pos_file=str(setup / "pos.txt"), cache_dir=str(tmp_path / "cache"))
    settings = settings.resolved(make_task("sst2"), True)

    def run(teacher_folder=setup / "teacher", settings=settings):
        teacher = distill_command.load_teacher(teacher_folder)
        examples = teacher.task.read(train_file)
        return distill_command.transfer_set_with_logits(teacher, examples, train_file, settings, progress=False)

    transfer, logits, hit = run()
    assert not hit and len(calls) == 1 and calls[0] == len(transfer) == len(logits) > 48   # 48 + augmented
    again, again_logits, hit = run()
    assert hit and len(calls) == 1                                   # the teacher was not called again
    assert np.array_equal(again_logits, logits)
    assert [(e.text_a, e.label, e.line) for e in again] == [(e.text_a, e.label, e.line) for e in transfer]

    run(settings=dataclasses.replace(settings, n_iter=3))            # other augmentation settings
    assert len(calls) == 2
    run(settings=dataclasses.replace(settings, augment=False))       # no augmentation: the training set alone
    assert len(calls) == 3 and calls[-1] == 48
    other_teacher = make_teacher(tmp_path / "teacher2", setup / "base", "sst2", seed=1)   # another head
    run(teacher_folder=other_teacher)
    assert len(calls) == 4
    write_sst2(train_file, sentiment_rows(48, seed=5))               # other data
    run()
    assert len(calls) == 5
    run()
    assert len(calls) == 5                                           # ... cached in turn
    for cache_file in (tmp_path / "cache").glob("*.npz"):            # a damaged cache file is recomputed, not an error
        cache_file.write_bytes(b"not a zip")
    run()
    assert len(calls) == 6


def test_a_teacher_logit_file_a_killed_run_left_under_another_key_is_removed_by_the_next_run(setup, tmp_path):
    finished = subprocess.Popen([sys.executable, "-c", "None"])
    finished.wait()                                                   # its PID is no process now
    cache = tmp_path / "cache"
    cache.mkdir()
    dead = cache / f".{'0' * 64}.npz.{finished.pid}.0badc0de.tmp"     # a run with other settings, killed with -9
    live = cache / f".{'1' * 64}.npz.{os.getpid()}.0000cafe.tmp"      # a run writing right now
    for path in (dead, live):
        path.write_bytes(b"part of a file")
    settings = DistillationSettings(n_iter=1, pos_file=str(setup / "pos.txt"), cache_dir=str(cache))
    settings = settings.resolved(make_task("sst2"), True)
    teacher = distill_command.load_teacher(setup / "teacher")
    examples = teacher.task.read(setup / "train.tsv")
    distill_command.transfer_set_with_logits(teacher, examples, setup / "train.tsv", settings, progress=False)
    assert not dead.exists() and live.exists() and len(list(cache.glob("*.npz"))) == 1


def test_the_key_names_every_augmentation_setting_the_pair_mode_included(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na good film\t1\n")
    settings = DistillationSettings(pos_file=str(tmp_path / "pos.txt"))

    def key(**changes):
        return transfer_key(tmp_path, tmp_path / "train.tsv", dataclasses.replace(settings, **changes),
                            make_task("mrpc"), 1)
    assert len({key(), key(pair_augment="independent"), key(n_iter=3), key(augment=False)}) == 4
    assert key(augment=False) == key(augment=False, pair_augment="independent")   # no samples: no pair mode


def test_a_cache_file_holds_the_samples_as_json_and_answers_only_its_own_key(tmp_path):
    assert CACHE_FORMAT == 1
    originals = [ClassificationExample("a good film", None, "1", None, 2)]
    augmented = [ClassificationExample("a [MASK] film", None, None, None, 2)]
    logits = np.array([[0.5, 1.5], [-1.0, 2.0]], dtype=np.float32)
    save_transfer_cache(tmp_path / "k.npz", "k", augmented, logits)
    with np.load(tmp_path / "k.npz", allow_pickle=False) as data:          # no pickle needed to read it
        assert bytes(data["augmented"]).decode("utf-8") == '[["a [MASK] film", null, 2]]'
    transfer, read_logits = load_transfer_cache(tmp_path / "k.npz", "k", originals)
    assert transfer == originals + augmented and np.array_equal(read_logits, logits)
    assert load_transfer_cache(tmp_path / "k.npz", "another key", originals) is None
    assert load_transfer_cache(tmp_path / "k.npz", "k", originals * 2) is None     # rows do not fit the examples
    assert load_transfer_cache(tmp_path / "absent.npz", "k", originals) is None
