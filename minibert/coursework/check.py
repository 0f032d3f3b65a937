"""The autograder: score a submission's exercises, trusting nothing in it.

1. **A fresh tree.** The grader writes a student copy of the instructor's
   checkout (every exercise blank: tests, fixtures and configuration are
   the instructor's) and copies over it only the submission's
   `minibert/**/*.py`: no conftest.py, no pytest.ini, no root-level
   module, no symbolic link, nothing outside the package.
2. **Behind a wall.** The submission's code runs in a bubblewrap jail
   (sandbox.py): it sees the fresh tree, the Python installation and the
   unlabelled inputs of its checks, and nothing else of the machine; it
   can write only its own small /tmp; it cannot see, signal or outlive the
   grader; memory, CPU time and file sizes are limited. Without bubblewrap
   the grader refuses to grade unless told `unsandboxed`, and then says so
   in every report.
3. **Two runs of the same checks.** A child process runs the chosen
   exercises' tests on the instructor's own checkout, recording what each
   exercise's function returns, then the same function on inputs drawn
   from a seed picked for this grade (probes.py); the jailed child does the
   same on the fresh tree. An exercise scores only if its tests succeed in
   the submission's run AND every call of its function returned what it
   returns in the instructor's run, compared here, in this process. A
   submission that fakes pytest's verdict or patches torch.allclose still
   has to produce the instructor's numbers, on inputs it never saw.
4. **Bounded time.** Each exercise has its own time limit; a loop, a crash
   or an exit costs that exercise, and a new child goes on with the rest. A
   package that does not import in time scores 0 everywhere, in bounded
   time, with a message that says so.
5. **End to end**: the submission's attention inside the bundled model
   against the instructor's fused model, its WordPiece on every SST-2 dev
   sentence against the instructor's tokenizer, and the SST-2 milestone:
   its own model, tokenizer, head, optimizer and step fine-tuned on SST-2;
   the weights it trains are loaded into the instructor's model and scored
   here on the dev set, which the child never sees.
"""

import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from minibert.coursework import milestone, sandbox
from minibert.coursework.exercises import (ASSIGNMENT_OF, TESTS_FOLDER, CourseworkError, assignment, exercise_tests,
                                           find_regions, test_prefix)

RUNNER = Path(__file__).with_name("runner.py")
PROBES = Path(__file__).with_name("probes.py")

EXERCISE_SECONDS = 120     # each exercise's tests, in one child; a whole correct assignment takes seconds
IMPORT_SECONDS = 120       # the graded package's import, before any test
TOTAL_SECONDS = 1800       # the whole grade
MILESTONE_SECONDS = 900    # the SST-2 milestone's fine-tuning
MAX_REPORT_BYTES = 256 << 20

# What each exercise must not call while its function runs (runner.Window):
# "torch": parts of the names of torch functions and ATen operators, refused
# at torch's dispatcher whatever alias reaches them; "modules": packages whose
# code may not run; "functions": functions that may not run, by name (the
# package's own written-out twins, a library's checksum).
FORBIDDEN = {
    "attention": {"torch": ("scaled_dot_product", "multi_head_attention")},
    "layer-norm": {"torch": ("layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm")},
    "gelu-erf": {"torch": ("gelu",)},
    "gelu-tanh": {"torch": ("gelu",)},
    "lstm-gates": {"torch": ("lstm",)},
    "c2p-p2c": {"functions": ("relative_scores_written_out",)},
    "adamw-update": {"torch": ("adam",), "modules": ("torch.optim",)},
    "basic-tokenizer": {"modules": ("tokenizers",)},
    "wordpiece": {"modules": ("tokenizers",)},
    "masked-crc32c": {"functions": ("crc32c", "crc32")},
    "log-bucket": {"functions": ("make_log_bucket_position",)},
}

# End-to-end rows: (row name, what the child runs, the exercises that switch it on, the files it
# reads from the data folder: the milestone trains on train.tsv and is scored here on dev.tsv).
END_TO_END = (
    ("attention:bundled-model", "attention", ("attention",), ()),
    ("wordpiece:sst2-dev", "wordpiece", ("basic-tokenizer", "wordpiece"), ("sst2/dev.tsv",)),
    ("milestone:sst2-fine-tuning", "milestone", ("adamw-update", "training-step"), milestone.SST2_FILES),
)
END_TO_END_OF = {child: row for row, child, _, _ in END_TO_END}


@dataclass
class Row:
    name: str
    assignment: int
    points: float
    max_points: float
    status: str      # "passed" or "failed"
    output: str      # why, in a line or two
    seconds: float = 0.0


@dataclass
class Grade:
    rows: list
    notes: list = field(default_factory=list)   # about the submission as a whole
    seconds: float = 0.0


def select(names=(), assignments=()):
    """The exercise names asked for (all when nothing is asked), in table order."""
    unknown = [n for n in names if n not in ASSIGNMENT_OF]
    if unknown:
        raise CourseworkError(f"unknown exercise {unknown[0]!r}; `python -m minibert.coursework list` shows them")
    chosen = set(names)
    for number in assignments:
        chosen |= set(assignment(number).exercises)
    if not names and not assignments:
        chosen = set(ASSIGNMENT_OF)
    return [n for n in ASSIGNMENT_OF if n in chosen]


def data_files(chosen):
    """The files of the data folder that the end-to-end rows switched on by
    the exercises `chosen` read, in milestone.SST2_FILES's order."""
    needed = {name for _, _, switches, needs in END_TO_END if any(e in chosen for e in switches) for name in needs}
    return tuple(name for name in milestone.SST2_FILES if name in needed)


# ---- the submission --------------------------------------------------------


def find_package(submission):
    """The submission's minibert/ folder: SUBMISSION/minibert, a folder one
    level down holding minibert/, or SUBMISSION itself when it is the package
    (named minibert, or holding the package's __init__.py and model.py, as
    when a student uploads the package's files to Gradescope)."""
    submission = Path(submission)
    if not submission.is_dir():
        raise CourseworkError(f"{submission}: no such folder")
    candidates = [submission / "minibert", *sorted(submission.glob("*/minibert"))]
    if submission.name == "minibert" or (submission / "model.py").is_file():
        candidates.append(submission)
    for candidate in candidates:
        if candidate.is_symlink():
            raise CourseworkError(f"{candidate}: a symbolic link; hand in the package's own files")
        if (candidate / "__init__.py").is_file() and not (candidate / "__init__.py").is_symlink():
            return candidate
    raise CourseworkError(f"{submission}: no minibert/ package here, one folder down, or as the folder itself "
                          f"(expected minibert/__init__.py)")


def copy_submission(package, tree):
    """Copy the submission's package .py files over the tree's minibert/;
    returns notes on what was refused. The grader's own coursework package
    and any conftest.py are never taken from a submission."""
    notes, copied = [], 0
    package = Path(package)
    for folder, folders, files in os.walk(package):
        folder = Path(folder)
        relative_folder = folder.relative_to(package)
        for name in list(folders):
            if (folder / name).is_symlink():
                notes.append(f"minibert/{(relative_folder / name).as_posix()}: a symbolic link, not graded")
            if (folder / name).is_symlink() or name == "__pycache__" or (relative_folder / name).parts[0] == "coursework":
                folders.remove(name)
        for name in files:
            source, relative = folder / name, (relative_folder / name).as_posix()
            if not name.endswith(".py") or name == "conftest.py":
                continue
            if source.is_symlink() or not source.is_file():
                notes.append(f"minibert/{relative}: a symbolic link or not a regular file, not graded")
                continue
            if source.stat().st_size > 4 << 20:
                notes.append(f"minibert/{relative}: larger than 4 MiB, not graded")
                continue
            target = Path(tree) / "minibert" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied += 1
    if copied == 0:
        notes.append("the submission's minibert/ holds no .py file")
    return notes


# ---- the children ----------------------------------------------------------


def _pytest_ini(reference, scratch):
    """pytest's configuration, pinned by the grader: the instructor's
    markers and nothing that loads code."""
    markers = []
    try:
        import tomllib
        with open(Path(reference) / "pyproject.toml", "rb") as f:
            markers = tomllib.load(f)["tool"]["pytest"]["ini_options"].get("markers", [])
    except (OSError, KeyError, ValueError, ImportError):
        markers = []          # no markers declared: pytest runs without them
    ini = Path(scratch) / "pytest.ini"
    ini.write_text("[pytest]\n" + ("markers =\n" + "".join(f"    {m}\n" for m in markers) if markers else ""),
                   encoding="utf-8")
    return ini


def _hidden_folders(reference, data):
    """What must stay out of the jail even where it lies inside a folder the
    jail mounts (the Python installation, /usr): the instructor's checkout,
    the data, and any other minibert package the grading Python could find
    (on Gradescope, the checkout and the data are /autograder/source and
    source/data)."""
    hidden = {Path(reference).resolve()}
    if data is not None:
        hidden.add(Path(data).resolve())
    for entry in sys.path:
        candidate = Path(entry or ".").resolve() / "minibert"
        if (candidate / "__init__.py").is_file():
            hidden.add(candidate)
    return sorted(str(h) for h in hidden)


class Outcomes:
    """What one tree's children reported: per test, per end-to-end check,
    and per exercise that stopped early (why)."""

    def __init__(self):
        self.tests, self.end_to_end, self.stopped, self.collect_errors = {}, {}, {}, []
        self.hidden = {}
        self.imported, self.seconds = False, {}


@dataclass
class Place:
    """Where one run's children run. `jail`: None for the instructor's run
    (trusted code, on its own checkout) and an unsandboxed grade; else the
    sandbox settings {"limits", "hidden", "blocker"}."""
    tree: Path
    scratch: Path
    graded: bool
    jail: dict = None

    def paths(self, tmp):
        """The paths a child sees: the host's, or the jail's (sandbox.py)."""
        if self.jail is None:
            return {"runner": self.scratch / "runner.py", "tree": self.tree, "inputs": self.scratch / "inputs",
                    "ini": self.scratch / "pytest.ini", "probes": self.scratch / "probes.py", "tmp": tmp}
        inside = sandbox.INSIDE
        return {"runner": inside / "runner.py", "tree": inside / "tree", "inputs": inside / "inputs",
                "ini": inside / "pytest.ini", "probes": inside / "probes.py", "tmp": Path("/tmp/work")}

    def command(self, argv):
        if self.jail is None:
            return argv
        return sandbox.command(argv, tree=self.tree, inputs=self.scratch / "inputs",
                               files={name: self.scratch / name for name in ("runner.py", "pytest.ini", "probes.py")},
                               **self.jail)


def run_tree(items, *, place, spec_extra, limits, deadline):
    """Run `items` [(exercise, [nodeids])] and end-to-end checks (items
    whose exercise is "end-to-end:NAME") in `place`, one child after
    another: a child that overruns an exercise's limit, crashes or exits is
    replaced by a new one for the exercises it did not reach."""
    outcomes = Outcomes()
    remaining = list(items)
    while remaining:
        if time.monotonic() >= deadline:
            for exercise, _ in remaining:
                outcomes.stopped[exercise] = "not run: the whole grade reached its time limit"
            break
        done_with = _one_child(remaining, outcomes, place=place, spec_extra=spec_extra, limits=limits,
                               deadline=deadline)
        remaining = [item for item in remaining if item[0] not in done_with]
    return outcomes


def _one_child(items, outcomes, *, place, spec_extra, limits, deadline):
    scratch = place.scratch
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=scratch)) if place.jail is None else None
    at = place.paths(tmp)
    read_end, write_end = os.pipe()
    exercises = [exercise for exercise, _ in items if not exercise.startswith("end-to-end:")]
    spec = {**spec_extra, "fd": write_end, "tree": str(at["tree"]), "tests_folder": str(at["tree"] / TESTS_FOLDER),
            "tmp": str(at["tmp"]), "graded": place.graded,
            "ini": str(at["ini"]), "probes": str(at["probes"]), "inputs": str(at["inputs"]),
            "tests": [[exercise, test] for exercise, tests in items if not exercise.startswith("end-to-end:")
                      for test in tests],
            "hidden": [e for e in spec_extra.get("hidden", ()) if e in exercises],
            "end_to_end": [exercise.split(":", 1)[1] for exercise, _ in items if exercise.startswith("end-to-end:")]}
    log = open(Path(scratch) / f"child-{os.getpid()}-{time.monotonic_ns()}.log", "w+b")
    argv = place.command([sys.executable, "-I", "-B", str(at["runner"]), json.dumps(spec)])
    preexec = sandbox.apply_limits(place.jail["limits"]) if place.jail else sandbox.die_with_parent
    child = subprocess.Popen(argv, cwd=place.tree, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             pass_fds=(write_end,), start_new_session=True, preexec_fn=preexec,
                             env={**sandbox.environment(tmp or "/tmp", tmp or "/tmp"),
                                  "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    os.close(write_end)
    selector = selectors.DefaultSelector()
    selector.register(read_end, selectors.EVENT_READ)
    buffer, received, finished = b"", 0, set()
    current, started = None, time.monotonic()
    import_deadline = started + limits["import"]

    def limit_of(exercise):
        return limits["milestone"] if exercise == "end-to-end:milestone" else limits["exercise"]

    reason = None
    try:
        while True:
            now = time.monotonic()
            if not outcomes.imported and not current and now > import_deadline:
                reason = ("import", f"the package did not import within {limits['import']:g} s "
                                    f"(a loop or a wait at import time?)")
                break
            if current and now - current[1] > limit_of(current[0]):
                reason = ("timeout", f"did not finish within {limit_of(current[0]):g} s (a loop that never ends?)")
                break
            if now > deadline:
                reason = ("total", "not finished when the whole grade reached its time limit")
                break
            events = selector.select(timeout=0.5)
            if not events:
                if child.poll() is not None:
                    reason = ("exit", None)
                    break
                continue
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                child.wait(timeout=30)
                reason = ("exit", None)
                break
            received += len(chunk)
            if received > MAX_REPORT_BYTES:
                reason = ("exit", "the test process wrote more than 256 MiB of reports")
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                message = _parse(line)
                if message is None:
                    continue
                if message.get("phase") == "imported":
                    outcomes.imported = True
                elif "begin" in message:
                    exercise = message.get("exercise")
                    if exercise and (current is None or current[0] != exercise):
                        if current:
                            finished.add(current[0])
                            outcomes.seconds[current[0]] = time.monotonic() - current[1]
                        current = (exercise, time.monotonic())
                elif "test" in message:
                    outcomes.tests.setdefault(str(message["test"]), message)
                elif "hidden" in message:
                    outcomes.hidden.setdefault(str(message["hidden"]), message)
                elif "end_to_end" in message:
                    outcomes.end_to_end.setdefault(str(message["end_to_end"]), message)
                elif "collect_error" in message:
                    outcomes.collect_errors.append(str(message.get("message", "")))
                elif message.get("phase") == "done":
                    if current:
                        finished.add(current[0])
                        outcomes.seconds[current[0]] = time.monotonic() - current[1]
                    return {exercise for exercise, _ in items}
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL) if _group_exists(child.pid) else child.kill()
        child.wait()
        selector.close()
        os.close(read_end)
        log.seek(0, os.SEEK_END)
        size = log.tell()
        log.seek(max(0, size - 4096))
        tail = log.read().decode("utf-8", "replace")
        log.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    kind, note = reason
    last = _last_line(tail) or f"exit status {child.returncode}"
    if not outcomes.imported:
        note = note or f"the package does not import: {last}"
        for exercise, _ in items:
            outcomes.stopped[exercise] = note
        return {exercise for exercise, _ in items}
    stopped = set(finished)
    if current is not None:
        outcomes.stopped[current[0]] = note or f"the test process ended during this exercise: {last}"
        outcomes.seconds[current[0]] = time.monotonic() - current[1]
        stopped.add(current[0])
    elif kind == "exit":   # ended before any exercise began (or after the last one)
        for exercise, _ in items:
            if exercise not in finished:
                outcomes.stopped[exercise] = note or f"the test process ended: {last}"
        return {exercise for exercise, _ in items}
    if kind == "total":
        for exercise, _ in items:
            outcomes.stopped.setdefault(exercise, note)
        return {exercise for exercise, _ in items}
    return stopped


def _group_exists(pid):
    try:
        return os.getpgid(pid) == pid
    except OSError:
        return False


def _parse(line):
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _last_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ---- comparing two runs, in this process -----------------------------------


def differs(mine, theirs, where="the result", values=True):
    """None when two digests agree (numbers as numbers, 0 equal to 0.0;
    floats to 1e-4 relative, 1e-5 absolute), else a short account of the
    first difference that shows the submission's value, never the
    reference's. A call that drew from torch's random generator (dropout)
    is compared by shapes and types only (`values=False`): an honest
    dropout may draw differently; its values are compared on the grader's
    own inputs, which draw nothing."""
    if isinstance(theirs, dict) and "random" in theirs:
        if not (isinstance(mine, dict) and "random" in mine):
            return f"{where} draws no random numbers where the reference's does (dropout?)"
        return differs(mine["random"], theirs["random"], where, values=False)
    if isinstance(mine, dict) and "random" in mine:
        mine = mine["random"]
    if _is_number(theirs):
        if not _is_number(mine):
            return f"{where} is {_kind(mine)}, expected a number"
        if values and not _close(_number_of(mine), _number_of(theirs)):
            return f"{where} returned {_show(mine)}, which is not the reference's value"
        return None
    if isinstance(theirs, dict) and "tensor" in theirs:
        if not (isinstance(mine, dict) and "tensor" in mine):
            return f"{where} is {_kind(mine)}, expected a {theirs['tensor']} tensor of shape {tuple(theirs['shape'])}"
        if mine["shape"] != theirs["shape"]:
            return f"{where} has shape {tuple(mine['shape'])}, expected {tuple(theirs['shape'])}"
        if mine["tensor"] != theirs["tensor"]:
            return f"{where} is {mine['tensor']}, expected {theirs['tensor']}"
        if not values:
            return None
        for i, (a, b) in enumerate(zip(mine["values"], theirs["values"])):
            if not _close(a, b):
                return f"{where} differs from the reference's: {a!r} at value {i} checked"
        if len(mine["values"]) != len(theirs["values"]) or not _close(mine["sum"], theirs["sum"], 1e-3, 1e-3):
            return f"{where} differs from the reference's (its sum is {mine['sum']!r})"
        return None
    if isinstance(theirs, dict):
        if not isinstance(mine, dict):
            return f"{where} is {_kind(mine)}, expected {_kind(theirs)}"
        for key in theirs:
            if key not in mine:
                return f"{where} has no {key!r}"
            problem = differs(mine[key], theirs[key], f"{where}[{key!r}]" if key not in ("fields", "state",
                                                                                       "arguments") else where,
                              values)
            if problem:
                return problem
        extra = set(mine) - set(theirs)
        return f"{where} has {sorted(extra)[0]!r}, which the reference's has not" if extra else None
    if isinstance(theirs, list):
        if not isinstance(mine, list):
            return f"{where} returned {_show(mine)}, expected a list or tuple"
        if len(mine) != len(theirs):
            return f"{where} returned {len(mine)} items, expected {len(theirs)}"
        for i, (a, b) in enumerate(zip(mine, theirs)):
            problem = differs(a, b, f"{where}[{i}]", values)
            if problem:
                return problem
        return None
    if type(mine) is not type(theirs) or (values and mine != theirs):
        return f"{where} returned {_show(mine)}, which is not what the reference's returns"
    return None


def _is_number(digest):
    return (isinstance(digest, int) and not isinstance(digest, bool)) or (isinstance(digest, dict)
                                                                         and set(digest) == {"float"})


def _number_of(digest):
    return digest["float"] if isinstance(digest, dict) else digest


def _close(a, b, rtol=1e-4, atol=1e-5):
    if isinstance(a, str) or isinstance(b, str):
        return a == b                # "nan", "inf": not finite, compared as written
    if isinstance(a, int) and isinstance(b, int):
        return a == b                # exact, however large (a varint of 64 bits)
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def _kind(value):
    if isinstance(value, dict):
        return (f"a {value['object']}" if "object" in value else "a module" if "module" in value
                else "a float" if "float" in value else "a dict")
    return type(value).__name__ if value is not None else "None"


def _plain(value):
    """A digest as the value it stands for, for messages."""
    if isinstance(value, dict):
        if "float" in value:
            return value["float"]
        if "tensor" in value:
            return f"<{value['tensor']} tensor of shape {tuple(value['shape'])}>"
        if "object" in value or "module" in value:
            return f"<{value.get('object') or value.get('module')}>"
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _show(value):
    text = str(_plain(value))
    return text if len(text) <= 80 else text[:77] + "..."


# ---- the grade -------------------------------------------------------------


def check(submission=None, names=(), assignments=(), *, reference, data=None, exercise_seconds=EXERCISE_SECONDS,
          import_seconds=IMPORT_SECONDS, total_seconds=TOTAL_SECONDS, milestone_seconds=MILESTONE_SECONDS,
          milestone_target=None, threads=1, unsandboxed=False, limits=None):
    """Grade `submission` (a repository, a folder one level above one, or a
    minibert/ package; default: the reference itself) with the tests,
    fixtures and outputs of `reference` (the instructor's checkout). `data`:
    the folder holding SST-2 (milestone.SST2_FILES); an end-to-end row that
    reads a file it lacks (every such row, when `data` is None) is left out
    with a note, where the command line refuses to grade at all
    (__main__.require_data). The submission runs in a bubblewrap jail with
    `limits` (sandbox.Limits); `unsandboxed=True` grades without one where
    none can be built, and every report says so. Returns a Grade."""
    from minibert.coursework.student import write_student_copy
    began = time.monotonic()
    deadline = began + total_seconds
    reference = Path(reference).resolve()
    if not (reference / "minibert").is_dir() or not (reference / TESTS_FOLDER).is_dir():
        raise CourseworkError(f"{reference}: not a minibert checkout (no minibert/ and {TESTS_FOLDER}/)")
    notes = []
    if unsandboxed:
        notes.append(UNSANDBOXED_NOTE)
    else:
        try:
            sandbox.check_available()
        except sandbox.SandboxUnavailable as e:
            raise CourseworkError(f"{e}; grading without it lets the submission read and change this machine's "
                                  f"files: give --unsandboxed to grade anyway (the results say so)") from None
    data = Path(data).resolve() if data is not None else None
    chosen = select(names, assignments)
    try:
        package = find_package(submission or reference)
    except CourseworkError as e:   # a submission the grader cannot take scores 0, and says why
        return Grade([Row(n, ASSIGNMENT_OF[n], 0.0, 1.0, "failed", str(e)) for n in chosen], notes + [str(e)],
                     time.monotonic() - began)
    tests, _ = exercise_tests(reference)
    regions = {r.name: r for r in find_regions(reference)[0]}
    wanted = []
    for row, child, switches, needs in END_TO_END:
        if any(e in chosen for e in switches):
            problem = milestone.missing_data(data, needs) if needs else None
            if problem:
                notes.append(f"{row}: not graded here ({problem})")
            else:
                wanted.append(child)
    with tempfile.TemporaryDirectory(prefix="minibert-grade-") as scratch:
        scratch = Path(scratch)
        for source in (RUNNER, PROBES):
            shutil.copyfile(source, scratch / source.name)
        tree = scratch / "tree"
        write_student_copy(reference, tree)
        notes += copy_submission(package, tree)
        inputs = scratch / "inputs"         # what the child may read besides the tree: never a dev label
        inputs.mkdir()
        _pytest_ini(reference, scratch)
        (scratch / "blocker.py").write_text("raise ImportError('the grader keeps this reference implementation "
                                            "from graded code')\n", encoding="utf-8")
        spec = {"threads": threads, "seed": secrets.randbelow(1 << 31),
                "watch": [{"exercise": n, "module": regions[n].path[:-3].replace("/", "."),
                           "qualname": regions[n].function, "forbidden": FORBIDDEN.get(n, {})}
                          for n in chosen if n in regions],
                "hidden": [n for n in chosen if n in regions], "sentences": "", "milestone": {}}
        dev_pairs = []
        if "wordpiece" in wanted:
            spec["sentences"] = "sst2-dev-sentences.txt"
            milestone.write_sentences(data / "sst2" / "dev.tsv", inputs / spec["sentences"])
        if "milestone" in wanted:
            spec["milestone"] = milestone.prepare(data / "sst2", inputs)
            spec["milestone"]["train"] = Path(spec["milestone"]["train"]).name
            dev_pairs = milestone.read_sst2(data / "sst2" / "dev.tsv")
        items = [(n, [f"{file}::{function}" for file, function in tests.get(n, [])]) for n in chosen]
        items = [(n, t) for n, t in items if t or n in spec["hidden"]] + [(f"end-to-end:{c}", []) for c in wanted]
        seconds = {"exercise": exercise_seconds, "import": import_seconds, "milestone": milestone_seconds}
        # The instructor's run: trusted code on its own checkout, generous limits.
        expected = run_tree([i for i in items if i[0] != "end-to-end:milestone"],
                            place=Place(reference, scratch, graded=False), spec_extra=spec,
                            limits={k: max(v, 600) for k, v in seconds.items()}, deadline=deadline + 3600)
        if "attention" in expected.end_to_end and "data" in expected.end_to_end["attention"]:
            spec["attention_batch"] = expected.end_to_end["attention"]["data"]["batch"]
        jail = None if unsandboxed else {"limits": limits or sandbox.Limits(), "blocker": scratch / "blocker.py",
                                         "hidden": _hidden_folders(reference, data)}
        found = run_tree(items, place=Place(tree, scratch, graded=True, jail=jail), spec_extra=spec, limits=seconds,
                         deadline=deadline)
        rows = [_exercise_row(n, tests.get(n, []), expected, found, regions) for n in chosen]
        rows += [_end_to_end_row(c, expected, found, dev_pairs, milestone_target) for c in wanted]
    return Grade(rows, notes, time.monotonic() - began)


UNSANDBOXED_NOTE = ("UNSANDBOXED: graded without the bubblewrap jail (--unsandboxed); the submission could "
                    "read and change the grader's files, so these results prove nothing against a dishonest one")


def _exercise_row(name, own, expected, found, regions):
    number = ASSIGNMENT_OF[name]
    seconds = round(found.seconds.get(name, 0.0), 2)

    def failed(note):
        return Row(name, number, 0.0, 1.0, "failed", note, seconds)

    if not own:
        return failed(f"no {test_prefix(name)}* test found under {TESTS_FOLDER}/")
    ids = sorted(t for t in expected.tests if t.split("[")[0] in {f"{f}::{fn}" for f, fn in own})
    if not ids:
        return failed(f"the instructor's checkout did not run this exercise's tests: "
                      f"{expected.stopped.get(name) or (expected.collect_errors or ['no report'])[0]}")
    for test in ids:
        theirs, mine = expected.tests[test], found.tests.get(test)
        function = test.split("::", 1)[1]
        if theirs.get("outcome") != "passed":
            return failed(f"{function}: fails on the instructor's checkout too ({theirs.get('message')})")
        if mine is None:
            why = found.stopped.get(name) or (f"not run: {found.collect_errors[0]}" if found.collect_errors
                                              else "not run")
            return failed(f"{function}: {why}")
        if mine.get("outcome") != "passed":
            return failed(f"{function}: {mine.get('message') or 'failed'}")
        calls, reference_calls = mine.get("calls"), theirs.get("calls")
        if not isinstance(calls, list) or len(calls) != len(reference_calls):
            return failed(f"{function}: called {regions[name].function if name in regions else name} "
                          f"{len(calls) if isinstance(calls, list) else 0} times where the reference does "
                          f"{len(reference_calls)} times")
        for i, (a, b) in enumerate(zip(calls, reference_calls)):
            problem = differs(a, b, f"call {i + 1} of {regions[name].function}")
            if problem:
                return failed(f"{function}: {problem}")
    problem = _hidden_problem(name, expected, found, regions)
    if problem:
        return failed(problem)
    if name in found.stopped:
        return failed(found.stopped[name])
    return Row(name, number, 1.0, 1.0, "passed", f"{len(ids)} test{'s' if len(ids) > 1 else ''} passed", seconds)


def _hidden_problem(name, expected, found, regions):
    """Why the exercise's calls on the grader's own inputs (probes.py) do
    not match the reference's, or None. The note never shows the inputs or
    the reference's values: they are this grade's secret."""
    theirs = expected.hidden.get(name)
    if theirs is None or theirs.get("error"):
        return None        # the instructor's checkout cannot run this probe (a changed exercise): tests only
    mine = found.hidden.get(name)
    where = "on inputs the grader drew for this grade"
    function = regions[name].function if name in regions else name
    if mine is None:
        return f"{where}: {found.stopped.get(name) or 'not run'}"
    if mine.get("error"):
        return f"{where}: {mine['error']}"
    calls, reference_calls = mine.get("calls"), theirs.get("calls", [])
    if not isinstance(calls, list) or len(calls) != len(reference_calls):
        return (f"{where}: {function} was called {len(calls) if isinstance(calls, list) else 0} times where the "
                f"reference's is called {len(reference_calls)} times")
    for i, (a, b) in enumerate(zip(calls, reference_calls)):
        if differs(a, b):
            return f"{where}: call {i + 1} of {function} returned something else than the reference's"
    return None


def _end_to_end_row(child, expected, found, dev_pairs, milestone_target):
    row = END_TO_END_OF[child]
    first = dict((r, s) for r, _, s, _ in END_TO_END)[row][0]
    number = ASSIGNMENT_OF.get(first, milestone.ASSIGNMENT)
    seconds = round(found.seconds.get(f"end-to-end:{child}", 0.0), 2)
    theirs, mine = expected.end_to_end.get(child, {}), found.end_to_end.get(child)

    def result(ok, note):
        return Row(row, number, 1.0 if ok else 0.0, 1.0, "passed" if ok else "failed", note, seconds)

    if child != "milestone" and "data" not in theirs:
        return result(False, f"the instructor's checkout fails this check: {theirs.get('error', 'no report')}")
    if mine is None:
        return result(False, found.stopped.get(f"end-to-end:{child}", "not run"))
    if "data" not in mine:
        return result(False, str(mine.get("error", "failed"))[:300])
    try:
        if child == "attention":
            return result(*_compare_attention(mine["data"], theirs["data"]))
        if child == "wordpiece":
            return result(*_compare_tokens(mine["data"], theirs["data"]))
        return result(*milestone.score(mine["data"], dev_pairs, milestone_target))
    except (KeyError, TypeError, ValueError, IndexError) as e:
        return result(False, f"the check's outputs are not what it returns ({type(e).__name__})")


def _compare_attention(mine, theirs):
    import torch
    a = [torch.tensor(h, dtype=torch.float64) for h in mine["hidden_states"]]
    b = [torch.tensor(h, dtype=torch.float64) for h in theirs["hidden_states"]]
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return False, "the written-out model's layer outputs have other shapes than the fused model's"
    worst = max((x - y).abs().max().item() for x, y in zip(a, b))
    real = torch.tensor(theirs["batch"]["attention_mask"]).bool()
    same = bool((torch.tensor(mine["top1"]) == torch.tensor(theirs["top1"]))[real].all())
    ok = worst <= 1e-5 and same
    return ok, (f"bundled model, {real.shape[0]} sentences: every layer's output within {worst:.1e} of the "
                f"instructor's fused model ({'<=' if worst <= 1e-5 else '>'} 1e-5), MLM top-1 "
                f"{'identical' if same else 'different'}")


def _compare_tokens(mine, theirs):
    if not isinstance(mine, list) or len(mine) != len(theirs):
        return False, "not one token list per sentence"
    wrong = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    note = f"SST-2 dev: {len(theirs) - len(wrong)} of {len(theirs)} sentences tokenized as the reference does"
    if wrong:
        note += f"; first different: sentence {wrong[0] + 1}, {_show(mine[wrong[0]])} where it gives " \
                f"{_show(theirs[wrong[0]])}"
    return not wrong, note


# ---- reports ---------------------------------------------------------------


def table(grade):
    """The rows as a plain-text table with a total, then the notes."""
    rows = grade.rows
    width = max([len(r.name) for r in rows] + [len("exercise")])
    lines = [f"{'exercise':<{width}}  asg  points  result   note", "-" * (width + 40)]
    for r in rows:
        points = f"{r.points:g}/{r.max_points:g}"
        lines.append(f"{r.name:<{width}}  {r.assignment:>3}  {points:>6}  {r.status:<7}  {r.output}")
    score, total = sum(r.points for r in rows), sum(r.max_points for r in rows)
    lines += ["-" * (width + 40), f"{'total':<{width}}       {score:g}/{total:g}"]
    for note in grade.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def gradescope(grade):
    """Gradescope's results.json, in full: per test its name, number, score,
    max_score, status, output and visibility; at the top the score, the
    execution time, the notes and the visibility of the output."""
    return {
        "score": sum(r.points for r in grade.rows),
        "execution_time": round(grade.seconds, 1),
        "output": "\n".join(grade.notes),
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": [{"name": f"{r.assignment}. {r.name}", "number": str(i + 1), "score": r.points,
                   "max_score": r.max_points, "status": r.status, "output": r.output, "visibility": "visible",
                   "extra_data": {"seconds": r.seconds}} for i, r in enumerate(grade.rows)],
    }


def all_passed(grade):
    return bool(grade.rows) and all(r.status == "passed" for r in grade.rows)
