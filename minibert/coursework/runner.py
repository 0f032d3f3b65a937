"""The grading child: runs exercise tests on one tree and reports what it saw.

The grader (check.py) starts this file as a script, `python -I -B runner.py
SPEC`, never as part of the package: `-I` keeps PYTHONPATH, the user's
site-packages and the script's folder off sys.path, so nothing in the graded
tree runs before the guard below is in place. It imports only the standard
library, pytest, numpy and torch before the graded package.

It reports, as JSON lines on the file descriptor the grader gave it:

    {"phase": "imported"}                       the graded modules imported
    {"begin": NODEID, "exercise": NAME}         a test starts
    {"test": NODEID, "outcome": ..., "message": ..., "calls": [...]}
    {"end_to_end": NAME, "data": ...}           a check's raw outputs
    {"phase": "done"}

It decides nothing. "calls" are digests of what each call of the
exercise's own function returned, and end-to-end checks return raw outputs
(hidden states, token lists, predictions): the grader compares them with
the same numbers from the instructor's checkout, in its own process. So a
submission that patches torch.allclose, pytest or this file's code at
import still has to produce the instructor's numbers to score.

The guard (a sys.addaudithook hook, which no Python code can remove) keeps
the graded code from reading the instructor's checkout, the data's hidden
labels or other processes' /proc entries, from writing outside its scratch
folder, and from starting processes, sending signals, loading libraries
through ctypes or opening sockets. It is one layer: the grader also copies
only the submission's .py files and scores in its own process.
"""

import json
import math
import os
import sys

SPEC = json.loads(sys.argv[1])
CHANNEL = os.fdopen(SPEC["fd"], "w", buffering=1, encoding="utf-8")


def send(message):
    CHANNEL.write(json.dumps(message) + "\n")


# ---- sys.path: the graded tree first, no other minibert anywhere -----------

TREE = SPEC["tree"]


def holds_another_minibert(entry):
    folder = os.path.abspath(entry or ".")
    return folder != TREE and os.path.isdir(os.path.join(folder, "minibert"))


sys.path[:] = [TREE, os.path.join(TREE, "tests")] + [p for p in sys.path if p and not holds_another_minibert(p)]
# An editable install (pip install -e .) maps `minibert` to the instructor's
# checkout through a finder on sys.meta_path: drop every such finder.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in f"{type(f).__module__}.{type(f).__name__}".lower()
                    and "editable" not in repr(f).lower()]
for name in [n for n in sys.modules if n == "minibert" or n.startswith("minibert.")]:
    del sys.modules[name]
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"   # no plugin from site-packages' entry points
os.environ["TMPDIR"] = SPEC["tmp"]

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(SPEC.get("threads", 1))

# ---- the guard -------------------------------------------------------------

DENIED = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
          "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function",
          "ctypes.cdata", "socket.connect", "socket.bind", "socket.sendto", "pty.spawn", "os.startfile")
CHANGES = ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.symlink", "os.link", "os.chmod", "os.chown",
           "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
# The reference implementations a submission must not hand in as its own.
REFERENCE_PACKAGES = ("transformers", "sentence_transformers", "tensorflow", "keras", "jax", "flax")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class GraderRefusal(PermissionError):
    """What the guard raises inside the graded code."""


def install_guard(hidden, scratch):
    """`hidden`: folders the graded code may not read; `scratch`: the one
    folder it may change."""
    hidden = tuple(os.path.realpath(h) for h in hidden)
    scratch = os.path.realpath(scratch)
    own_proc = (f"/proc/{os.getpid()}", "/proc/self", "/proc/thread-self")

    def inside(path, folder):
        return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)

    def real(path):
        if isinstance(path, int):
            return None      # an open file descriptor: already allowed when it was opened
        path = os.fsdecode(path)
        return os.path.realpath(path)

    def check_read(path):
        if path is None:
            return
        if any(inside(path, h) for h in hidden):
            raise GraderRefusal(f"the grader does not let a submission read {path}")
        if path.startswith("/proc/") and not any(inside(path, p) for p in own_proc):
            parts = path.split("/")
            if len(parts) > 2 and parts[2].isdigit():
                raise GraderRefusal(f"the grader does not let a submission read another process's {path}")

    def check_change(path):
        if path is not None and not inside(path, scratch) and path not in ("/dev/null",):
            raise GraderRefusal(f"the grader does not let a submission change {path} (only {scratch})")

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            path = real(path)
            check_read(path)
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & WRITE_FLAGS)
            if writing:
                check_change(path)
        elif event in CHANGES:
            for value in args:
                if isinstance(value, (str, bytes, os.PathLike)):
                    check_change(real(value))
        elif event in ("os.listdir", "os.scandir"):
            if args and isinstance(args[0], (str, bytes, os.PathLike)):
                check_read(real(args[0]))
        elif event == "import" and args[0].split(".")[0] in REFERENCE_PACKAGES and called_from_submission():
            raise GraderRefusal(f"the grader does not let a submission import {args[0]}")
        elif event.startswith(DENIED):
            raise GraderRefusal(f"the grader does not let a submission use {event}")

    package = os.path.join(TREE, "minibert") + os.sep

    def called_from_submission():
        """Whether the graded package's code is on the stack (the
        instructor's tests may import transformers as their oracle)."""
        frame = sys._getframe(2)
        for _ in range(60):
            if frame is None:
                return False
            if frame.f_code.co_filename.startswith(package):
                return True
            frame = frame.f_back
        return False

    sys.addaudithook(hook)


# ---- digests of what a function returned ------------------------------------

MAX_VALUES = 512


def digest(value, depth=0):
    """A JSON-able summary of a value, enough to tell the instructor's
    result from another: tensors by dtype, shape and (up to 512, evenly
    spaced) values plus their sum; containers item by item; objects by
    their fields."""
    if depth > 6:
        return {"deep": type(value).__name__}
    if isinstance(value, torch.nn.Module):
        return {"module": type(value).__name__, "state": digest(dict(value.state_dict()), depth + 1)}
    if isinstance(value, (torch.Tensor, np.ndarray)):
        t = torch.as_tensor(np.asarray(value) if isinstance(value, np.ndarray) else value.detach().cpu())
        flat = t.reshape(-1)
        if flat.numel() > MAX_VALUES:
            index = torch.linspace(0, flat.numel() - 1, MAX_VALUES).long()
            flat = flat[index]
        numbers = flat.double() if not t.is_complex() else flat.abs().double()
        return {"tensor": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                "values": [number(v) for v in numbers.tolist()],
                "sum": number(t.double().sum().item()) if t.numel() and not t.is_complex() else 0.0}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return {"float": number(float(value))}
    if isinstance(value, bytes):
        return {"bytes": value.hex()[:4096]}
    if isinstance(value, (list, tuple)):
        return [digest(v, depth + 1) for v in list(value)[:2000]]
    if isinstance(value, dict):
        return {str(k): digest(v, depth + 1) for k, v in list(value.items())[:2000]}
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict) and not callable(value):
        return {"object": type(value).__name__,
                "fields": {k: digest(v, depth + 1) for k, v in fields.items()
                           if not k.startswith("_") and not callable(v)}}
    return {"object": type(value).__name__}


def number(x):
    return x if math.isfinite(x) else repr(x)


# ---- the exercise functions, watched ---------------------------------------

CURRENT = {"test": None, "calls": []}
MAX_CALLS = 200


def resolve(module_name, qualname):
    import importlib
    owner = importlib.import_module(module_name)
    parts = qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def substitute(targets, exercise):
    """Replace each "module:attribute" of `targets` by a function that
    raises; return a function that puts them back."""
    saved = []
    for target in targets:
        module_name, _, attribute = target.partition(":")
        try:
            owner, name = resolve(module_name, attribute)
            original = getattr(owner, name)
        except (ImportError, AttributeError):
            continue

        def refused(*args, _target=target, **kwargs):
            raise NotImplementedError(f"exercise {exercise}: calls {_target.replace(':', '.')}, which this "
                                      f"exercise asks you to write out")
        setattr(owner, name, refused)
        saved.append((owner, name, original))

    def restore():
        for owner, name, original in saved:
            setattr(owner, name, original)
    return restore


def watch(exercise, module_name, qualname, forbidden):
    """Wrap the exercise's function so every call is recorded (what it
    returned; for a function that returns nothing, its arguments after the
    call) and, during the call, the fused functions it replaces raise."""
    owner, name = resolve(module_name, qualname)
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    depth = {"n": 0}

    def watched(*args, **kwargs):
        depth["n"] += 1
        restore = substitute(forbidden, exercise) if depth["n"] == 1 else (lambda: None)
        try:
            result = function(*args, **kwargs)
        finally:
            restore()
            depth["n"] -= 1
        if depth["n"] == 0 and CURRENT["test"] is not None and len(CURRENT["calls"]) < MAX_CALLS:
            seen = result if result is not None else {"arguments": list(args), **kwargs}
            try:
                CURRENT["calls"].append(digest(seen))
            except Exception as e:   # noqa: BLE001 - a value that cannot be summarised is itself the record
                CURRENT["calls"].append({"undigestible": type(e).__name__})
        return result

    watched.__name__, watched.__qualname__, watched.__doc__ = function.__name__, function.__qualname__, function.__doc__
    watched.__wrapped__ = function
    if isinstance(original, staticmethod):
        watched = staticmethod(watched)
    elif isinstance(original, classmethod):
        watched = classmethod(watched)
    setattr(owner, name, watched)


# ---- pytest, with its configuration pinned ---------------------------------


class Reporter:
    """A pytest plugin: one message per test, with the calls it recorded."""

    def __init__(self, exercise_of):
        self.exercise_of = exercise_of   # nodeid prefix "file::function" -> exercise
        self.sent = set()

    def _exercise(self, nodeid):
        return self.exercise_of.get(nodeid.split("[")[0])

    def pytest_runtest_logstart(self, nodeid, location):
        CURRENT["test"], CURRENT["calls"] = nodeid, []
        seed_everything()
        send({"begin": nodeid, "exercise": self._exercise(nodeid)})

    def pytest_runtest_logreport(self, report):
        failed = report.failed
        if report.when != "call" and not failed and not report.skipped:
            return
        if report.nodeid in self.sent:
            return
        self.sent.add(report.nodeid)
        outcome = "passed" if report.passed and report.when == "call" else "skipped" if report.skipped else "failed"
        send({"test": report.nodeid, "exercise": self._exercise(report.nodeid), "outcome": outcome,
              "message": failure_message(report) if outcome != "passed" else "", "calls": CURRENT["calls"]})
        CURRENT["test"] = None

    def pytest_collectreport(self, report):
        if report.failed:
            send({"collect_error": report.nodeid, "message": failure_message(report)})


def failure_message(report):
    """The failure in a few lines: the exception, then pytest's E lines."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):            # a skip: (file, line, reason)
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    lines = []
    if crash is not None:
        lines.append(crash.message.splitlines()[0] if crash.message.strip() else "")
    text = str(longrepr) if longrepr is not None else ""
    explained = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    lines += [line for line in explained[1:6] if line and line not in lines]
    return " | ".join(line for line in lines if line)[:600] or "failed"


def seed_everything():
    """Each test starts from the same random state in every run, so the
    instructor's and the submission's calls see the same inputs."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


# ---- the end-to-end checks: raw outputs only --------------------------------

SENTENCES = ["the cat sat on the mat .", "she opened the door and [MASK] into the garden .",
             "a long time ago , in a small village by the sea , there lived an old fisherman .", "yes"]


def end_to_end_attention(reference):
    """Every layer's output of the bundled model on four sentences: the
    instructor's tree runs the fused model, the submission's runs its own
    written-out attention (with its own heads split, padding mask,
    embeddings sum and feed-forward block)."""
    from minibert import load_pretrained, load_tokenizer
    from minibert.model import SelfAttention
    model, tokenizer = load_pretrained(), load_tokenizer()
    batch = tokenizer.batch_encode(SENTENCES) if reference else SPEC["attention_batch"]
    batch = {k: torch.tensor(v) for k, v in batch.items()} if not reference else batch
    with torch.no_grad():
        if not reference:
            for module in model.modules():
                if isinstance(module, SelfAttention):
                    module.written_out = True
        output = model(**batch)
    return {"batch": {k: v.tolist() for k, v in batch.items()},
            "hidden_states": [h.tolist() for h in output.hidden_states],
            "top1": output.mlm_logits.argmax(-1).tolist()}


def end_to_end_wordpiece(reference):
    """The tokens of every SST-2 dev sentence: the instructor's fast
    tokenizer, or the submission's written-out one."""
    from minibert import load_tokenizer
    from minibert.tokenization import written_out_tokenize
    tokenizer = load_tokenizer()
    with open(SPEC["sentences"], encoding="utf-8") as f:
        sentences = f.read().split("\n")
    if reference:
        return [tokenizer.tokenize(s) for s in sentences]
    vocab = tokenizer.backend.get_vocab()
    return [written_out_tokenize(s, vocab, tokenizer.do_lower_case) for s in sentences]


def end_to_end_milestone(reference):
    from minibert.coursework.milestone import fine_tune_sst2
    return fine_tune_sst2(SPEC["milestone"], written_out=not reference)


END_TO_END = {"attention": end_to_end_attention, "wordpiece": end_to_end_wordpiece,
              "milestone": end_to_end_milestone}


# ---- the run ---------------------------------------------------------------


def main():
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if SPEC["guard"]:
        limit = SPEC.get("max_file_bytes", 1 << 28)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        install_guard(SPEC["hidden"], SPEC["tmp"])
    import importlib
    import minibert  # noqa: F401
    for w in SPEC["watch"]:
        # A module that does not import costs its own exercises (their
        # tests fail on the same error), not the others.
        try:
            watch(w["exercise"], w["module"], w["qualname"], w["forbidden"])
        except Exception as e:   # noqa: BLE001
            send({"import_error": w["exercise"], "message": f"{w['module']}: {type(e).__name__}: {e}"[:400]})
    send({"phase": "imported"})
    if SPEC["tests"]:
        exercise_of = {test: exercise for exercise, test in SPEC["tests"]}
        arguments = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
                     "-c", SPEC["ini"], "--rootdir", TREE, "--confcutdir", os.path.join(TREE, "tests"),
                     "-o", "console_output_style=classic", "--no-header", "-s",
                     *[test for _, test in SPEC["tests"]]]
        pytest.main(arguments, plugins=[Reporter(exercise_of)])
    for name in SPEC["end_to_end"]:
        send({"begin": f"end-to-end:{name}", "exercise": f"end-to-end:{name}"})
        seed_everything()
        try:
            data = END_TO_END[name](reference=not SPEC["guard"])
            send({"end_to_end": name, "data": data})
        except BaseException as e:   # noqa: BLE001 - any failure is this check's failure
            text = f"{type(e).__name__}: {e}".strip().splitlines()
            send({"end_to_end": name, "error": text[0] if text else type(e).__name__})
    send({"phase": "done"})


if __name__ == "__main__":
    try:
        main()
    except BaseException:   # noqa: BLE001 - shown in the grader's note as the last line
        import traceback
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    CHANNEL.flush()
    os._exit(0)   # graded code's threads and exit hooks do not get to run after the report
