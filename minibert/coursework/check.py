"""The autograder: run the chosen exercises' tests against a copy of the
repository and score them, one point an exercise.

All the tests run in ONE pytest subprocess inside the copy (its own
minibert first on the path), read back per test from pytest's JUnit XML.
Two exercises are also checked end to end, in a second subprocess: the
student's `attention` inside the whole bundled model (the written-out
attention reproduces the fused model's outputs to 1e-5), and the student's
`basic-tokenizer` + `wordpiece` on the SST-2 dev file (written_out_tokenize
equals Tokenizer.tokenize on every sentence) where that file is found.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from minibert.coursework.exercises import ASSIGNMENT_OF, CourseworkError, assignment, exercise_tests

HERE_REPO = Path(__file__).resolve().parents[2]
SST2_DEV = Path("..") / "shared" / "data" / "sst2" / "dev.tsv"


@dataclass
class Row:
    name: str
    assignment: int
    points: float
    max_points: float
    status: str     # "passed", "failed" or "skipped"
    output: str     # the first line of the failure, or a note


# The end-to-end checks: (row name, the exercises that switch it on).
END_TO_END = (
    ("attention:bundled-model", ("attention",)),
    ("wordpiece:sst2-dev", ("basic-tokenizer", "wordpiece")),
)

# The grading run, inside the copy: pytest on the exercise tests (results to
# a JUnit XML file), then the end-to-end checks, in the same process so
# torch is imported once. argv[1]: {"pytest": [...], "checks": [...], "sst2": path or ""}.
RUNNER = r'''
import json, sys
spec = json.loads(sys.argv[1])
if spec["pytest"]:
    import pytest
    pytest.main(spec["pytest"])
checks, sst2 = spec["checks"], spec["sst2"]
results = {}


def first_line(e):
    text = f"{type(e).__name__}: {e}"
    return text.splitlines()[0] if text.strip() else type(e).__name__

if "attention:bundled-model" in checks:
    try:
        import torch
        from minibert import load_pretrained, load_tokenizer
        from minibert.model import SelfAttention
        model, tokenizer = load_pretrained(), load_tokenizer()
        sentences = ["the cat sat on the mat .", "she opened the door and [MASK] into the garden .",
                     "a long time ago , in a small village by the sea , there lived an old fisherman .", "yes"]
        batch = tokenizer.batch_encode(sentences)
        with torch.no_grad():
            fused = model(**batch)
            for module in model.modules():   # only attention written out: the other exercises stay fused
                if isinstance(module, SelfAttention):
                    module.written_out = True
            written = model(**batch)
        # Every layer's output to 1e-5; the MLM logits (up to ~25 in size) are
        # compared by their top-1 predictions on the real tokens.
        worst = max((a - b).abs().max().item() for a, b in zip(fused.hidden_states, written.hidden_states))
        real = batch["attention_mask"].bool()
        same_top1 = bool((fused.mlm_logits.argmax(-1) == written.mlm_logits.argmax(-1))[real].all())
        ok = worst <= 1e-5 and same_top1
        results["attention:bundled-model"] = (ok, f"bundled model, {len(sentences)} sentences: every layer's output "
                                                  f"within {worst:.1e} of the fused model's "
                                                  f"({'<=' if worst <= 1e-5 else '>'} 1e-5), MLM top-1 "
                                                  f"{'identical' if same_top1 else 'different'}")
    except BaseException as e:
        results["attention:bundled-model"] = (False, first_line(e))

if "wordpiece:sst2-dev" in checks:
    if not sst2:
        results["wordpiece:sst2-dev"] = (None, "skipped: no ../shared/data/sst2/dev.tsv next to the repository")
    else:
        try:
            from minibert import load_tokenizer
            from minibert.tokenization import written_out_tokenize
            tokenizer = load_tokenizer()
            vocab = tokenizer.backend.get_vocab()
            with open(sst2, encoding="utf-8") as f:
                sentences = [line.rstrip("\n").split("\t")[0] for line in f][1:]
            wrong = [s for s in sentences
                     if written_out_tokenize(s, vocab, tokenizer.do_lower_case) != tokenizer.tokenize(s)]
            results["wordpiece:sst2-dev"] = (not wrong, f"SST-2 dev: {len(sentences) - len(wrong)} of {len(sentences)} "
                                                        f"sentences tokenized as the reference does"
                                                        + (f"; first different: {wrong[0][:60]!r}" if wrong else ""))
        except BaseException as e:
            results["wordpiece:sst2-dev"] = (False, first_line(e))
print("END-TO-END " + json.dumps(results))
'''


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


def _environment(repo):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(repo) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"   # leave no compiled files in the copy
    return env


def _first_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


def find_sst2(repo):
    for base in (Path(repo), HERE_REPO):
        candidate = (base / SST2_DEV).resolve()
        if candidate.is_file():
            return candidate
    return None


def _with_tests_from(repo, tests_from, scratch):
    """A folder that is `repo` except for tests/, taken from `tests_from`:
    links to repo's other entries, a copy of the grader's tests."""
    graded = Path(scratch) / "graded"
    graded.mkdir()
    for entry in repo.iterdir():
        if entry.name != "tests":
            (graded / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    shutil.copytree(tests_from / "tests", graded / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return graded


def run_in_copy(repo, tests, checks, tests_from=None, timeout=1800):
    """Run the test functions [(file, function)] and the end-to-end `checks`
    (row names) in one subprocess in `repo`, with the tests of `tests_from`
    (a repository; default: repo's own). Returns ({(file, function):
    (passed, first line of the failure)}, {check: (passed or None when
    skipped, note)})."""
    if not tests and not checks:
        return {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        sst2 = find_sst2(repo)
        if tests_from is not None and Path(tests_from).resolve() != repo:
            repo = _with_tests_from(repo, Path(tests_from).resolve(), scratch)
        arguments = ["-q", "-p", "no:cacheprovider", "-p", "no:benchmark", "-o", "junit_family=xunit1",
                     f"--junitxml={junit}", *[f"{file}::{function}" for file, function in tests]]
        spec = {"pytest": arguments if tests else [], "checks": list(checks), "sst2": str(sst2 or "")}
        try:
            done = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(spec)], cwd=repo,
                                  env=_environment(repo), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:  # e.g. a loop that never ends in a student's code
            note = f"the tests did not finish within {timeout} s"
            return {test: (False, note) for test in tests}, {name: (False, note) for name in checks}
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1].strip()
        outcomes = _read_junit(junit, tests, last) if junit.exists() else {
            test: (False, f"pytest did not run: {last}") for test in tests}
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("END-TO-END "):
            found = {name: tuple(value) for name, value in json.loads(line[len("END-TO-END "):]).items()}
    end_to_end = {name: found.get(name, (False, f"the end-to-end check did not run: {last}")) for name in checks}
    return outcomes, end_to_end


def _read_junit(junit, tests, last_line):
    outcomes, collection_errors = {}, []
    for case in ET.parse(junit).getroot().iter("testcase"):
        module, name = case.get("classname", ""), case.get("name", "").split("[")[0]
        file = module.replace(".", "/") + ".py"
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if not name or not module:
            collection_errors.append(_first_line(problem.get("message") if problem is not None else ""))
            continue
        passed, note = outcomes.get((file, name), (True, ""))
        if problem is not None:
            message = _first_line(problem.get("message")) or _first_line(problem.text)
            note = note or (f"skipped: {message}" if problem.tag == "skipped" else message)
            passed = False
        outcomes[(file, name)] = (passed, note)
    for test in tests:
        if test not in outcomes:
            outcomes[test] = (False, f"not run: {collection_errors[0] if collection_errors else last_line}")
    return outcomes


def check(repo=None, names=(), assignments=(), tests_from=None):
    """Grade `repo` (this checkout by default) with the exercise tests of
    `tests_from` (this checkout by default, so a copy's edited tests do not
    count): a list of Rows, one per asked-for exercise, then the end-to-end
    rows those exercises switch on."""
    repo = Path(repo or HERE_REPO).resolve()
    tests_from = Path(tests_from or HERE_REPO).resolve()
    for folder in (repo, tests_from):
        if not (folder / "minibert").is_dir() or not (folder / "tests").is_dir():
            raise CourseworkError(f"{folder}: not a minibert repository (no minibert/ and tests/)")
    chosen = select(names, assignments)
    tests, _ = exercise_tests(tests_from)
    wanted = [row for row, exercises in END_TO_END if any(e in chosen for e in exercises)]
    outcomes, end_to_end = run_in_copy(repo, [t for name in chosen for t in tests.get(name, [])], wanted,
                                       tests_from)
    rows = []
    for name in chosen:
        own = tests.get(name, [])
        failed = [(t, outcomes[t][1]) for t in own if not outcomes[t][0]]
        if not own:
            status, note = "failed", f"no test_exercise_{name.replace('-', '_')}* test found under tests/"
        elif failed:
            (file, function), message = failed[0]
            status, note = "failed", f"{function}: {message}"
        else:
            status, note = "passed", f"{len(own)} test{'s' if len(own) > 1 else ''} passed"
        rows.append(Row(name, ASSIGNMENT_OF[name], 1.0 if status == "passed" else 0.0, 1.0, status, note))
    for row_name, (passed, note) in end_to_end.items():
        exercises = dict(END_TO_END)[row_name]
        number = ASSIGNMENT_OF[exercises[0]]
        if passed is None:
            rows.append(Row(row_name, number, 0.0, 0.0, "skipped", note))
        else:
            rows.append(Row(row_name, number, 1.0 if passed else 0.0, 1.0, "passed" if passed else "failed", note))
    return rows


def table(rows):
    """The rows as a plain-text table with a total."""
    width = max([len(r.name) for r in rows] + [len("exercise")])
    lines = [f"{'exercise':<{width}}  asg  points  result   note", "-" * (width + 40)]
    for r in rows:
        points = f"{r.points:g}/{r.max_points:g}"
        lines.append(f"{r.name:<{width}}  {r.assignment:>3}  {points:>6}  {r.status:<7}  {r.output}")
    score, total = sum(r.points for r in rows), sum(r.max_points for r in rows)
    lines += ["-" * (width + 40), f"{'total':<{width}}       {score:g}/{total:g}"]
    return "\n".join(lines)


def gradescope(rows):
    """Gradescope's results.json: per-test name, score, max_score, output,
    and the total score."""
    return {
        "score": sum(r.points for r in rows),
        "tests": [{"name": f"{r.assignment}. {r.name}", "score": r.points, "max_score": r.max_points,
                   "output": f"{r.status}: {r.output}"} for r in rows],
    }


def all_passed(rows):
    return all(r.status in ("passed", "skipped") for r in rows) and any(r.status == "passed" for r in rows)
