"""minibert/runs/pretraining.py: train_mlm.py's run around the lesson. Here:
a run killed while it saves its model folder loses nothing, and the next
`--resume` ends with the model an uninterrupted run gives."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minibert.checkpoints import load_pretrained
from tiny_models import write_vocab

REPO = Path(__file__).resolve().parent.parent

# train_mlm.py, killed (SIGKILL) at one point of its final save_model_folder.
KILLED_SAVE = """
import os, runpy, signal, sys
from minibert.runs import pretraining
from minibert.support import folders
kill_at = sys.argv[1]
real_write_folder, real_replace = pretraining.write_folder, os.replace

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

    folders.os.replace = replace
    return real_write_folder(folder, write, **kwargs)

pretraining.write_folder = write_folder
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
# write_folder are tested on the function itself (tests/test_folders.py).
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
