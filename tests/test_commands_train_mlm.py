"""minibert/commands/train_mlm.py: train_mlm.py's run around the lesson. Here:
a run killed while it saves its model folder loses nothing, and the next
`--resume` ends with the model an uninterrupted run gives; a run on a time
budget (--budget-minutes, on a fake clock) ends with its learning rate at 0
when the budget does, and a resumed one continues from the budget its
checkpoint recorded; the schedule's flags that do not go together."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minibert.checkpoints import load_pretrained
from minibert.model import BertConfig
from minibert.commands.train_mlm import pretrain
from minibert.commands.trainer import load_checkpoint
from minibert.tokenization import wordpiece_tokenizer
from minibert.training import SCHEDULES
from helpers import FakeClock, error_line, run_script_in_process
from tiny_models import write_vocab

REPO = Path(__file__).resolve().parent.parent

# train_mlm.py, killed (SIGKILL) at one point of its final save_model_folder.
KILLED_SAVE = """
import os, runpy, signal, sys
from minibert.commands import train_mlm
from minibert.support import outputs
kill_at = sys.argv[1]
real_write_folder, real_replace = train_mlm.write_folder, os.replace

def write_folder(folder, write_into, **kwargs):
    renamed = []

    def replace(source, target):
        if len(renamed) == {"before the old folder moves": 0, "between the two renames": 1}.get(kill_at):
            os.kill(os.getpid(), signal.SIGKILL)
        renamed.append(target)
        real_replace(source, target)

    def write(staging):
        write_into(staging)
        if kill_at == "while writing":
            os.kill(os.getpid(), signal.SIGKILL)

    outputs.os.replace = replace
    return real_write_folder(folder, write, **kwargs)

train_mlm.write_folder = write_folder
sys.argv = ["train_mlm.py", *sys.argv[2:]]
runpy.run_path("train_mlm.py", run_name="__main__")
"""


def train_mlm(data, output, steps, *extra, kill_at=None):
    args = ["--corpus", str(data / "corpus.txt"), "--vocab", str(data / "vocab.txt"), "--layers", "1",
            "--hidden", "16", "--heads", "2", "--intermediate", "32", "--dropout", "0", "--steps", str(steps),
            "--batch-size", "4", "--max-seq-len", "16", "--warmup", "1", "--seed", "3", "--device", "cpu",
            "--quiet", "--eval-every", "0", "--checkpoint-every", "0", "--cache-dir", str(data / "cache"),
            "--output", str(output), *extra]
    command = [sys.executable, str(REPO / "train_mlm.py"), *args] if kill_at is None else \
        [sys.executable, "-c", KILLED_SAVE, kill_at, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


def weights(folder):
    return load_pretrained(folder).state_dict()


@pytest.fixture(scope="module")
def data_and_straight_run(tmp_path_factory):
    """The corpus and vocabulary, and the model of an uninterrupted 4-step run."""
    folder = tmp_path_factory.mktemp("data")
    write_vocab(folder, ["the cat sat on the mat ."])
    (folder / "corpus.txt").write_text("the cat sat on the mat .\n\n" * 40)
    straight = train_mlm(folder, folder / "straight", 4)
    assert straight.returncode == 0, straight.stderr
    return folder, weights(folder / "straight")


# The moment where the folder itself is missing; the other kill points of
# write_folder are tested on the function itself (tests/test_outputs.py).
@pytest.mark.parametrize("kill_at", ["between the two renames"])
def test_a_run_killed_while_saving_its_model_keeps_the_old_one_and_resumes_to_the_same_end(
        data_and_straight_run, tmp_path, kill_at):
    data, expected = data_and_straight_run
    first = train_mlm(data, tmp_path / "run", 4, "--max-minutes", "0.0001")   # stops after one step
    assert first.returncode == 0, first.stderr
    old = weights(tmp_path / "run")
    killed = train_mlm(data, tmp_path / "run", 4, "--resume", "--keep-checkpoint", kill_at=kill_at)
    assert killed.returncode == -9, killed.stderr
    assert weights(tmp_path / "run").keys() == old.keys() or not (tmp_path / "run").exists()
    resumed = train_mlm(data, tmp_path / "run", 4, "--resume")      # recovers the folder first
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no leftovers (.run.PID.HEX.tmp/.old)
    new = weights(tmp_path / "run")
    assert any(not torch.equal(old[name], new[name]) for name in old)
    for name in expected:
        assert torch.equal(new[name], expected[name]), name


# ----------------------------------------------------------------------------
# A time budget
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("budget")
    write_vocab(folder, ["the cat sat on the mat ."])
    (folder / "corpus.txt").write_text("the cat sat on the mat .\n\n" * 40)
    return folder, wordpiece_tokenizer(folder / "vocab.txt", do_lower_case=True)


def pretrain_on_budget(data, tokenizer, output, clock, **settings):
    """1 minute of budget; FakeClock(6) makes each step take 6 s of it: 10 steps."""
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return pretrain([data / "corpus.txt"], output, config, tokenizer, steps=None, budget_minutes=1.0,
                    warmup_fraction=0.2, batch_size=4, max_seq_len=16, seed=3, eval_every=0, checkpoint_every=0,
                    cache_dir=data / "cache", progress=False, device="cpu", clock=clock, **settings)


def test_a_run_on_a_budget_ends_when_it_is_spent_with_the_learning_rate_at_zero(corpus_and_tokenizer, tmp_path):
    data, tokenizer = corpus_and_tokenizer
    summary = pretrain_on_budget(data, tokenizer, tmp_path / "run", FakeClock(6))
    assert summary["finished"] and summary["end_step"] == 10 and summary["budget_seconds_used"] == 60
    assert summary["history"][-1]["step"] == 10 and summary["history"][-1]["lr"] == 0.0
    assert summary["run_config"]["flags"]["--budget-minutes"] == 1.0 and summary["run_config"]["total_steps"] is None
    assert (tmp_path / "run" / "model.safetensors").is_file()
    assert not (tmp_path / "run" / "checkpoint.pt").exists()      # finished: nothing left to resume


def test_a_stopped_run_resumes_its_budget_from_the_time_its_checkpoint_recorded(corpus_and_tokenizer, tmp_path):
    data, tokenizer = corpus_and_tokenizer
    pretrain_on_budget(data, tokenizer, tmp_path / "straight", FakeClock(6), keep_checkpoint=True)
    first = pretrain_on_budget(data, tokenizer, tmp_path / "run", FakeClock(6), max_minutes=0.0)
    assert first["end_step"] == 1 and not first["finished"]
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["budget_seconds_used"] == 6
    # Resumed on a clock that reads an hour later: the schedule goes on from 6 s of the 60, so on this fake
    # clock (each step 6 s in both runs) every step has the uninterrupted run's rate and the weights agree.
    second = pretrain_on_budget(data, tokenizer, tmp_path / "run", FakeClock(6, start=3600), resume=True,
                                keep_checkpoint=True)
    assert second["start_step"] == 1 and second["end_step"] == 10 and second["history"][-1]["lr"] == 0.0
    straight = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert straight["budget_seconds_used"] == resumed["budget_seconds_used"] == 60
    for name in straight["model"]:
        assert torch.equal(straight["model"][name], resumed["model"][name]), name


def test_train_mlm_names_its_schedules_as_the_lesson_does():
    from minibert.commands import train_mlm as train_mlm_command
    assert train_mlm_command.SCHEDULE_NAMES == tuple(SCHEDULES)


def test_train_mlm_on_a_budget_of_the_real_clock_stops_with_the_learning_rate_at_zero(corpus_and_tokenizer,
                                                                                      tmp_path):
    data, _ = corpus_and_tokenizer
    args = ["--corpus", data / "corpus.txt", "--vocab", data / "vocab.txt", "--layers", "1", "--hidden", "16",
            "--heads", "2", "--intermediate", "32", "--batch-size", "4", "--max-seq-len", "16", "--device", "cpu",
            "--quiet", "--eval-every", "0", "--cache-dir", data / "cache", "--budget-minutes", "0.01",
            "--schedule", "one-cycle", "--output", tmp_path / "run", "--json", tmp_path / "summary.json"]
    done = subprocess.run([sys.executable, str(REPO / "train_mlm.py"), *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["finished"] and summary["budget_seconds_used"] >= 0.6 and summary["history"][-1]["lr"] == 0.0
    assert "the budget of 0.01 minutes is spent at step" in done.stdout + done.stderr


@pytest.mark.parametrize("flags, message", [
    (["--budget-minutes", "5", "--steps", "100"],
     "argument --steps: a --budget-minutes run ends when its budget does; give --steps 100 or --budget-minutes 5, "
     "not both"),
    (["--budget-minutes", "5", "--warmup", "10"],
     "argument --warmup: counts steps; a --budget-minutes run warms up over --warmup-fraction of its budget"),
    (["--warmup-fraction", "0.1"],
     "argument --warmup-fraction: a fraction of --budget-minutes; a run of --steps warms up over --warmup steps"),
    (["--budget-minutes", "5", "--warmup-fraction", "1"],
     "argument --warmup-fraction: expected a probability in [0, 1), got 1"),
    (["--budget-minutes", "0"], "argument --budget-minutes: expected a number > 0, got 0"),
    (["--budget-minutes", "5", "--schedule", "one-cycle", "--warmup-fraction", "0.1"],
     "argument --warmup-fraction: --schedule one-cycle has its own rise; warm-up is for --schedule linear"),
    (["--schedule", "triangle", "--warmup", "10"],
     "argument --warmup: --schedule triangle has its own rise; warm-up is for --schedule linear"),
])
def test_schedule_flags_that_do_not_go_together_are_one_line_naming_the_flag(tmp_path, capsys, flags, message):
    code, captured = run_script_in_process(capsys, "train_mlm.py", "--corpus", tmp_path / "corpus.txt",
                                           "--output", tmp_path / "out", *flags)
    assert code == 2 and error_line(code, captured).startswith(f"error: {message}")


def test_a_warmup_as_long_as_the_run_is_a_one_line_warning(tmp_path, capsys):
    # the corpus does not exist: the flags are read, the warning said, then the run stops on its first input
    code, captured = run_script_in_process(capsys, "train_mlm.py", "--corpus", tmp_path / "corpus.txt",
                                           "--output", tmp_path / "out", "--steps", "10", "--warmup", "1000")
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --warmup 1000 is not below --steps 10: the learning rate never leaves its warm-up "
                        "(it peaks at step 1000, after the run)"]


def test_a_run_killed_while_carrying_its_checkpoint_over_is_recovered_before_the_output_check(
        data_and_straight_run, tmp_path):
    import shutil
    data, expected = data_and_straight_run
    first = train_mlm(data, tmp_path / "run", 4, "--max-minutes", "0.0001")   # stops after one step
    assert first.returncode == 0, first.stderr
    # What a kill inside carry_over leaves: the new model at --output, the checkpoint still in the old
    # folder renamed away, whose process is gone.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    old = tmp_path / f".run.{int(dead.stdout)}.0a0b.old"
    shutil.copytree(tmp_path / "run", old)
    (tmp_path / "run" / "checkpoint.pt").unlink()
    resumed = train_mlm(data, tmp_path / "run", 4, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "starting from step 0" not in resumed.stdout                      # it found the checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    new = weights(tmp_path / "run")
    assert all(torch.equal(new[name], expected[name]) for name in expected)
