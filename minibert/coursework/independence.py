"""Every exercise is non-empty and independent: the independence sweep.

For each exercise: blank it alone, import the package afresh, call every
exercise test directly (they take no fixtures, by the tests' convention),
and require that its own tests fail and every other exercise's tests still
succeed; on the reference they must all succeed.

All rounds run in this one process: a copy of the package sits first on
sys.path, only the blanked file changes between rounds, and the `minibert`
and test modules are dropped from sys.modules before each round (torch and
the rest stay imported). The reference round traces which regions each test
enters; a test that never enters region X runs exactly as in the reference
when X is blanked (nothing it executes has changed), so a round reruns only
X's own tests and the tests that enter X (`full=True` reruns them all).

Run it in a fresh process (`python -m minibert.coursework sweep`): it
replaces the `minibert` modules of the process it runs in.
"""

import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from minibert.coursework.exercises import TESTS_FOLDER, blank, exercise_tests, regions_to_blank


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
