"""The assignment table, the exercise regions marked in the lesson code, and the
sweep that proves each region non-empty and independent of the others.

A region is a block of one function's body between two plain comments at
the body's indentation:

    # exercise: layer-norm
    ...the reference code...
    # end exercise

`find_regions` scans minibert/ for them and checks them against the table
below; `blank` replaces a region's lines by one `raise NotImplementedError`.
An exercise's tests are the `test_exercise_<name>*` functions of the
checkout's tests/ folder (`exercise_tests`).
"""

import ast
import importlib
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from minibert.support import MiniBertError

TABLE_FILE = "minibert/coursework/exercises.py"
# A checkout holds the package and, beside it, this folder of tests: the
# exercises' tests and the helper modules they import (it goes on sys.path).
TESTS_FOLDER = "tests"


@dataclass(frozen=True)
class Assignment:
    number: int
    title: str
    goal: str         # the learning goal, one sentence
    exercises: tuple  # exercise names, in reading order


ASSIGNMENTS = (
    Assignment(1, "The Transformer encoder",
               "Write BERT's encoder piece by piece (the embedding sum, scaled dot-product attention with its "
               "padding mask and heads, GELU, LayerNorm, the feed-forward block, ALBERT's shared-layer depth plan) "
               "until the written-out model reproduces the fused one.",
               ("embeddings-sum", "attention", "padding-mask", "split-merge-heads", "gelu-erf", "gelu-tanh",
                "layer-norm", "feed-forward", "albert-depth-plan")),
    Assignment(2, "Tokenization and pretraining",
               "Turn text into WordPiece tokens exactly as Google's BERT does, and write the masked-LM "
               "objective: 80/10/10 masking, the sparse MLM loss and the warm-up learning-rate schedule.",
               ("basic-tokenizer", "wordpiece", "mlm-masking", "mlm-loss", "lr-schedule")),
    Assignment(3, "Reading real checkpoints",
               "Read Google's TensorFlow checkpoints without TensorFlow: protobuf varints, one TensorBundle "
               "index entry and LevelDB's masked CRC32C.",
               ("varint", "tensorbundle-entry", "masked-crc32c")),
    Assignment(4, "Kao et al.: what each layer knows",
               "Measure how well each layer's output reconstructs the input through the MLM head (top-1 and "
               "top-5), and duplicate layers, untied and tied, as Kao et al. do.",
               ("reconstruction-score", "duplicate-untied", "duplicate-tied")),
    Assignment(5, "Fine-tuning",
               "Fine-tune BERT for classification, NER and SQuAD: the classification head on the pooled output, "
               "first-sub-token label alignment, conlleval's chunks, span decoding and the official F1.",
               ("classification-head", "first-piece-labels", "conll-chunks", "squad-span", "squad-f1")),
    Assignment(6, "Distillation",
               "Distil BERT into a BiLSTM (Tang et al.): the LSTM cell's gates, the distillation loss, and the "
               "masking and POS-guided word replacement of the data augmentation.",
               ("lstm-gates", "distillation-loss", "augment-mask-pos")),
    Assignment(7, "DeBERTa",
               "Write DeBERTa's disentangled attention and its fine-tuning trick: log-bucket relative "
               "positions, the content-to-position and position-to-content gathers, SiFT's normalised "
               "perturbation.",
               ("log-bucket", "c2p-p2c", "sift-perturbation")),
    Assignment(8, "The milestone: your BERT fine-tuned on SST-2",
               "Write AdamW's update (with Adam's bias correction, and Google's variant without it) and the "
               "training step, then fine-tune your own model, tokenizer, head, optimizer and step on real SST-2 "
               "sentences to the target accuracy.",
               ("adamw-update", "training-step")),
)

ASSIGNMENT_OF = {name: a.number for a in ASSIGNMENTS for name in a.exercises}
EXERCISE_NAMES = tuple(ASSIGNMENT_OF)

# The two marker comments, matched on a whole line (a little leniently, so a
# misspelt marker is reported rather than silently ignored).
START = re.compile(r"^(?P<indent>[ \t]*)#\s*exercise\s*:\s*(?P<name>\S*)\s*$", re.IGNORECASE)
END = re.compile(r"^(?P<indent>[ \t]*)#\s*end\s+exercise\s*$", re.IGNORECASE)


class CourseworkError(MiniBertError):
    """A marker, a name or a folder the coursework tools cannot use."""


@dataclass(frozen=True)
class Region:
    name: str
    assignment: int
    path: str       # relative to the repository, with "/"
    function: str   # Class.method or function
    start: int      # line of the opening marker (1-based)
    end: int        # line of the closing marker
    indent: str     # the markers' indentation

    @property
    def where(self):
        return f"{self.path}:{self.start}-{self.end}"


def assignment(number):
    for a in ASSIGNMENTS:
        if a.number == number:
            return a
    raise CourseworkError(f"no assignment {number}; the assignments are "
                          f"{', '.join(str(a.number) for a in ASSIGNMENTS)}")


def test_prefix(name):
    """The name every test function of exercise `name` starts with."""
    return "test_exercise_" + name.replace("-", "_")


def exercise_of_test(function_name):
    """The exercise a `test_exercise_*` function belongs to, or None: the
    longest name whose prefix it has, followed by nothing or "_"."""
    matches = [name for name in EXERCISE_NAMES
               if function_name == test_prefix(name) or function_name.startswith(test_prefix(name) + "_")]
    return max(matches, key=len, default=None)


def _functions(tree):
    """(qualified name, first line, last line) of every function in a module."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child.lineno, child.end_lineno))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _innermost_function(functions, line):
    inside = [f for f in functions if f[1] < line <= f[2]]
    return min(inside, key=lambda f: f[2] - f[1], default=None)


def scan_text(text, path):
    """The regions marked in one file's text: (regions, errors), each error
    one line naming the file and line."""
    regions, errors, open_marker = [], [], None
    lines = text.splitlines()
    try:
        functions = _functions(ast.parse(text))
    except SyntaxError as e:
        return [], [f"{path}:{e.lineno}: cannot parse: {e.msg}"]
    for number, line in enumerate(lines, start=1):
        start, end = START.match(line), END.match(line)
        if start:
            name = start["name"]
            if open_marker is not None:
                errors.append(f"{path}:{number}: exercise {name!r} starts inside exercise {open_marker[1]!r} "
                              f"(opened at line {open_marker[0]}); regions do not nest")
                open_marker[3] = True  # the outer region is broken too
                continue
            if name not in ASSIGNMENT_OF:
                errors.append(f"{path}:{number}: exercise {name!r} is not in the assignment table ({TABLE_FILE})")
            open_marker = [number, name, start["indent"], name not in ASSIGNMENT_OF]
        elif end:
            if open_marker is None:
                errors.append(f"{path}:{number}: '# end exercise' without an opening '# exercise: NAME'")
                continue
            first, name, indent, broken = open_marker
            open_marker = None
            body = [n for n in range(first + 1, number)
                    if lines[n - 1].strip() and not lines[n - 1].strip().startswith("#")]
            # Comments are not in the syntax tree: the region's first and last
            # code lines say which function it sits in.
            function = _innermost_function(functions, body[0]) if body else None
            if broken:
                continue  # already reported
            if not body:
                errors.append(f"{path}:{first}: exercise {name!r} is empty (no code between its markers)")
            elif end["indent"] != indent:
                errors.append(f"{path}:{number}: the end of exercise {name!r} is not at the indentation "
                              f"of its start (line {first})")
            elif function is None or function != _innermost_function(functions, body[-1]) or first <= function[1]:
                errors.append(f"{path}:{first}: exercise {name!r} is not inside one function "
                              f"(its markers must sit in the same function's body)")
            else:
                regions.append(Region(name, ASSIGNMENT_OF[name], path, function[0], first, number, indent))
    if open_marker is not None:
        errors.append(f"{path}:{open_marker[0]}: exercise {open_marker[1]!r} is never closed (no '# end exercise')")
    return regions, errors


def lesson_files(repo):
    """The package's .py files that may hold exercises (not this tooling)."""
    package = Path(repo) / "minibert"
    if not package.is_dir():
        raise CourseworkError(f"{repo}: no minibert/ package here")
    return sorted(p for p in package.rglob("*.py")
                  if "coursework" not in p.relative_to(package).parts[:1] and "__pycache__" not in p.parts)


def find_regions(repo):
    """Every region under repo/minibert: (regions in table order, errors).
    Errors: bad markers (see scan_text), a name marked twice, and a name of
    the table marked nowhere."""
    regions, errors, missing = _regions_and_errors(repo)
    return regions, errors + missing


def regions_to_blank(repo):
    """The regions of repo/minibert for a tool that rewrites them (the
    student copy, the sweep): (regions, missing), where `missing` names the
    exercises of the table marked nowhere (a repository may hold part of
    the table). Any other error (a bad marker, a name marked twice) raises."""
    regions, errors, missing = _regions_and_errors(repo)
    if errors:
        raise CourseworkError(errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    return regions, missing


def _regions_and_errors(repo):
    """(regions in table order, errors in the markers, exercises marked nowhere)."""
    repo = Path(repo)
    regions, errors = [], []
    for file in lesson_files(repo):
        text = file.read_text(encoding="utf-8")
        if "exercise" not in text.lower():
            continue
        found, bad = scan_text(text, file.relative_to(repo).as_posix())
        regions += found
        errors += bad
    seen = {}
    for region in regions:
        if region.name in seen:
            errors.append(f"{region.path}:{region.start}: exercise {region.name!r} is marked twice "
                          f"(also {seen[region.name].path}:{seen[region.name].start})")
        else:
            seen[region.name] = region
    missing = [f"{TABLE_FILE}: exercise {name!r} of assignment {a.number} is not marked in the code "
               f"(no '# exercise: {name}' under minibert/)"
               for a in ASSIGNMENTS for name in a.exercises if name not in seen]
    order = {name: i for i, name in enumerate(EXERCISE_NAMES)}
    return sorted(seen.values(), key=lambda r: order[r.name]), errors, missing


def placeholder(name):
    return f'raise NotImplementedError("exercise {name}: see docs/coursework.md#{name}")'


def blank(text, regions):
    """`text` with the lines strictly between each region's markers replaced
    by one `raise NotImplementedError(...)` at the markers' indentation.
    `regions` must all come from this text (scan_text)."""
    lines = text.splitlines(keepends=True)
    for region in sorted(regions, key=lambda r: r.start, reverse=True):
        lines[region.start:region.end - 1] = [region.indent + placeholder(region.name) + "\n"]
    return "".join(lines)


def exercise_tests(repo):
    """The `test_exercise_*` functions under repo/tests: ({exercise name:
    [(test file relative path, function name), ...]}, [strays]) where a
    stray is "file::function" matching no exercise of the table."""
    tests, strays = {}, []
    for file in sorted((Path(repo) / TESTS_FOLDER).glob("test_*.py")):
        text = file.read_text(encoding="utf-8")
        if "test_exercise_" not in text:
            continue
        relative = file.relative_to(repo).as_posix()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_exercise_"):
                name = exercise_of_test(node.name)
                if name is None:
                    strays.append(f"{relative}::{node.name}")
                else:
                    tests.setdefault(name, []).append((relative, node.name))
    return tests, strays


# The independence sweep: every exercise is non-empty and independent ------------------------------------------
#
# For each exercise: blank it alone, import the package afresh, call every
# exercise test directly (they take no fixtures, by the tests' convention),
# and require that its own tests fail and every other exercise's tests still
# succeed; on the reference they must all succeed.
#
# All rounds run in this one process: a copy of the package sits first on
# sys.path, only the blanked file changes between rounds, and the `minibert`
# and test modules are dropped from sys.modules before each round (torch and
# the rest stay imported). The reference round traces which regions each test
# enters; a test that never enters region X runs exactly as in the reference
# when X is blanked (nothing it executes has changed), so a round reruns only
# X's own tests and the tests that enter X (`full=True` reruns them all).
#
# Run it in a fresh process (`python -m minibert.coursework sweep`): it
# replaces the `minibert` modules of the process it runs in.


def _parameter_sets(function):
    """The keyword arguments of each call of a (maybe parametrized) test."""
    combos = [{}]
    for mark in reversed(getattr(function, "pytestmark", [])):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        expanded = []
        for combo in combos:
            for value in values:
                if type(value).__name__ == "ParameterSet":  # pytest.param(...): its values are a tuple
                    value = tuple(value.values)
                else:
                    value = (value,) if len(names) == 1 else tuple(value)
                expanded.append({**combo, **dict(zip(names, value))})
        combos = expanded
    return combos


def _first_line(error):
    text = f"{type(error).__name__}: {error}"
    return text.strip().splitlines()[0]


class Sweep:
    def __init__(self, repo, full=False):
        self.repo = Path(repo).resolve()
        self.full = full
        self.regions, self.missing = regions_to_blank(self.repo)
        self.tests, self.strays = exercise_tests(self.repo)
        self.owner = {test: name for name, tests in self.tests.items() for test in tests}
        self.scratch = Path(tempfile.mkdtemp(prefix="minibert-sweep-")).resolve()
        shutil.copytree(self.repo / "minibert", self.scratch / "minibert",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        self.tests_dir = str(self.repo / TESTS_FOLDER)
        sys.dont_write_bytecode = True
        sys.path[:0] = [str(self.scratch), self.tests_dir, str(self.repo)]

    def close(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _purge(self):
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None) or ""
            if name == "minibert" or name.startswith("minibert.") or file.startswith(self.tests_dir):
                del sys.modules[name]
        importlib.invalidate_caches()

    def _tracer(self, hits):
        spans = {}
        for r in self.regions:
            spans.setdefault(str(self.scratch / r.path), []).append((r.name, r.start + 1, r.end - 1))

        def global_trace(frame, event, arg):
            file_spans = spans.get(frame.f_code.co_filename)
            if file_spans is None:
                return None

            def local_trace(frame, event, arg):
                if event == "line":
                    line = frame.f_lineno
                    for name, first, last in file_spans:
                        if first <= line <= last:
                            hits.add(name)
                return local_trace
            return local_trace
        return global_trace

    def round(self, tests, blanked=None, trace=False):
        """{test: (passed, note)} and {test: regions entered} for `tests`
        with region `blanked` (or none) blanked."""
        target = self.scratch / blanked.path if blanked else None
        original = target.read_text(encoding="utf-8") if target else None
        if target:
            target.write_text(blank(original, [blanked]), encoding="utf-8")
        outcomes, reached = {}, {}
        try:
            self._purge()
            modules = {}
            for file in sorted({file for file, _ in tests}):
                try:
                    modules[file] = importlib.import_module(Path(file).stem)
                except BaseException as e:  # noqa: BLE001 (a broken copy must be reported, not crash the sweep)
                    modules[file] = e
            for test in tests:
                module = modules[test[0]]
                if isinstance(module, BaseException):
                    outcomes[test] = (False, f"import failed: {_first_line(module)}")
                    continue
                function = getattr(module, test[1])
                hits = set()
                if trace:
                    sys.settrace(self._tracer(hits))
                try:
                    for kwargs in _parameter_sets(function):
                        function(**kwargs)
                    outcomes[test] = (True, "")
                except KeyboardInterrupt:
                    raise
                except BaseException as e:  # noqa: BLE001 (pytest's skip and fail are BaseExceptions too)
                    outcomes[test] = (False, _first_line(e))
                finally:
                    if trace:
                        sys.settrace(None)
                reached[test] = hits
        finally:
            if target:
                target.write_text(original, encoding="utf-8")
        return outcomes, reached

    def run(self):
        started = time.perf_counter()
        all_tests = [test for name in self.tests for test in self.tests[name]]
        problems = list(self.missing)
        problems += [f"{stray}: a test_exercise_ test of no exercise in the table" for stray in self.strays]
        reference, reached = self.round(all_tests, trace=True)
        for test, (passed, note) in reference.items():
            if not passed:
                problems.append(f"reference: {test[0]}::{test[1]} fails: {note}")
        exercises = {}
        for region in self.regions:
            own = self.tests.get(region.name, [])
            if not own:
                problems.append(f"{region.where}: exercise {region.name!r} has no test_exercise_ test")
            others = [t for t in all_tests if t not in own and (self.full or region.name in reached[t])]
            outcomes, _ = self.round(own + others, blanked=region)
            for test in own:
                if outcomes[test][0]:
                    problems.append(f"blanking {region.name!r} leaves its test {test[0]}::{test[1]} succeeding "
                                    f"(the test does not depend on the region)")
            for test in others:
                if not outcomes[test][0] and reference[test][0]:
                    problems.append(f"blanking {region.name!r} makes {test[0]}::{test[1]} (exercise "
                                    f"{self.owner[test]!r}) fail: {outcomes[test][1]}")
            exercises[region.name] = {"region": region.where, "tests": [f"{f}::{t}" for f, t in own],
                                      "rerun": len(own) + len(others),
                                      "reached_by_others": sorted(f"{f}::{t}" for f, t in others
                                                                  if region.name in reached[(f, t)])}
        return {"exercises": exercises, "problems": problems, "tests": len(all_tests),
                "rounds": 1 + len(self.regions), "seconds": round(time.perf_counter() - started, 2)}


def sweep(repo, full=False):
    """The sweep's report: {"exercises", "problems", "tests", "rounds", "seconds"}."""
    runner = Sweep(repo, full=full)
    try:
        return runner.run()
    finally:
        runner.close()
