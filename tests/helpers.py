"""Small helpers several test files share: running a script, one and two processes, encoding protobuf varints,
a local HTTP server, a fake clock."""

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
import types
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import torch

from minibert.support.cli import run

REPO = Path(__file__).resolve().parent.parent


def run_script(script, *args):
    """Run REPO/script in a new interpreter (about 2.5 s for the torch import)."""
    return subprocess.run([sys.executable, str(REPO / script), *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, timeout=120)


def run_script_in_process(capsys, script, *args):
    """The script's main through the same error handling (minibert.support.cli.run), in
    this interpreter. Returns (exit code, captured output)."""
    spec = importlib.util.spec_from_file_location(Path(script).stem + "_script", REPO / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as exit_info:
        run(module.main, [str(a) for a in args])
    return exit_info.value.code, capsys.readouterr()


# A script run that sends itself a signal (SIGKILL, or SIGINT as Ctrl-C does) just before one rename of
# write_folder's swap: 0, the old folder moving away; 1, the new one moving into place. Its renames start
# once the staging folder is complete, which write_folder marks by syncing it (fsync_folder): the renames
# of the files written inside the staging folder before that do not count.
KILLED_AT_RENAME = """
import os, runpy, signal, sys
from minibert.support import outputs
script, at, how = sys.argv[1], int(sys.argv[2]), getattr(signal, sys.argv[3])
real_fsync, real_replace, renames = outputs.fsync_folder, os.replace, []

def replace(source, target):
    renames.append(target)
    if len(renames) == at + 1:                   # once: the renames that put things right come after it
        os.kill(os.getpid(), how)
    real_replace(source, target)

def fsync_folder(folder):
    if outputs.LEFTOVER.fullmatch(os.path.basename(folder)):     # the staging folder, complete
        os.replace = replace
    real_fsync(folder)

outputs.fsync_folder = fsync_folder
sys.argv = [script, *sys.argv[4:]]
runpy.run_path(script, run_name="__main__")
"""


def run_killed_at_rename(script, args, at, signal_name="SIGKILL"):
    """REPO/script with `args`, sent `signal_name` before write_folder's rename number `at`."""
    return subprocess.run([sys.executable, "-c", KILLED_AT_RENAME, script, str(at), signal_name, *map(str, args)],
                          capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


# A script run that logs each os.replace its process makes, one JSON line [its torchrun RANK, the target]:
# every file minibert writes ends in one (support/files.atomic_write, write_folder's swap).
LOGGING_WRITES = """
import json, os, runpy, sys
log, script = sys.argv[1], sys.argv[2]
real_replace = os.replace

def replace(source, target, **kwargs):
    with open(log, "a", encoding="utf-8") as f:      # one short line per append: the processes' lines stay whole
        f.write(json.dumps([int(os.environ.get("RANK", "0")), os.fspath(target)]) + "\\n")
    return real_replace(source, target, **kwargs)

os.replace = replace
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


def one_and_two_process_runs(script, args, tmp_path):
    """Run REPO/script with `args` in one process, then under torchrun in two
    (gloo, one thread each), each writing --output tmp_path/one or /two with
    its checkpoint.pt and --json tmp_path/one.json or two.json ("{run}" in
    an argument: the run's name, "one" or "two"). Returns
    {"one": run, "two": run}, each with its `stdout`, `summary` (the --json),
    `weights` (the checkpoint's model) and `writes`: the (rank, path) of
    every file its processes wrote, in order."""
    wrapper = tmp_path / "logging_writes.py"
    wrapper.write_text(LOGGING_WRITES, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1",         # the wrapper, outside REPO, imports this checkout's minibert
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    commands = {"one": [sys.executable],
                "two": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]}
    runs = {}
    for name, command in commands.items():
        log = tmp_path / f"{name}-writes.jsonl"
        given = [str(arg).replace("{run}", name) for arg in args]
        done = subprocess.run([*command, str(wrapper), str(log), str(REPO / script), *given,
                               "--output", str(tmp_path / name), "--json", str(tmp_path / f"{name}.json")],
                              capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        writes = [tuple(json.loads(line)) for line in log.read_text(encoding="utf-8").splitlines()]
        runs[name] = types.SimpleNamespace(
            stdout=done.stdout, summary=json.loads((tmp_path / f"{name}.json").read_text(encoding="utf-8")),
            weights=torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)["model"], writes=writes)
    return runs


def one_and_two_process_weights(script, args, tmp_path):
    """The model weights of one_and_two_process_runs's two runs' checkpoints."""
    runs = one_and_two_process_runs(script, args, tmp_path)
    return runs["one"].weights, runs["two"].weights


def assert_the_main_process_alone_reports(run, json_path):
    """A torchrun run printed its "saved to" line once and wrote --json
    `json_path` once; every file it wrote, the main process (rank 0) wrote."""
    assert run.stdout.count("saved to") == 1, run.stdout
    assert [rank for rank, path in run.writes if path == str(json_path)] == [0], run.writes
    assert {rank for rank, _ in run.writes} == {0}, run.writes


def varint(n):
    """Protobuf's base-128 varint encoding of a non-negative integer."""
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def error_line(code, captured):
    """The `error:` line of a script that failed, after checking the form of
    its output: a usage error (exit 2) is argparse's usage line, then the
    error line; an error met while running (exit 1) is the error line alone."""
    lines = captured.err.strip().splitlines()
    assert code in (1, 2) and lines and lines[-1].startswith("error: "), (code, captured.err)
    if code == 2:
        assert lines[0].startswith("usage: "), captured.err
    else:
        assert len(lines) == 1, captured.err
    return lines[-1]


@contextlib.contextmanager
def local_server(state, handler):
    """Serve `handler` on 127.0.0.1 (a free port) in a thread; state.url is its address."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()



class FakeClock:
    """A clock for a time budget (training.BudgetClock) that moves `seconds` forward each time it is read, from
    `start`: a run's progress is then a function of how often it reads it, the same on every machine."""

    def __init__(self, seconds, start=0.0):
        self.seconds, self.now = seconds, start - seconds

    def __call__(self):
        self.now += self.seconds
        return self.now
