"""The grading child: runs exercise tests on one tree and reports what it saw.

The grader (check.py) starts this file as a script, `python -I -B runner.py
SPEC`, never as part of the package: `-I` keeps PYTHONPATH, the user's
site-packages and the script's folder off sys.path. For a submission it
runs inside the jail of sandbox.py, which is what keeps the submission
from the instructor's files, the labels, the grader and the machine: this
file protects nothing, and trusts nothing it is told by the graded code.

It reports, as JSON lines on the file descriptor the grader gave it:

    {"phase": "imported"}                       the graded modules imported
    {"begin": NODEID, "exercise": NAME}         a test (or a hidden check) starts
    {"test": NODEID, "outcome": ..., "message": ..., "calls": [...]}
    {"hidden": NAME, "calls": [...], "error": ...}   the grader's own inputs
    {"end_to_end": NAME, "data": ...}           a check's raw outputs
    {"phase": "done"}

It decides nothing. "calls" are digests of what each call of the
exercise's own function returned, and end-to-end checks return raw outputs
(hidden states, token lists, trained weights): the grader compares them
with the same numbers from the instructor's checkout, in its own process.
So a submission that patches torch.allclose, pytest or this file's code at
import still has to produce the instructor's numbers to score, on the
shipped tests and on inputs drawn afresh for every grade (probes.py).

While an exercise's function runs (its *window*), what the exercise asks
the student to write out is refused where it runs: torch's fused kernels at
the dispatcher (a TorchFunctionMode and a TorchDispatchMode see every call,
whatever name or alias reaches it), and other libraries (tokenizers, the
package's own written-out twins) by a profile hook that sees every Python
and C call. The window is an honesty check for learners, not a wall: a
submission that forges code locations can slip past it, and the wall is
the operating system's.
"""

import base64
import functools
import io
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
TESTS = SPEC["tests_folder"]      # the tree's tests, and the helper modules they import


def holds_another_minibert(entry):
    folder = os.path.abspath(entry or ".")
    return folder != TREE and os.path.isdir(os.path.join(folder, "minibert"))


sys.path[:] = [TREE, TESTS] + [p for p in sys.path if p and not holds_another_minibert(p)]
# An editable install (pip install -e .) maps `minibert` to the instructor's
# checkout through a finder on sys.meta_path: drop every such finder.
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in f"{type(f).__module__}.{type(f).__name__}".lower()
                    and "editable" not in repr(f).lower()]
for name in [n for n in sys.modules if n == "minibert" or n.startswith("minibert.")]:
    del sys.modules[name]
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"   # no plugin from site-packages' entry points
os.makedirs(SPEC["tmp"], exist_ok=True)
os.environ["TMPDIR"] = SPEC["tmp"]

import random  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

torch.set_num_threads(SPEC.get("threads", 1))


# ---- the window: what an exercise may not call while it runs ---------------

TORCH_FOLDER = os.path.dirname(torch.__file__) + os.sep
CONTEXTLIB = __import__("contextlib").__file__
HERE = os.path.abspath(__file__)
# Calls that switch the window's watchers off (from outside torch's own code,
# which pops a mode for a moment while it runs the mode's handler).
TAMPERING = {"setprofile", "settrace", "setprofile_all_threads", "settrace_all_threads",
             "_pop_torch_function_stack", "_pop_torch_dispatch_mode", "_set_torch_function_mode",
             "_set_dispatch_mode", "_unset_dispatch_mode", "_pop_mode", "_pop_mode_temporarily",
             "_disable_current_modes", "_DisableTorchDispatch", "DisableTorchFunction",
             "DisableTorchFunctionSubclass"}


THREAD_STARTS = {"start_new_thread", "start_joinable_thread", "start_new"}


def threads_now():
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


class Refused(NotImplementedError):
    """What the window raises in the exercise's code."""


@functools.lru_cache(maxsize=None)
def module_folder(name):
    import importlib.util
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return os.path.join(list(spec.submodule_search_locations)[0], "")
    return spec.origin


class Window:
    """The rules of one exercise (check.FORBIDDEN) and the first rule broken.

    rules: {"torch": substrings of torch function and ATen operator names,
    "modules": packages whose code may not run, "functions": names of
    functions that may not run, anywhere}."""

    def __init__(self, exercise, rules):
        self.exercise = exercise
        self.torch_names = tuple(rules.get("torch", ()))
        self.functions = frozenset(rules.get("functions", ()))
        self.modules = tuple(rules.get("modules", ()))
        self.folders = tuple(f for f in (module_folder(m) for m in self.modules) if f)
        self.empty = not (self.torch_names or self.functions or self.modules)
        self.broken = None

    def refuse(self, what):
        if self.broken is None:
            self.broken = f"exercise {self.exercise}: {what}"
        raise Refused(self.broken)

    def note(self, what):
        """Record without raising (inside the profile hook, where raising
        would switch the hook off); the call is refused when it returns."""
        if self.broken is None:
            self.broken = f"exercise {self.exercise}: {what}"

    def torch_call(self, name, shown):
        if any(pattern in name for pattern in self.torch_names):
            self.refuse(f"calls {shown}, which this exercise asks you to write out")

    def profile(self, frame, event, arg):
        if event == "c_call":
            name = getattr(arg, "__name__", "") or ""
            if name in TAMPERING and not frame.f_code.co_filename.startswith((TORCH_FOLDER, HERE)):
                self.note(f"calls {name}, which switches off the grader's watch")
            if name in THREAD_STARTS:        # the modes and this hook watch one thread: a new one runs unwatched
                self.note("starts a thread of its own beside the exercise; the grader watches one thread")
            owner = getattr(arg, "__self__", None)
            module = getattr(arg, "__module__", None) or type(owner).__module__
            if name in self.functions or (self.modules and module and module.startswith(self.modules)):
                self.note(f"calls {module}.{name}, which this exercise asks you to write out")
        elif event == "call":
            code = frame.f_code
            if code.co_name in TAMPERING and not caller_file(frame).startswith((TORCH_FOLDER, HERE)):
                self.note(f"calls {code.co_name}, which switches off the grader's watch")
            if code.co_name in self.functions or (self.folders and code.co_filename.startswith(self.folders)):
                self.note(f"calls {code.co_name} ({os.path.basename(code.co_filename)}), which this exercise "
                          f"asks you to write out")


def caller_file(frame):
    """The file of the first caller of `frame` that is not contextlib (a
    context manager's generator is called from there)."""
    frame = frame.f_back
    while frame is not None and frame.f_code.co_filename == CONTEXTLIB:
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else ""


class RefuseFunctions(TorchFunctionMode):
    """Sees every torch function called (torch.layer_norm, F.gelu, an alias of either, ...)."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "") or ""
        module = (getattr(func, "__module__", None) or "torch").replace("torch._C._nn", "torch.nn.functional")
        self.window.torch_call(name, f"{module}.{name}")
        return func(*args, **(kwargs or {}))


class RefuseKernels(TorchDispatchMode):
    """Sees every ATen operator that runs (native_layer_norm, gelu,
    _fused_adamw_, ...), from whatever Python call it came."""

    def __init__(self, window):
        super().__init__()
        self.window = window

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._overloadpacket.__name__
        self.window.torch_call(name, f"torch.ops.aten.{name}")
        return func(*args, **(kwargs or {}))


def run_in_window(window, function, args, kwargs):
    """function(*args, **kwargs) with the window's rules in force; raises
    Refused if a rule was broken, even where the exercise caught the error.
    An exercise with no rules (the training step) runs unwatched: nothing
    is refused in it, and watching every call of a whole training step
    would double the milestone's time."""
    if window.empty:
        return function(*args, **kwargs)
    if SPEC["graded"] and threads_now() > BASELINE_THREADS["n"]:
        window.refuse("the submission runs threads of its own beside the exercise; the grader watches one")
    before = sys.getprofile()
    sys.setprofile(window.profile)
    try:
        with RefuseFunctions(window), RefuseKernels(window):
            result = function(*args, **kwargs)
    finally:
        watching = sys.getprofile() is not None and getattr(sys.getprofile(), "__self__", None) is window
        sys.setprofile(before)
    if not watching:
        window.note("switches off the grader's watch (sys.setprofile)")
    if window.broken:
        raise Refused(window.broken)
    return result


BASELINE_THREADS = {"n": 1}


# ---- digests of what a function returned ------------------------------------

MAX_VALUES = 512


def unplain(value, depth=0):
    """What in `value` is not a plain value (a tensor subclass, an object
    with its own __torch_function__), or None. Such a value could compute
    later, outside the window."""
    if depth > 6:
        return None
    kind = type(value)
    if isinstance(value, torch.Tensor):
        return None if kind in (torch.Tensor, torch.nn.Parameter) else f"a {kind.__name__} (a tensor subclass)"
    if getattr(kind, "__torch_function__", None) is not None:
        return f"a {kind.__name__} (an object with __torch_function__)"
    if isinstance(value, torch.nn.Module):
        items = list(value.state_dict().values())
    elif isinstance(value, (list, tuple)):
        items = list(value)[:2000]
    elif isinstance(value, dict):
        items = list(value.values())[:2000]
    else:
        fields = getattr(value, "__dict__", None)
        items = list(fields.values()) if isinstance(fields, dict) else []
    for item in items:
        found = unplain(item, depth + 1)
        if found:
            return found
    return None


def digest(value, depth=0):
    """A JSON-able summary of a value, enough to tell the instructor's
    result from another: tensors by dtype, shape and (up to 512, evenly
    spaced) values plus their sum; a learning-rate schedule by the rates it
    gives; containers item by item; objects by their fields."""
    if depth > 6:
        return {"deep": type(value).__name__}
    if isinstance(value, torch.nn.Module):
        return {"module": type(value).__name__, "state": digest(dict(value.state_dict()), depth + 1)}
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return {"schedule": schedule_rates(value)}
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


SCHEDULE_STEPS = 100


def schedule_rates(scheduler):
    """The learning rates a schedule gives over SCHEDULE_STEPS steps, read
    from a copy (so a LambdaLR and an LRScheduler subclass with the same
    rates are the same answer)."""
    import copy
    import warnings
    twin = copy.deepcopy(scheduler)
    rates = [list(twin.get_last_lr())]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # "scheduler.step() before optimizer.step()": no training here
        for _ in range(SCHEDULE_STEPS):
            twin.step()
            rates.append(list(twin.get_last_lr()))
    return [[{"float": number(float(r))} for r in step] for step in rates]


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


def watch(exercise, module_name, qualname, rules):
    """Wrap the exercise's function so every call runs in its window and is
    recorded: what it returned (for a function that returns nothing, its
    arguments after the call), marked "random" where the call drew from
    torch's random generator (dropout)."""
    owner, name = resolve(module_name, qualname)
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
    depth = {"n": 0}

    def watched(*args, **kwargs):
        depth["n"] += 1
        try:
            if depth["n"] > 1:
                return function(*args, **kwargs)
            state = torch.random.get_rng_state()
            result = run_in_window(Window(exercise, rules), function, args, kwargs)
            drew = not torch.equal(state, torch.random.get_rng_state())
        finally:
            depth["n"] -= 1
        strange = unplain(result)
        if strange:
            raise Refused(f"exercise {exercise}: returns {strange}; return plain tensors and numbers")
        if CURRENT["test"] is not None and len(CURRENT["calls"]) < MAX_CALLS:
            seen = result if result is not None else {"arguments": list(args), **kwargs}
            try:
                record = digest(seen)
            except Exception as e:   # noqa: BLE001 - a value that cannot be summarised is itself the record
                record = {"undigestible": type(e).__name__}
            CURRENT["calls"].append({"random": record} if drew else record)
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


def error_line(error):
    """An exception as one short line: its type and its message's first line."""
    text = f"{type(error).__name__}: {error}".strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


def seed_everything(seed=0):
    """Each test starts from the same random state in every run, so the
    instructor's and the submission's calls see the same inputs."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ---- the grader's own inputs -----------------------------------------------


def run_hidden(names):
    """Each exercise's function on inputs drawn from this grade's seed
    (probes.py): the submission never saw them, so an answer written for
    the shipped tests' inputs does not carry over."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("minibert_grading_probes", SPEC["probes"])
    probes = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probes)
    for name in names:
        send({"begin": f"hidden:{name}", "exercise": name})
        CURRENT["test"], CURRENT["calls"] = f"hidden:{name}", []
        seed_everything(SPEC["seed"])
        error = None
        try:
            probes.run(name, SPEC["seed"])
        except BaseException as e:   # noqa: BLE001 - any failure is this check's failure
            error = error_line(e)
        send({"hidden": name, "calls": CURRENT["calls"], "error": error})
        CURRENT["test"] = None


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
    with open(os.path.join(SPEC["inputs"], SPEC["sentences"]), encoding="utf-8") as f:
        sentences = f.read().split("\n")
    if reference:
        return [tokenizer.tokenize(s) for s in sentences]
    vocab = tokenizer.backend.get_vocab()
    return [written_out_tokenize(s, vocab, tokenizer.do_lower_case) for s in sentences]


def end_to_end_milestone(reference):
    """The weights the submission's own code trains, for the grader to
    score in its own process with the instructor's model."""
    from minibert.coursework.milestone import fine_tune_sst2
    spec = dict(SPEC["milestone"], train=os.path.join(SPEC["inputs"], SPEC["milestone"]["train"]))
    model, steps = fine_tune_sst2(spec, written_out=not reference)
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()}, buffer)
    return {"weights": base64.b64encode(buffer.getvalue()).decode("ascii"), "steps": steps}


END_TO_END = {"attention": end_to_end_attention, "wordpiece": end_to_end_wordpiece,
              "milestone": end_to_end_milestone}


# ---- the run ---------------------------------------------------------------


def main():
    import importlib
    torch.nn.functional.gelu(torch.ones(2, requires_grad=True)).sum().backward()   # torch's own threads start here
    BASELINE_THREADS["n"] = threads_now()
    import minibert  # noqa: F401
    for w in SPEC["watch"]:
        # A module that does not import costs its own exercises (their
        # tests fail on the same error), not the others.
        try:
            watch(w["exercise"], w["module"], w["qualname"], w["forbidden"])
        except Exception as e:   # noqa: BLE001
            send({"import_error": w["exercise"], "message": f"{w['module']}: {type(e).__name__}: {e}"[:400]})
    send({"phase": "imported"})
    importlib.invalidate_caches()
    if SPEC["tests"]:
        exercise_of = {test: exercise for exercise, test in SPEC["tests"]}
        arguments = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
                     "-c", SPEC["ini"], "--rootdir", TREE, "--confcutdir", TESTS,
                     "-o", "console_output_style=classic", "--no-header", "-s",
                     *[test for _, test in SPEC["tests"]]]
        pytest.main(arguments, plugins=[Reporter(exercise_of)])
    if SPEC.get("hidden"):
        run_hidden(SPEC["hidden"])
    for name in SPEC["end_to_end"]:
        send({"begin": f"end-to-end:{name}", "exercise": f"end-to-end:{name}"})
        seed_everything()
        try:
            data = END_TO_END[name](reference=not SPEC["graded"])
            send({"end_to_end": name, "data": data})
        except BaseException as e:   # noqa: BLE001 - any failure is this check's failure
            send({"end_to_end": name, "error": error_line(e)})
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
