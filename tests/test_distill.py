"""distill.py, the command line of minibert/distillation.py, on tiny models
and tiny data: its four forms (distil, baseline, predict, evaluate), the
results it writes, the cache reuse, --resume, and its one-line errors."""

import json

import numpy as np
import pytest
import torch

from distill_helpers import TINY_STUDENT, make_distillation_data, one_thread
from helpers import (REPO, assert_the_main_process_alone_reports, error_line, one_and_two_process_runs,
                     run_script_in_process)
from minibert.lstm import BiLSTMClassifier
from minibert import distillation
from minibert.commands import distill as distill_command
from minibert.commands.distill import load_student
from minibert.support.cli import run
from minibert.lstm import StudentConfig
from minibert.support import MiniBertError
from minibert.tokenization import load_tokenizer

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


def load_script(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py") + "_script", REPO / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_distillation_data(tmp_path_factory.mktemp("distill"))


def cli_args(root, output, *extra):
    return ["--teacher", root / "teacher", "--task", "sst2", "--train", root / "train.tsv", "--eval",
            root / "dev.tsv", "--output", output, "--n-iter", "2", "--epochs", "2", "--pos-file", root / "pos.txt",
            "--cache-dir", root / "cache", *TINY_STUDENT, "--quiet", *extra]


@pytest.fixture(scope="module")
def distilled(setup, tmp_path_factory):
    """One distill.py run: (student folder, its --json results)."""
    out = tmp_path_factory.mktemp("distilled")
    script = load_script("distill.py")
    with pytest.raises(SystemExit) as exit_info:       # run_script_in_process, without a test's capsys
        run(script.main, [str(a) for a in cli_args(setup, out / "student", "--json", out / "run.json")])
    assert exit_info.value.code == 0
    return out / "student", json.loads((out / "run.json").read_text())


# ----------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------


def test_distill_writes_a_student_folder_and_the_results(distilled, setup):
    folder, results = distilled
    assert {"student.safetensors", "student.json", "vocab.txt"} <= {p.name for p in folder.iterdir()}
    record = json.loads((folder / "student.json").read_text())
    assert record["task"] == "sst2" and record["labels"] == ["0", "1"] and record["tokenization"] == "words"
    assert record["student"]["hidden_size"] == 8 and record["distilled"] is True
    assert record["metrics"]["accuracy"] == results["accuracy"] == max(e["accuracy"] for e in results["epochs_history"])
    assert results["parameters"] == BiLSTMClassifier(StudentConfig.from_dict(record["student"], "x")).num_parameters()
    for key in ("teacher_accuracy", "train_seconds", "teacher_parameters", "transfer_examples"):
        assert key in results
    assert results["transfer_examples"] > results["train_examples"] == 48
    assert results["settings"]["alpha"] == 0.0 and results["settings"]["n_iter"] == 2


def test_a_second_run_reuses_the_cached_teacher_logits(distilled, setup, tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(distillation, "teacher_logits", lambda *a, **k: calls.append(1))
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "again", "--epochs",
                                                                           "1", "--json", tmp_path / "r.json"))
    assert code == 0, captured.err
    assert calls == [] and json.loads((tmp_path / "r.json").read_text())["cache_hit"] is True


def test_predictions_have_finetune_formats(distilled, setup, tmp_path, capsys):
    folder, _ = distilled
    code, _ = run_script_in_process(capsys, "distill.py", "--student", folder, "--predict", setup / "dev.tsv",
                                    "--output", tmp_path / "student.jsonl", "--quiet")
    assert code == 0
    code, _ = run_script_in_process(capsys, "finetune.py", "--model", setup / "teacher", "--predict",
                                    setup / "dev.tsv", "--output", tmp_path / "teacher.jsonl", "--quiet")
    assert code == 0
    ours = [json.loads(line) for line in (tmp_path / "student.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in (tmp_path / "teacher.jsonl").read_text().splitlines()]
    assert len(ours) == len(theirs) == 24
    assert [set(line) for line in ours] == [set(line) for line in theirs] == [{"label", "probs"}] * 24
    assert all(len(line["probs"]) == 2 and abs(sum(line["probs"]) - 1) < 1e-4 for line in ours)
    assert all(line["label"] == str(int(np.argmax(line["probs"]))) for line in ours)


def test_evaluation_json_has_finetune_metric_names(distilled, setup, tmp_path, capsys):
    folder, results = distilled
    code, captured = run_script_in_process(capsys, "distill.py", "--student", folder, "--eval", setup / "dev.tsv",
                                           "--json", tmp_path / "student.json", "--quiet")
    assert code == 0 and "accuracy" in captured.out
    code, _ = run_script_in_process(capsys, "finetune.py", "--model", setup / "teacher", "--eval",
                                    setup / "dev.tsv", "--json", tmp_path / "teacher.json", "--quiet")
    assert code == 0, _.err
    ours, theirs = (json.loads((tmp_path / name).read_text()) for name in ("student.json", "teacher.json"))
    assert set(ours) == set(theirs) == {"task", "evaluated_on", "models", "bf16", "accuracy"}
    assert ours["accuracy"] == pytest.approx(results["accuracy"])     # the best epoch's, read back


def test_no_teacher_trains_the_plain_bilstm_on_gold_labels(setup, tmp_path, capsys):
    code, captured = run_script_in_process(
        capsys, "distill.py", "--task", "sst2", "--train", setup / "train.tsv", "--eval", setup / "dev.tsv",
        "--output", tmp_path / "plain", "--no-teacher", "--epochs", "2", "--cache-dir", tmp_path / "cache",
        *TINY_STUDENT, "--json", tmp_path / "plain.json", "--quiet")
    assert code == 0, captured.err
    results = json.loads((tmp_path / "plain.json").read_text())
    assert results["distilled"] is False and results["transfer_examples"] == results["train_examples"] == 48
    assert results["settings"]["alpha"] == 1.0 and "teacher_accuracy" not in results
    logged = [record for record in results["history"] if "gold_loss" in record]
    assert logged and not any("distill_loss" in record for record in logged)
    assert not (tmp_path / "cache").exists()                          # no teacher, nothing cached


def test_paper_config_sst2_is_the_papers_student_and_explicit_flags_win():
    script = distill_command
    settings = script.settings_from(script.parser.parse_args(["--paper-config", "sst2"]))
    assert (settings.embeddings_mode, settings.embedding_dim, settings.hidden_size, settings.fc_size,
            settings.dropout, settings.batch_size) == ("multichannel", 300, 150, 200, 0.1, 50)
    settings = script.settings_from(script.parser.parse_args(["--paper-config", "sst2", "--hidden-size", "8"]))
    assert settings.hidden_size == 8 and settings.embeddings_mode == "multichannel"
    settings = script.settings_from(script.parser.parse_args([]))
    assert (settings.embeddings_mode, settings.distill_term, settings.unlabelled_target, settings.pair_augment) == (
        None, "mse", "none", "consistent")                 # today's defaults (rand once resolved)
    assert script.settings_from(script.parser.parse_args(["--freeze-embeddings"])).embeddings_mode == "static"
    with pytest.raises(MiniBertError, match="--freeze-embeddings is --embeddings-mode static, not multichannel"):
        script.settings_from(script.parser.parse_args(["--paper-config", "sst2", "--freeze-embeddings"]))


def test_the_papers_choices_train_a_multichannel_student_and_print_the_papers_count(setup, tmp_path, capsys):
    code, captured = run_script_in_process(
        capsys, "distill.py", *cli_args(setup, tmp_path / "paper", "--paper-config", "sst2", "--alpha", "0.5",
                                        "--distill-term", "squared-l2", "--unlabelled-target", "teacher",
                                        "--json", tmp_path / "paper.json"))
    assert code == 0, captured.err
    results = json.loads((tmp_path / "paper.json").read_text())
    assert results["settings"]["embeddings_mode"] == "multichannel" and results["paper_parameters"] == 963_002
    assert results["settings"]["distill_term"] == "squared-l2" and results["settings"]["unlabelled_target"] == "teacher"
    lstm = 2 * (4 * 8 * 32 + 4 * 8 * 8 + 2 * 4 * 8)       # TINY_STUDENT's sizes win: 2 x 16-d channels, H 8
    assert results["parameters_without_embeddings"] == lstm + (16 * 8 + 8) + (8 * 2 + 2)
    assert "963,002 (0.96M) without embeddings" in captured.out
    model, _, _ = load_student(tmp_path / "paper")
    assert model.config.embeddings_mode == "multichannel" and not model.static_embedding.weight.requires_grad


@pytest.mark.parametrize("extra", [[], ["--no-teacher"]])
def test_embeddings_teacher_reads_the_teachers_pieces_and_starts_from_its_embeddings(setup, tmp_path, capsys, extra):
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--embeddings",
                                                                           "teacher", "--epochs", "1", *extra))
    assert code == 0, captured.err
    record = json.loads((tmp_path / "s" / "student.json").read_text())
    assert record["tokenization"] == "teacher" and record["student"]["embedding_dim"] == 16
    assert record["embeddings_start"] == "the teacher's word-piece embeddings (32-d, randomly projected to 16-d)"
    assert record["distilled"] is not bool(extra)
    model, tokenizer, _ = load_student(tmp_path / "s")
    assert tokenizer.vocab_size == load_tokenizer(setup / "teacher").vocab_size == model.config.vocab_size
    code, _ = run_script_in_process(capsys, "distill.py", "--student", tmp_path / "s", "--predict",
                                    setup / "dev.tsv", "--output", tmp_path / "p.jsonl", "--quiet")
    assert code == 0 and len((tmp_path / "p.jsonl").read_text().splitlines()) == 24


def test_a_killed_and_resumed_run_ends_with_the_same_weights(setup, tmp_path, capsys):
    def distil(name, *extra):
        code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / name, *extra))
        assert code == 0, captured.err
    distil("straight", "--keep-checkpoint")                           # the final weights, to compare
    distil("resumed", "--max-minutes", "1e-9")                        # stops after its first step
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["step"] == 1
    distil("resumed", "--resume", "--keep-checkpoint")
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] > 1
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_two_gloo_processes_distil_like_one_process_and_report_once(setup, tmp_path):
    """distill.py under torchrun: without dropout, two processes with half
    the batch each make one process's update; the main process alone makes
    the transfer set (its cache), prints and writes."""
    args = ["--teacher", setup / "teacher", "--task", "sst2", "--train", setup / "train.tsv", "--eval",
            setup / "dev.tsv", "--n-iter", "2", "--epochs", "2", "--pos-file", setup / "pos.txt", "--cache-dir",
            tmp_path / "{run}-cache", *TINY_STUDENT, "--dropout", "0", "--device", "cpu", "--quiet", "--keep-checkpoint"]
    runs = one_and_two_process_runs("distill.py", args, tmp_path)
    a, b = runs["one"].weights, runs["two"].weights
    assert a.keys() == b.keys()
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-6, name
    assert_the_main_process_alone_reports(runs["two"], tmp_path / "two.json")     # its own cache included
    assert (tmp_path / "two-cache").is_dir()


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r, t: ["--teacher", r / "ner", "--train", r / "train.tsv", "--output", t / "o"],
     "a conll2003 model; distillation needs a sentence classifier"),
    (lambda r, t: ["--teacher", r / "base", "--train", r / "train.tsv", "--output", t / "o"],
     "not a finetune.py classifier folder"),
    (lambda r, t: ["--teacher", r / "missing", "--train", r / "train.tsv", "--output", t / "o"], "no such folder"),
    (lambda r, t: ["--teacher", r / "teacher", "--task", "snli", "--train", r / "train.tsv", "--output", t / "o"],
     "--task snli: the teacher"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "nope.tsv", "--output", t / "o"], "nope.tsv"),
    (lambda r, t: ["--task", "sst2", "--train", r / "train.tsv", "--output", t / "o"], "give --teacher DIR"),
    (lambda r, t: ["--task", "sst2", "--train", r / "train.tsv", "--output", t / "o", "--no-teacher", "--alpha",
                   "0.5"], "gold labels only"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--pos-file",
                   r / "nope.txt"], "--pos-file"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--embeddings",
                   r / "vectors.txt"], "expected random, teacher or a word-vectors file"),
    (lambda r, t: ["--teacher", r / "teacher", "--no-teacher", "--task", "sst2", "--train", r / "train.tsv",
                   "--output", t / "o"], "would only serve --embeddings teacher"),
    (lambda r, t: ["--student", r / "teacher", "--eval", r / "dev.tsv"], "not a distill.py student folder"),
    (lambda r, t: ["--student", r / "teacher", "--eval", r / "dev.tsv", "--predict", r / "dev.tsv"], "give one of"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--alpha", "2"],
     "--alpha"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--seed",
                   str(2**64)], "--seed: expected an integer in [0, 9223372036854775807]"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "train.tsv"],
     "train.tsv is a file; expected a folder"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "train.tsv" / "o"],
     "is a file, not a folder"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", "/proc/minibert-o"],
     "cannot write in /proc"),
    (lambda r, t: ["--student", r / "teacher", "--predict", r / "dev.tsv", "--output", t], "is a folder"),
    (lambda r, t: ["--student", r / "teacher", "--predict", r / "dev.tsv", "--output", r / "dev.tsv" / "p"],
     "is a file, not a folder"),
    (lambda r, t: ["--student", r / "teacher", "--predict", r / "dev.tsv", "--output", "/proc/p.jsonl"],
     "cannot write in /proc"),
])
def test_bad_input_is_a_one_line_error(setup, tmp_path, capsys, make_args, fragment):
    """A usage error (flags that do not go together, a flag's invalid value)
    prints the usage line and exits with 2; a bad file is one line, exit 1."""
    code, captured = run_script_in_process(capsys, "distill.py", *make_args(setup, tmp_path), "--cache-dir",
                                           tmp_path / "cache", "--quiet")
    lines = captured.err.strip().splitlines()
    assert lines[-1].startswith("error:") and fragment.lower() in lines[-1].lower(), captured.err
    if code == 2:
        assert lines[0].startswith("usage: ") and fragment in USAGE_ERRORS, captured.err
    else:
        assert code == 1 and len(lines) == 1 and fragment not in USAGE_ERRORS, captured.err


USAGE_ERRORS = {"give --teacher DIR", "would only serve --embeddings teacher", "give one of", "--alpha",
                "--seed: expected an integer in [0, 9223372036854775807]", "train.tsv is a file; expected a folder",
                "is a file, not a folder", "cannot write in /proc", "is a folder"}


# ----------------------------------------------------------------------------
# No run writes over a model or its own input; --resume refuses changed flags
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "teacher"],
     "is the --teacher"),
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "base"],
     "holds a pretrained model"),
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "ner"],
     "holds a fine-tuned model"),
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "ner" / "student"],
     "lies inside the model folder"),
    (lambda r, d: ["--student", d, "--predict", r / "dev.tsv", "--output", d / "student.json"],
     "lies inside the --student folder"),
    (lambda r, d: ["--student", d, "--predict", r / "dev.tsv", "--output", r / "dev.tsv"], "is the --predict"),
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "out", "--cache-dir",
                   r / "teacher" / "cache"], "--cache-dir"),
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "out", "--cache-dir",
                   d], "--cache-dir"),
    (lambda r, d: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", r / "out", "--cache-dir",
                   r / "base"], "--cache-dir"),
])
def test_no_output_may_write_over_a_model_or_an_input(distilled, setup, tmp_path, capsys, make_args, fragment):
    student, _ = distilled
    watched = [setup / "teacher" / "vocab.txt", setup / "teacher" / "model.safetensors", setup / "dev.tsv",
               setup / "base" / "config.json", student / "student.json"]
    before = [p.read_bytes() for p in watched]
    listed = {folder: sorted(p.name for p in folder.iterdir())
              for folder in (setup / "teacher", setup / "base", student)}
    code, captured = run_script_in_process(capsys, "distill.py", "--cache-dir", tmp_path / "cache",
                                           *make_args(setup, student), "--quiet")        # theirs wins
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and fragment in lines[0], captured.err
    assert [p.read_bytes() for p in watched] == before
    assert {folder: sorted(p.name for p in folder.iterdir()) for folder in listed} == listed


def bf16_lstm_runs_here():
    from minibert.support.runtime import check_bf16_lstm
    try:
        check_bf16_lstm("cpu")
        return True
    except MiniBertError:
        return False


def test_resume_with_a_changed_setting_names_the_flag_and_both_values(setup, tmp_path, capsys):
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--max-minutes",
                                                                           "1e-9"))
    assert code == 0, captured.err                   # stopped after its first step, with a checkpoint
    changed = [(["--optimizer", "adam"], "--optimizer 'adadelta', this run has --optimizer 'adam'"),
               (["--alpha", "0.5"], "--alpha 0.0, this run has --alpha 0.5"),
               (["--lr", "0.5"], "--lr 1.0, this run has --lr 0.5"),
               *([(["--bf16"], "--bf16 False, this run has --bf16 True")] if bf16_lstm_runs_here() else []),
               (["--embeddings-mode", "static"], "--embeddings-mode 'rand', this run has --embeddings-mode 'static'"),
               (["--freeze-embeddings"], "--embeddings-mode 'rand', this run has --embeddings-mode 'static'"),
               (["--teacher", setup / "other-teacher"], "--teacher"),
               (["--eval", tmp_path / "other-dev.tsv"], f"--eval '{setup / 'dev.tsv'} (")]
    (tmp_path / "other-dev.tsv").write_text("\n".join((setup / "dev.tsv").read_text().splitlines()[:12]) + "\n")
    from distill_helpers import make_teacher
    make_teacher(setup / "other-teacher", setup / "base", "sst2", seed=1)
    for extra, message in changed:
        code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--resume"),
                                               *extra)
        lines = captured.err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and message in lines[0], (extra, captured.err)


def test_no_teacher_on_a_file_without_gold_labels_is_refused(setup, tmp_path, capsys):
    unlabelled = tmp_path / "test.tsv"
    unlabelled.write_text("index\tsentence\n0\ta good film\n1\tan awful film\n")
    code, captured = run_script_in_process(capsys, "distill.py", "--task", "sst2", "--no-teacher", "--train",
                                           unlabelled, "--output", tmp_path / "s", "--quiet")
    lines = captured.err.strip().splitlines()
    assert code == 1 and len(lines) == 1 and "not every example has its gold label" in lines[0], captured.err
    assert not (tmp_path / "s").exists()


def test_resume_before_the_first_checkpoint_starts_from_step_0(setup, tmp_path, capsys):
    """A run killed while writing its first checkpoint.pt leaves student.json
    and no checkpoint: --resume starts again rather than refusing both ways."""
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--epochs", "1",
                                                                           "--keep-checkpoint"))
    assert code == 0, captured.err
    (tmp_path / "s" / "checkpoint.pt").unlink()
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--epochs", "1"))
    assert code == 1 and "already holds a distilled student" in captured.err
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--epochs", "1",
                                                                           "--resume"))
    assert code == 0 and "holds no checkpoint.pt (the run stopped before its first one" in captured.out, captured.err


def test_a_finished_run_removes_its_checkpoint_unless_keep_checkpoint(setup, tmp_path, capsys):
    for name, extra in (("removed", []), ("kept", ["--keep-checkpoint"])):
        code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / name, *extra))
        assert code == 0, captured.err
        assert (tmp_path / name / "student.safetensors").is_file()
    assert not (tmp_path / "removed" / "checkpoint.pt").exists()
    assert torch.load(tmp_path / "kept" / "checkpoint.pt", weights_only=True)["step"] > 1


@pytest.mark.skipif(not bf16_lstm_runs_here(), reason="this CPU cannot run an LSTM in bfloat16 (no AVX512-BF16 "
                                                      "or AMX); the next test checks the one line that says so")
def test_bf16_trains_under_autocast_and_writes_the_student_folder(setup, tmp_path, capsys):
    def distil(name, *extra):
        code, captured = run_script_in_process(capsys, "distill.py", *cli_args(
            setup, tmp_path / name, "--cache-dir", tmp_path / "cache", "--json", tmp_path / f"{name}.json", *extra))
        assert code == 0, captured.err
        return captured, json.loads((tmp_path / f"{name}.json").read_text())
    distil("float32")
    captured, results = distil("s", "--bf16")
    assert results["cache_hit"] is False        # the teacher's bf16 logits are not the float32 ones of the cache
    record = json.loads((tmp_path / "s" / "student.json").read_text())
    assert record["settings"]["bf16"] is True and 0 <= record["metrics"]["accuracy"] <= 100
    model, _, _ = load_student(tmp_path / "s")
    assert all(p.dtype == torch.float32 for p in model.parameters())        # weights stay float32
    lines = [line for line in captured.out.splitlines() if line.startswith("step ")]
    assert lines and all(" dev.tsv accuracy " in line for line in lines), captured.out


def test_a_run_killed_after_an_epoch_and_resumed_numbers_its_best_epoch_over_the_whole_run(
        setup, tmp_path, capsys, monkeypatch):
    from minibert.commands import trainer
    learns = ["--epochs", "3", "--optimizer", "adam", "--lr", "0.02", "--alpha", "1"]    # its third epoch is best
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "straight", *learns))
    assert code == 0, captured.err
    straight = json.loads((tmp_path / "straight" / "student.json").read_text())
    saved = trainer.save_checkpoint

    def killed_after_the_first_epoch(*args, **kwargs):
        saved(*args, **kwargs)
        raise KeyboardInterrupt                          # the run dies here, its first epoch saved
    monkeypatch.setattr(trainer, "save_checkpoint", killed_after_the_first_epoch)
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "resumed", *learns))
    assert code == 130 and json.loads((tmp_path / "resumed" / "student.json").read_text())["best_epoch"] == 1
    monkeypatch.undo()
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "resumed", *learns,
                                                                                   "--resume"))
    assert code == 0, captured.err
    resumed = json.loads((tmp_path / "resumed" / "student.json").read_text())
    assert straight["best_epoch"] == 3 and resumed["best_epoch"] == 3, (straight["metrics"], resumed["metrics"])
    assert resumed["metrics"] == straight["metrics"]


def test_prose_given_as_pos_file_stops_the_run_with_one_line(setup, tmp_path, capsys):
    prose = tmp_path / "story.txt"
    prose.write_text("It was the best of times,\nit was the worst of times.\n")
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--pos-file", prose,
                                                                           "--cache-dir", tmp_path / "cache"))
    assert code == 1 and captured.err.count("\n") == 1, captured.err
    assert f"{prose}: line 1: 'was' in the tag column" in captured.err and "prose?" in captured.err


def test_bf16_where_the_cpu_cannot_run_an_lstm_in_it_is_one_line_before_any_work(setup, tmp_path, capsys,
                                                                                 monkeypatch):
    import minibert.support.runtime as runtime
    real = torch.nn.LSTM.forward

    def without_bf16(self, *args, **kwargs):     # as oneDNN answers on a CPU without AVX512-BF16
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError("could not create a primitive descriptor for the LSTM forward propagation primitive")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(runtime.torch.nn.LSTM, "forward", without_bf16)
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--bf16"))
    assert code == 1 and error_line(code, captured) == ("error: --bf16: this CPU cannot run an LSTM in bfloat16 (a "
                                                        "CPU needs AVX512-BF16 or AMX for it); run without --bf16")
    assert not (tmp_path / "s").exists()


def test_the_default_lexicon_is_conll_beside_the_repository():
    # The distill command, not the lessons or support, knows the data folder next to a checkout.
    assert distill_command.DEFAULT_POS_FILE == REPO.parent / "shared" / "data" / "conll2003" / "eng.train"
    from minibert.support import caches, student_files
    assert not hasattr(student_files, "DEFAULT_POS_FILE") and not hasattr(caches, "DEFAULT_POS_FILE")



def test_a_student_given_as_teacher_and_a_teacher_given_as_student_are_named_for_what_they_are(distilled, setup,
                                                                                                 tmp_path, capsys):
    student, _ = distilled
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "out")[2:],
                                           "--teacher", student)
    line = error_line(code, captured)
    assert code == 1 and f"--teacher {student}: a distilled student (distill.py's BiLSTM, student.json)" in line
    assert "a teacher is a finetune.py classifier folder" in line
    code, captured = run_script_in_process(capsys, "distill.py", "--student", setup / "teacher",
                                           "--eval", setup / "dev.tsv")
    line = error_line(code, captured)
    assert code == 1 and "a fine-tuned sst2 model (finetune.py's, task.json), not a distill.py student" in line
