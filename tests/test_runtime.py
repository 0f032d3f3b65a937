"""minibert/support/runtime.py's threads: the rule that picks torch's CPU
threads (the cores not already busy, shared among torchrun's local
processes), and what overrides it (--threads, then OMP_NUM_THREADS)."""

import pytest
import torch

from minibert.support import runtime
from minibert.support.runtime import choose_threads, threads_rule


@pytest.mark.parametrize("cores, load, processes, expected", [
    (2, 0.0, 1, 2),        # an idle machine: every core, as torch's own default
    (2, 0.4, 1, 2),        # a load under one half rounds to no busy core
    (2, 0.6, 1, 1),
    (2, 1.9, 1, 1),        # the user's measurement: 2 cores busy with other work
    (2, 5.0, 1, 1),        # more busy than cores: still one thread
    (16, 3.2, 1, 13),
    (16, 0.0, 4, 4),       # torchrun with 4 local processes: a quarter each
    (16, 3.0, 4, 3),
    (2, 0.0, 4, 1),        # more processes than cores: one each
    (8, -1.0, 1, 8),       # never more threads than cores
])
def test_the_rule_gives_the_cores_not_already_busy_shared_among_local_processes(cores, load, processes, expected):
    assert threads_rule(cores, load, processes) == expected


def test_the_flag_wins_over_omp_num_threads_which_wins_over_the_rule(monkeypatch):
    monkeypatch.setattr(runtime, "machine_cores", lambda: 2)
    monkeypatch.setattr(runtime, "busy_cores", lambda: 1.9)
    assert choose_threads(3, {"OMP_NUM_THREADS": "1"}) == (3, "--threads")
    assert choose_threads(None, {"OMP_NUM_THREADS": "2"}) == (2, "OMP_NUM_THREADS=2 in the environment")
    assert choose_threads(None, {}) == (1, "2 cores, 1.9 busy")
    for not_a_count in ("", "0", "two", "2,1", "-1"):            # what torch would not read as a count either
        assert choose_threads(None, {"OMP_NUM_THREADS": not_a_count}) == (1, "2 cores, 1.9 busy")
    monkeypatch.setattr(runtime, "machine_cores", lambda: 16)
    assert choose_threads(None, {"LOCAL_WORLD_SIZE": "4"}) == (3, "16 cores, 1.9 busy, shared by 4 processes")


def test_busy_cores_are_the_busy_share_of_every_cores_time_over_the_sample(monkeypatch):
    readings = iter([(1000, 4000), (1150, 4200)])            # (busy, total) ticks: 150 of 200 busy
    monkeypatch.setattr(runtime, "cpu_times", lambda: next(readings))
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 2)
    assert runtime.busy_cores(sample_seconds=0) == pytest.approx(1.5)
    monkeypatch.setattr(runtime, "cpu_times", lambda: None)  # no /proc/stat: the 1-minute load average
    monkeypatch.setattr(runtime.os, "getloadavg", lambda: (0.7, 1.0, 1.0))
    assert runtime.busy_cores(sample_seconds=0) == 0.7


def test_busy_cores_sees_a_job_running_now(monkeypatch):
    """A process spinning on one core is counted at once (the load average
    would take about a minute to show it)."""
    import subprocess
    import sys
    if runtime.cpu_times() is None:
        pytest.skip("no /proc/stat here")
    idle = runtime.busy_cores(sample_seconds=0.3)
    if idle > runtime.os.cpu_count() - 1:
        pytest.skip("no core is free here to see a new job on")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        import time
        time.sleep(0.3)
        assert runtime.busy_cores(sample_seconds=0.3) > idle + 0.5
    finally:
        spinner.kill()
        spinner.wait()


def test_use_threads_sets_torch_and_says_so_unless_quiet(capsys):
    """(Under torchrun the other processes' lines never show: cli.script_main
    silences every process but the main one, tests/test_cli.py.)"""
    before = torch.get_num_threads()
    try:
        assert runtime.use_threads(1) == 1 and torch.get_num_threads() == 1
        assert capsys.readouterr().out == "threads: 1 (--threads)\n"
        runtime.use_threads(1, quiet=True)
        assert capsys.readouterr().out == ""
    finally:
        torch.set_num_threads(before)
