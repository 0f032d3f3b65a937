"""bench/sift_study.py end to end on a tiny model and a toy SST-2 (a few
seconds): both variants on every seed, the table with the paired difference,
the JSON, resuming a finished study, refusing a study with other settings;
and the verdict sentence on known numbers."""

import importlib.util
import json

import pytest
import torch

from helpers import REPO, run_script_in_process
from minibert.checkpoints import save_pretrained
from minibert.model import BertModel
from tiny_models import (FILLER, NEGATIVE, POSITIVE, make_readable, sentiment_rows, tiny_config, write_sst2,
                         write_vocab)

SCRIPT = "bench/sift_study.py"


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors gain nothing from threads; on a busy machine they only wait (see test_duplication_study)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A readable random 3-layer BERT (no pooler, like the bundled model) and toy data: with it the
    two variants score differently on this tiny budget (a default-initialised one predicts one class)."""
    root = tmp_path_factory.mktemp("sift_study")
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)
    model = make_readable(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False))
    save_pretrained(model, root / "base")
    train = write_sst2(root / "train.tsv", sentiment_rows(96, seed=0, max_filler=6))
    dev = write_sst2(root / "dev.tsv", sentiment_rows(48, seed=1, max_filler=6))
    return root, train, dev


def study_args(setup, work, *extra):
    root, train, dev = setup
    return ["--task", "sst2", "--model", root / "base", "--train", train, "--eval", dev, "--seeds", "0", "1",
            "--epochs", "1", "--lr", "3e-3", "--batch-size", "8", "--max-seq-len", "16", "--device", "cpu",
            "--work", work, "--json", work / "results.json", *extra]


def run_study(capsys, setup, work, *extra):
    return run_script_in_process(capsys, SCRIPT, *study_args(setup, work, *extra))


def load_script():
    spec = importlib.util.spec_from_file_location("sift_study", REPO / SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_study_runs_both_variants_on_every_seed_reports_the_paired_difference_and_resumes(setup, capsys):
    root = setup[0]
    work = root / "study"
    code, captured = run_study(capsys, setup, work, "--sift-lambda", "2")
    assert code == 0, captured.err
    lines = captured.out.splitlines()

    # every run finished, kept its fine-tuned model, dropped its checkpoint; only the sift runs used SiFT
    for name in ("plain", "sift"):
        for seed in (0, 1):
            folder = work / "runs" / f"{name}-seed{seed}"
            assert (folder / "metrics.json").is_file() and not (folder / "checkpoint.pt").exists()
            record = json.loads((folder / "task.json").read_text())
            if name == "sift":
                assert record["sift"]["lambda"] == 2.0 and record["sift"]["init_scale"] == 0.01
                assert record["sift"]["step_size"] == 0.0001                 # SiftConfig's defaults
            else:
                assert "sift" not in record
    for seed in (0, 1):                  # same seed, same start and batches: only SiFT made the weights differ
        heads = [(work / "runs" / f"{name}-seed{seed}" / "model.safetensors").read_bytes() for name in ("plain", "sift")]
        assert heads[0] != heads[1]

    # one line per run, then the table: both variants and the paired difference
    assert sum(line.startswith("run ") for line in lines) == 4
    header = next(line for line in lines if line.startswith("variant "))
    assert header.split() == ["variant", "seed", "0", "seed", "1", "mean", "std"]
    plain_row = next(line for line in lines if line.startswith("plain "))
    sift_row = next(line for line in lines if line.startswith("SiFT (lambda 2, sigma 0.01, eta 0.0001) "))
    paired_row = next(line for line in lines if line.startswith("SiFT - plain (paired) "))

    results = json.loads((work / "results.json").read_text())
    plain, sifted = results["variants"]["plain"], results["variants"]["sift"]
    assert results["seeds"] == [0, 1] and results["metric"] == "accuracy"
    assert results["sift"]["lambda"] == 2.0 and results["settings"]["sift"]["lambda"] == 2.0
    for row in (plain, sifted):
        assert set(row["scores"]) == {"0", "1"}
        values = list(row["scores"].values())
        assert all(0 <= v <= 100 for v in values)
        assert row["mean"] == pytest.approx(sum(values) / 2)
        assert row["std"] == pytest.approx(abs(values[0] - values[1]) / 2 ** 0.5)
    assert [float(x) for x in plain_row.split()[1:3]] == [round(plain["scores"][s], 2) for s in ("0", "1")]
    assert [float(x) for x in sift_row.split()[-4:-2]] == [round(sifted["scores"][s], 2) for s in ("0", "1")]
    differences = [sifted["scores"][s] - plain["scores"][s] for s in ("0", "1")]
    paired = results["paired_difference"]
    assert paired["per_seed_differences"] == pytest.approx(differences)
    assert paired["difference"] == pytest.approx(sifted["mean"] - plain["mean"])
    assert paired["std_of_differences"] == pytest.approx(abs(differences[0] - differences[1]) / 2 ** 0.5)
    assert [float(x) for x in paired_row.split()[-4:-2]] == [round(d, 2) for d in differences]
    assert results["conclusion"].startswith("SiFT ") and "Only 2 seeds" in results["conclusion"]
    assert any(line.startswith("SiFT ") and "seed spread" in line and "(plain)" in line for line in lines)

    # run again: every run is reused (one killed after training is only scored), the figures are the same
    (work / "runs" / "sift-seed1" / "metrics.json").unlink()
    code, captured = run_study(capsys, setup, work, "--sift-lambda", "2")
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert sum("(reused)" in line for line in lines) == 3
    assert any(line.startswith("run 4/4: sift") and "already trained" in line for line in lines)
    again = json.loads((work / "results.json").read_text())
    for name in ("plain", "sift"):
        assert again["variants"][name]["scores"] == results["variants"][name]["scores"]

    # other SiFT settings in the same WORK: refused before any run
    before = sorted(p.name for p in (work / "runs").iterdir())
    code, captured = run_study(capsys, setup, work)
    assert code == 1
    assert captured.err.startswith("error: --work") and "sift {'lambda': 2.0" in captured.err
    assert "{'lambda': 5.0" in captured.err
    assert sorted(p.name for p in (work / "runs").iterdir()) == before


def test_a_work_folder_of_another_study_is_refused(setup, capsys, tmp_path):
    work = tmp_path / "study"
    work.mkdir()
    (work / "study.json").write_text(json.dumps({"task": "sst2", "duplicate": "0,1,2"}))   # a duplication study's
    code, captured = run_study(capsys, setup, work)
    assert code == 1
    assert captured.err.startswith("error: --work") and "study None there, 'sift' now" in captured.err
    assert not (work / "runs").exists()


def test_one_seed_and_a_negative_sift_setting_are_refused(setup, capsys, tmp_path):
    args = study_args(setup, tmp_path / "study")
    args[args.index("--seeds") + 1:args.index("--seeds") + 3] = ["4", "4"]
    code, captured = run_script_in_process(capsys, SCRIPT, *args)
    assert code == 1 and "at least 2 distinct seeds" in captured.err
    code, captured = run_script_in_process(capsys, SCRIPT, *study_args(setup, tmp_path / "study"),
                                           "--sift-step-size", "-1")
    assert code == 2 and "--sift-step-size" in captured.err          # a usage error
    assert not (tmp_path / "study").exists()


def test_the_verdict_says_whether_sift_helped_beyond_the_seed_spread():
    module = load_script()
    plain = module.summarize({0: 80.0, 1: 81.0, 2: 82.0})           # std 1.0
    helped = module.summarize({0: 83.0, 1: 84.0, 2: 85.5})          # +3.17, std 1.26
    comparison = module.compare(plain, helped, "sift")
    assert comparison["exceeds_seed_spread"] and comparison["better_on_seeds"] == 3
    sentence = module.verdict(comparison, plain, helped, "accuracy")
    assert sentence == ("SiFT helped, by more than the seed spread: accuracy 81.00 -> 84.17 (+3.17 points, mean of "
                        "3 seeds; better on 3 of 3, paired differences +3.00, +3.00, +3.50, their std 0.29); "
                        "seed standard deviations 1.00 (plain) and 1.26 (SiFT).")
    noise = module.summarize({0: 79.5, 1: 82.0, 2: 81.0})
    sentence = module.verdict(module.compare(plain, noise, "sift"), plain, noise, "accuracy")
    assert sentence.startswith("SiFT made no difference this study can tell from seed noise")
    assert "-0.17 points" in sentence and "better on 1 of 3" in sentence
