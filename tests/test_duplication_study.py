"""bench/duplication_study.py end to end on a tiny model and a toy SST-2 (a few
seconds): the variants it builds, the table and JSON it reports, resuming a
finished study, refusing a study with other settings, and --split-eval."""

import json

import pytest
import torch

from helpers import run_script_in_process
from minibert.checkpoints import save_pretrained
from minibert.model import BertModel
from tiny_models import FILLER, NEGATIVE, POSITIVE, sentiment_rows, tiny_config, write_sst2, write_vocab

SCRIPT = "bench/duplication_study.py"
@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors gain nothing from threads, and on a busy machine spinning
    OpenMP threads make every step many times slower (7 s instead of 0.2 s
    for one run here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A default-initialised 3-layer BERT (no pooler, like the bundled model) and toy data."""
    root = tmp_path_factory.mktemp("duplication_study")
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)
    save_pretrained(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False), root / "base")
    train = write_sst2(root / "train.tsv", sentiment_rows(96, seed=0, max_filler=6))
    dev = write_sst2(root / "dev.tsv", sentiment_rows(24, seed=1, max_filler=6))
    return root, train, dev


def study_args(setup, work, *extra):
    root, train, dev = setup
    return ["--task", "sst2", "--model", root / "base", "--train", train, "--eval", dev, "--seeds", "0", "1",
            "--epochs", "1", "--lr", "3e-3", "--batch-size", "4", "--max-seq-len", "16", "--device", "cpu",
            "--work", work, "--json", work / "results.json", *extra]


def run_study(capsys, setup, work, *extra):
    code, captured = run_script_in_process(capsys, SCRIPT, *study_args(setup, work, *extra))
    return code, captured


def test_the_study_builds_the_variants_runs_every_seed_and_reports_table_and_json(setup, capsys):
    root = setup[0]
    work = root / "study"
    code, captured = run_study(capsys, setup, work)
    assert code == 0, captured.err
    out = captured.out

    # the deeper models, as duplicate.py writes them
    base_layers = json.loads((root / "base" / "config.json").read_text())["num_hidden_layers"]
    duplicated = json.loads((work / "models" / "duplicated" / "config.json").read_text())
    tied = json.loads((work / "models" / "tied" / "config.json").read_text())
    assert base_layers == 3
    assert duplicated["num_hidden_layers"] == base_layers + 3 and duplicated.get("layer_order") is None
    assert tied["num_hidden_layers"] == base_layers + 3 and tied["layer_order"] == [0, 0, 1, 1, 2, 2]
    record = json.loads((work / "models" / "duplicated" / "duplication.json").read_text())
    assert record["order"] == [0, 0, 1, 1, 2, 2] and record["tied"] is False

    # every run finished, kept its fine-tuned model and dropped its checkpoint
    for name in ("base", "duplicated", "tied"):
        for seed in (0, 1):
            folder = work / "runs" / f"{name}-seed{seed}"
            assert (folder / "task.json").is_file() and (folder / "metrics.json").is_file()
            assert not (folder / "checkpoint.pt").exists()
    tuned_tied = json.loads((work / "runs" / "tied-seed0" / "config.json").read_text())
    assert tuned_tied["layer_order"] == [0, 0, 1, 1, 2, 2]          # still tied after fine-tuning

    # one progress line per run, then the table and the verdict
    assert sum(line.startswith("run ") for line in out.splitlines()) == 6
    for row in ("base", "duplicated (0,1,2)", "tied (0,1,2)", "ensemble of the 3 variants",
                "base, 2 seeds ensembled"):
        assert any(line.startswith(row) for line in out.splitlines()), row
    header = next(line for line in out.splitlines() if line.startswith("variant "))
    assert header.split() == ["variant", "layers", "seed", "0", "seed", "1", "mean", "std"]
    assert "Duplicating layers 0,1,2" in out and "seed spread" in out

    results = json.loads((work / "results.json").read_text())
    assert results["seeds"] == [0, 1] and results["metric"] == "accuracy"
    assert set(results["variants"]) == {"base", "duplicated", "tied"}
    layers = {name: row["layers"] for name, row in results["variants"].items()}
    assert layers == {"base": 3, "duplicated": 6, "tied": 6}
    assert results["variants"]["tied"]["distinct_layers"] == 3
    for row in (*results["variants"].values(), results["ensemble"]):
        assert set(row["scores"]) == {"0", "1"}
        values = list(row["scores"].values())
        assert all(0 <= v <= 100 for v in values)
        assert row["mean"] == pytest.approx(sum(values) / 2)
        assert row["std"] == pytest.approx(abs(values[0] - values[1]) / 2 ** 0.5)
    assert results["ensemble"]["members"] == ["base", "duplicated", "tied"]
    assert 0 <= results["base_seed_ensemble"]["score"] <= 100
    comparison = results["comparisons"]["duplicated"]
    assert comparison["difference"] == pytest.approx(results["variants"]["duplicated"]["mean"]
                                                     - results["variants"]["base"]["mean"])
    assert isinstance(comparison["exceeds_seed_spread"], bool)
    assert results["conclusion"].startswith("Duplicating layers 0,1,2")

    # run again: every run is reused (one killed after training is only scored), and the figures are the same
    ensembles = work / "ensembles"
    assert sorted(p.name for p in ensembles.iterdir()) == [
        "base+duplicated+tied-seed0.json", "base+duplicated+tied-seed1.json", "base-seeds-0-1.json"]
    stamps = {p.name: p.stat().st_mtime_ns for p in ensembles.iterdir()}
    (work / "runs" / "tied-seed1" / "metrics.json").unlink()
    code, captured = run_study(capsys, setup, work)
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert sum("(reused)" in line for line in lines) == 5
    assert any(line.startswith("run 6/6: tied") and "already trained" in line for line in lines)
    again = json.loads((work / "results.json").read_text())
    for name in ("base", "duplicated", "tied"):
        assert again["variants"][name]["scores"] == results["variants"][name]["scores"]
    assert again["ensemble"]["scores"] == results["ensemble"]["scores"]
    # ensembles are reused too, except the one whose member was scored again
    changed = {p.name for p in ensembles.iterdir() if p.stat().st_mtime_ns != stamps[p.name]}
    assert changed == {"base+duplicated+tied-seed1.json"}


def test_a_study_with_other_settings_in_the_same_work_folder_is_refused(setup, capsys, tmp_path):
    work = tmp_path / "study"
    work.mkdir()
    (work / "study.json").write_text(json.dumps({"task": "sst2", "lr": 1.0}))
    code, captured = run_study(capsys, setup, work)
    assert code == 1
    assert captured.err.startswith("error: --work") and "lr 1.0 there, 0.003 now" in captured.err
    assert not (work / "runs").exists()


def test_one_seed_is_refused(setup, capsys, tmp_path):
    args = study_args(setup, tmp_path / "study")
    args[args.index("--seeds") + 1:args.index("--seeds") + 3] = ["4", "4"]
    code, captured = run_script_in_process(capsys, SCRIPT, *args)
    assert code == 1 and "at least 2 distinct seeds" in captured.err


def test_split_eval_writes_the_held_out_part_and_scores_every_run_on_it(setup, capsys, tmp_path):
    work = tmp_path / "study"
    args = study_args(setup, work)
    at = args.index("--eval")
    args[at:at + 2] = ["--split-eval", "0.25"]
    code, captured = run_script_in_process(capsys, SCRIPT, *args, "--duplicate", "0")
    assert code == 0, captured.err
    held_out = (work / "heldout.tsv").read_text().splitlines()
    assert held_out[0] == "sentence\tlabel" and len(held_out) - 1 == 24      # 25% of 96
    results = json.loads((work / "results.json").read_text())
    assert results["eval_file"] == str(work / "heldout.tsv")
    assert results["train_examples"] == 72
    assert results["variants"]["duplicated"]["layers"] == 4
    for name in ("base", "duplicated", "tied"):
        for seed in (0, 1):
            metrics = json.loads((work / "runs" / f"{name}-seed{seed}" / "metrics.json").read_text())
            assert metrics["evaluated_on"].startswith("held-out 25% of") and metrics["train_examples"] == 72


def test_held_out_snli_pairs_are_written_as_jsonl_that_reads_back_unchanged(tmp_path):
    import importlib.util

    from helpers import REPO
    from minibert.tasks import make_task
    from minibert.support.task_files import ClassificationExample

    spec = importlib.util.spec_from_file_location("duplication_study", REPO / SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    examples = [ClassificationExample("A man \"sleeps\".", "Nobody sleeps.", "contradiction", "p1", 1),
                ClassificationExample("A man sleeps.", "Someone rests \u00e9.", "entailment", None, 2)]
    module.write_examples("snli", examples, tmp_path / "heldout.jsonl")
    back = make_task("snli").read(tmp_path / "heldout.jsonl")
    assert [(e.text_a, e.text_b, e.label, e.id) for e in back] == [(e.text_a, e.text_b, e.label, e.id)
                                                                  for e in examples]


# ----------------------------------------------------------------------------
# SQuAD 2.0 and the paper's ensemble of patterns
# ----------------------------------------------------------------------------


def write_toy_squad2(path, articles, seed):
    """A SQuAD 2.0 file of `articles` articles: "was the film good ?" answered
    by the sentiment word of a short review, and one unanswerable question each."""
    import random
    rng = random.Random(seed)
    data = []
    for a in range(articles):
        word = rng.choice(POSITIVE + NEGATIVE)
        context = f"the film was {word} and the plot was a story"
        qas = [{"id": f"{seed}-{a}-yes", "question": "was the film good ?", "is_impossible": False,
                "answers": [{"text": word, "answer_start": context.index(word)}]},
               {"id": f"{seed}-{a}-no", "question": "was it a show ?", "is_impossible": True, "answers": []}]
        data.append({"title": f"article {seed}-{a}", "paragraphs": [{"context": context, "qas": qas}]})
    path.write_text(json.dumps({"version": "v2.0", "data": data}), encoding="utf-8")
    return path


def test_squad_study_with_patterns_reports_squad_figures_and_the_pattern_ensemble(setup, capsys, tmp_path):
    root = setup[0]
    train = write_toy_squad2(tmp_path / "train.json", 16, seed=0)
    held_out = write_toy_squad2(tmp_path / "eval.json", 4, seed=1)
    work = tmp_path / "study"
    code, captured = run_script_in_process(
        capsys, SCRIPT, "--task", "squad", "--model", root / "base", "--train", train, "--eval", held_out,
        "--duplicate", "0", "--patterns", "0", "1", "2", "--seeds", "0", "1", "--epochs", "1", "--lr", "3e-3",
        "--batch-size", "4", "--max-seq-len", "32", "--device", "cpu", "--work", work, "--json", work / "r.json")
    assert code == 0, captured.err
    out = captured.out

    # pattern 0 is the duplicated variant itself; 1 and 2 are two more untied models
    for name, order in (("dup-1", [0, 1, 1, 2]), ("dup-2", [0, 1, 2, 2])):
        record = json.loads((work / "models" / name / "duplication.json").read_text())
        assert record["order"] == order and record["tied"] is False
        assert json.loads((work / "models" / name / "config.json").read_text()).get("layer_order") is None
    assert not (work / "models" / "dup-0").exists()
    assert sum(line.startswith("run ") for line in out.splitlines()) == 10          # 5 variants x 2 seeds

    results = json.loads((work / "r.json").read_text())
    assert results["metric"] == "f1" and results["patterns"] == ["0", "1", "2"]
    assert list(results["variants"]) == ["base", "duplicated", "tied", "dup-1", "dup-2"]
    assert results["figures"] == ["exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_f1", "best_f1",
                                  "best_f1_thresh"]
    for name, row in results["variants"].items():
        run = row["runs"]["0"]
        assert set(run["figures"]) == set(results["figures"]) and run["figures"]["f1"] == run["f1"]
        assert row["figures_mean"]["f1"] == pytest.approx(row["mean"])
        assert 0 <= row["figures_mean"]["NoAns_f1"] <= 100
    patterns = results["pattern_ensemble"]
    assert patterns["members"] == ["duplicated", "dup-1", "dup-2"] and patterns["patterns"] == ["0", "1", "2"]
    assert set(patterns["scores"]) == {"0", "1"} and patterns["figures_mean"]["f1"] == pytest.approx(patterns["mean"])
    best = max(results["variants"], key=lambda n: results["variants"][n]["mean"])
    comparison = results["comparisons"]["pattern_ensemble"]
    assert comparison["against"] == best
    assert comparison["difference"] == pytest.approx(patterns["mean"] - results["variants"][best]["mean"])
    assert comparison["difference_to_base_seed_ensemble"] == pytest.approx(
        patterns["mean"] - results["base_seed_ensemble"]["score"])
    assert "The paper's ensemble of 3 untied patterns (0; 1; 2)" in results["conclusion"]
    for row in ("duplicated (1)", "duplicated (2)", "ensemble of the 3 patterns", "mean over seeds"):
        assert any(line.startswith(row) for line in out.splitlines()), row


def test_squad_split_eval_is_refused_pointing_to_held_out_articles(setup, capsys, tmp_path):
    root = setup[0]
    train = write_toy_squad2(tmp_path / "train.json", 4, seed=0)
    code, captured = run_script_in_process(
        capsys, SCRIPT, "--task", "squad", "--model", root / "base", "--train", train, "--split-eval", "0.25",
        "--work", tmp_path / "study")
    assert code == 1 and "--split-eval: not for squad" in captured.err and "squad_articles.py" in captured.err


def test_an_albert_study_unties_the_shared_group_and_ties_by_repeating_it(setup, capsys, tmp_path):
    from tiny_models import save_tiny_model
    root, train, dev = setup
    save_tiny_model(tmp_path / "albert", model_type="albert", num_hidden_layers=2,
                    sentences=[" ".join(POSITIVE + NEGATIVE + FILLER)], with_pooler=False, with_pair_head=False)
    args = study_args(setup, tmp_path / "study", "--duplicate", "1")
    args[args.index("--model") + 1] = tmp_path / "albert"
    code, captured = run_script_in_process(capsys, SCRIPT, *args)
    assert code == 0, captured.err
    models = tmp_path / "study" / "models"
    untied = json.loads((models / "duplicated" / "config.json").read_text())
    tied = json.loads((models / "tied" / "config.json").read_text())
    assert (untied["model_type"], untied["num_hidden_layers"], untied["num_hidden_groups"]) == ("albert", 3, 3)
    assert (tied["model_type"], tied["num_hidden_layers"], tied["num_hidden_groups"]) == ("albert", 3, 1)
    results = json.loads((tmp_path / "study" / "results.json").read_text())
    assert {n: (r["layers"], r["distinct_layers"]) for n, r in results["variants"].items()} == \
        {"base": (2, 1), "duplicated": (3, 3), "tied": (3, 1)}


def test_a_deberta_study_is_refused_saying_why(capsys, tmp_path, setup):
    from test_duplication import tiny_deberta
    tiny_deberta(tmp_path / "deberta", "v3")
    args = study_args(setup, tmp_path / "study")
    args[args.index("--model") + 1] = tmp_path / "deberta"
    code, captured = run_script_in_process(capsys, SCRIPT, *args)
    assert code == 1 and "a DeBERTa; this study's tied ablation" in captured.err and "no layer_order" in captured.err
