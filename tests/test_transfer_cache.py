"""minibert/support/distillation/transfer_cache.py: the transfer set and the teacher's
logits are computed once, read back while nothing they depend on changes,
and recomputed when the teacher, the data or the settings change."""

import dataclasses
import shutil

import numpy as np
import pytest

from distill_helpers import make_distillation_data, make_teacher, one_thread
from minibert import distillation
from minibert.commands import distill as distill_command
from minibert.distillation import DistillationSettings
from minibert.support.distillation.transfer_cache import (CACHE_FORMAT, load_transfer_cache, save_transfer_cache,
                                                          transfer_key)
from minibert.tasks import make_task
from minibert.support.task_files import ClassificationExample
from tiny_models import sentiment_rows, write_sst2

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
