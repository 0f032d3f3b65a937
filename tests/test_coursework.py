"""The coursework tools: markers found and checked, the student copy, the
autograder, and the sweep that proves every exercise is non-empty and
independent of the others.

The first half uses a tiny fake repository (a `minibert` package of one
lesson file and its tests), so the tools are tested apart from the lessons;
the second half runs them on this repository.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minibert.coursework import check as grading
from minibert.coursework import sandbox
from minibert.coursework.__main__ import main
from minibert.coursework.exercises import (ASSIGNMENTS, CourseworkError, blank, exercise_tests, find_regions,
                                           placeholder, scan_text)
from minibert.coursework.student import write_student_copy

REPO = Path(__file__).resolve().parents[1]


def _jail_here():
    try:
        sandbox.check_available()
        return True
    except sandbox.SandboxUnavailable:
        return False


# Where no jail can be built (no bubblewrap), the tests of what the grader
# computes grade unsandboxed, and the tests that attack the jail skip.
JAIL = _jail_here()
UNSANDBOXED = () if JAIL else ("--unsandboxed",)
needs_jail = pytest.mark.skipif(not JAIL, reason="bubblewrap cannot build a jail here (apt-get install bubblewrap)")

FAKE_LESSON = '''\
"""A fake lesson: three exercises, one of them calling another."""


def layer_norm(x):
    """Centre a list of numbers."""
    # exercise: layer-norm
    mean = sum(x) / len(x)
    return [v - mean for v in x]
    # end exercise


def gelu(x):
    # exercise: gelu-erf
    doubled = 2 * x
    return doubled
    # end exercise


class Head:
    def forward(self, x):
        # exercise: attention
        shifted = x + 1
        return shifted * 3
        # end exercise
'''

FAKE_TESTS = '''\
from minibert import lesson


def test_exercise_layer_norm():
    assert lesson.layer_norm([1, 2, 3]) == [-1, 0, 1]


def test_exercise_gelu_erf():
    assert lesson.gelu(2) == 4


def test_exercise_attention():
    assert lesson.Head().forward(1) == 6
'''


def make_fake_repo(folder, lesson=FAKE_LESSON, tests=FAKE_TESTS):
    repo = Path(folder) / "repo"
    (repo / "minibert").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "minibert" / "__init__.py").write_text("")
    (repo / "minibert" / "lesson.py").write_text(lesson)
    (repo / "tests" / "test_lesson.py").write_text(tests)
    return repo


def run_tool(*args, cwd=REPO):
    args = [*map(str, args)] + (list(UNSANDBOXED) if args and args[0] == "check" else [])
    return subprocess.run([sys.executable, "-m", "minibert.coursework", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def graded(*args, **kwargs):
    """grading.check, unsandboxed only where no jail can be built here."""
    return grading.check(*args, **{"unsandboxed": not JAIL, **kwargs})


# ---- markers ---------------------------------------------------------------


def test_regions_are_found_with_their_function_and_marker_lines(tmp_path):
    regions, errors = find_regions(make_fake_repo(tmp_path))
    assert [(r.name, r.assignment, r.path, r.function, r.start, r.end) for r in regions] == [
        ("attention", 1, "minibert/lesson.py", "Head.forward", 21, 24),
        ("gelu-erf", 1, "minibert/lesson.py", "gelu", 13, 16),
        ("layer-norm", 1, "minibert/lesson.py", "layer_norm", 6, 9),
    ]
    # the table's other exercises are reported missing, naming the table file
    assert len(errors) == sum(len(a.exercises) for a in ASSIGNMENTS) - 3
    assert errors[0] == ("minibert/coursework/exercises.py: exercise 'embeddings-sum' of assignment 1 is not "
                         "marked in the code (no '# exercise: embeddings-sum' under minibert/)")


def test_blanking_keeps_markers_and_docstring_and_raises_the_pointer():
    regions, errors = scan_text(FAKE_LESSON, "minibert/lesson.py")
    assert errors == []
    text = blank(FAKE_LESSON, regions)
    assert text.splitlines()[3:9] == [
        "def layer_norm(x):",
        '    """Centre a list of numbers."""',
        "    # exercise: layer-norm",
        '    raise NotImplementedError("exercise layer-norm: see docs/coursework.md#layer-norm")',
        "    # end exercise",
        "",
    ]
    assert "        " + placeholder("attention") in text.splitlines()
    assert "mean = sum" not in text and "shifted" not in text and "doubled" not in text
    namespace = {}
    exec(compile(text, "lesson.py", "exec"), namespace)  # the module still imports
    with pytest.raises(NotImplementedError, match="exercise gelu-erf: see docs/coursework.md#gelu-erf"):
        namespace["gelu"](1)


@pytest.mark.parametrize("source, error", [
    ("def f():\n    # exercise: no-such-name\n    return 1\n    # end exercise\n",
     "m.py:2: exercise 'no-such-name' is not in the assignment table (minibert/coursework/exercises.py)"),
    ("def f():\n    # exercise: layer-norm\n    x = 1\n    # exercise: gelu-erf\n    return x\n    # end exercise\n",
     "m.py:4: exercise 'gelu-erf' starts inside exercise 'layer-norm' (opened at line 2); regions do not nest"),
    ("def f():\n    # exercise: layer-norm\n    return 1\n",
     "m.py:2: exercise 'layer-norm' is never closed (no '# end exercise')"),
    ("def f():\n    # exercise: layer-norm\n    # a comment only\n\n    # end exercise\n    return 1\n",
     "m.py:2: exercise 'layer-norm' is empty (no code between its markers)"),
    ("def f():\n    return 1\n    # end exercise\n",
     "m.py:3: '# end exercise' without an opening '# exercise: NAME'"),
    ("# exercise: layer-norm\nX = 1\n# end exercise\n",
     "m.py:1: exercise 'layer-norm' is not inside one function (its markers must sit in the same function's body)"),
    ("def f():\n    # exercise: layer-norm\n    return 1\n\n\ndef g():\n    return 2\n    # end exercise\n",
     "m.py:2: exercise 'layer-norm' is not inside one function (its markers must sit in the same function's body)"),
])
def test_bad_markers_are_one_line_errors_naming_file_and_line(source, error):
    regions, errors = scan_text(source, "m.py")
    assert errors == [error]
    assert regions == []


def test_an_exercise_marked_twice_is_an_error(tmp_path):
    repo = make_fake_repo(tmp_path, lesson=FAKE_LESSON + "\n\ndef again():\n    # exercise: gelu-erf\n"
                                                         "    return 0\n    # end exercise\n")
    _, errors = find_regions(repo)
    assert "minibert/lesson.py:28: exercise 'gelu-erf' is marked twice (also minibert/lesson.py:13)" in errors


def test_list_shows_each_assignment_goal_and_exercise_place(tmp_path, capsys):
    assert main(["list", "--repo", str(make_fake_repo(tmp_path))]) == 1  # the table's other exercises are missing
    out, err = capsys.readouterr()
    assert "Assignment 1: The Transformer encoder" in out and "goal: Write BERT's encoder" in out
    assert "  layer-norm             minibert/lesson.py:6-9  layer_norm" in out.splitlines()
    assert "  embeddings-sum         (not marked in the code)" in out.splitlines()
    assert "3 of 33 exercises marked" in out
    assert err.count("error: ") == 30


# ---- the student copy ------------------------------------------------------


def test_student_copy_blanks_the_chosen_assignments_and_leaves_no_caches(tmp_path):
    repo = make_fake_repo(tmp_path)
    for junk in ("minibert/__pycache__/lesson.cpython-311.pyc", "runs/model/weights.bin", "cache/x",
                 "minibert.egg-info/PKG-INFO", ".pytest_cache/v", ".venv/lib/site.py", "envs/py/pyvenv.cfg",
                 "envs/py/lib/__editable__.minibert.pth"):
        (repo / junk).parent.mkdir(parents=True, exist_ok=True)
        (repo / junk).write_text("x")
    files, regions = write_student_copy(repo, tmp_path / "hw")
    assert sorted(files) == ["minibert/__init__.py", "minibert/lesson.py", "tests/test_lesson.py"]
    assert [r.name for r in regions] == ["attention", "gelu-erf", "layer-norm"]
    copied = (tmp_path / "hw" / "minibert" / "lesson.py").read_text()
    assert copied == blank(FAKE_LESSON, scan_text(FAKE_LESSON, "minibert/lesson.py")[0])
    assert sorted(p.relative_to(tmp_path / "hw").as_posix() for p in (tmp_path / "hw").rglob("*") if p.is_file()) \
        == sorted(files)
    # assignment 2 has no exercise in the fake: the copy is the reference
    write_student_copy(repo, tmp_path / "hw2", assignments=[2])
    assert (tmp_path / "hw2" / "minibert" / "lesson.py").read_text() == FAKE_LESSON


def test_student_copy_refuses_a_folder_inside_the_repository_or_not_empty(tmp_path):
    repo = make_fake_repo(tmp_path)
    with pytest.raises(CourseworkError, match="inside the repository"):
        write_student_copy(repo, repo / "hw")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(CourseworkError, match="full: exists and is not an empty folder"):
        write_student_copy(repo, tmp_path / "full")
    with pytest.raises(CourseworkError, match="no assignment 9"):
        write_student_copy(repo, tmp_path / "hw", assignments=[9])


def test_student_copy_refuses_bad_markers(tmp_path):
    repo = make_fake_repo(tmp_path, lesson=FAKE_LESSON + "\n\ndef f():\n    # exercise: wordpiece\n    return 1\n")
    with pytest.raises(CourseworkError, match=r"minibert/lesson.py:28: exercise 'wordpiece' is never closed"):
        write_student_copy(repo, tmp_path / "hw")
    assert not (tmp_path / "hw").exists()


# ---- the autograder and the sweep on the fake ------------------------------


def test_check_scores_the_reference_full_and_the_student_copy_zero(tmp_path):
    repo = make_fake_repo(tmp_path)
    grade = graded(repo, ["layer-norm", "gelu-erf"], reference=repo)
    assert [(r.name, r.points, r.status, r.output) for r in grade.rows] == [
        ("gelu-erf", 1.0, "passed", "1 test passed"), ("layer-norm", 1.0, "passed", "1 test passed")]
    assert grading.all_passed(grade)
    write_student_copy(repo, tmp_path / "hw", assignments=[1])
    edited = FAKE_TESTS.replace("assert lesson", "assert True or lesson")
    (tmp_path / "hw" / "tests" / "test_lesson.py").write_text(edited)
    # graded with the tests of the reference: the copy's edited tests do not count
    grade = graded(tmp_path / "hw", ["layer-norm", "gelu-erf", "gelu-tanh"], reference=repo)
    assert [(r.name, r.points, r.status) for r in grade.rows] == [
        ("gelu-erf", 0.0, "failed"), ("gelu-tanh", 0.0, "failed"), ("layer-norm", 0.0, "failed")]
    assert grade.rows[2].output == ("test_exercise_layer_norm: NotImplementedError: exercise layer-norm: "
                                    "see docs/coursework.md#layer-norm")
    assert grade.rows[1].output == "no test_exercise_gelu_tanh* test found under tests/"
    assert not grading.all_passed(grade)
    report = grading.gradescope(grade)
    assert report["score"] == 0 and report["tests"][0] == {
        "name": "1. gelu-erf", "number": "1", "score": 0.0, "max_score": 1.0, "status": "failed",
        "output": "test_exercise_gelu_erf: NotImplementedError: exercise gelu-erf: see docs/coursework.md#gelu-erf",
        "visibility": "visible", "extra_data": {"seconds": report["tests"][0]["extra_data"]["seconds"]}}
    assert {"execution_time", "stdout_visibility", "visibility", "output"} <= set(report)


# ---- a submission that tries to score without solving ----------------------

MARK_EVERY_TEST_PASSED = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    report.outcome = "passed"
"""


def blank_submission(tmp_path, files=None):
    """The fake reference and a blank student copy of it, with `files`
    ({relative path: text}) written into the copy."""
    repo = make_fake_repo(tmp_path)
    hw = tmp_path / "hw"
    write_student_copy(repo, hw)
    for relative, text in (files or {}).items():
        (hw / relative).parent.mkdir(parents=True, exist_ok=True)
        (hw / relative).write_text(text)
    return repo, hw


def grade_of(repo, hw, names=("layer-norm", "gelu-erf"), **limits):
    grade = graded(hw, list(names), reference=repo, **{"exercise_seconds": 20, **limits})
    return {r.name: (r.points, r.output) for r in grade.rows}, grade


@pytest.mark.parametrize("trick, files", [
    ("a conftest.py that marks every test passed", {"conftest.py": MARK_EVERY_TEST_PASSED}),
    ("a pytest.ini that loads a plugin from the copy",
     {"pytest.ini": "[pytest]\naddopts = -p cheat\n", "cheat.py": MARK_EVERY_TEST_PASSED}),
    ("a pytest.py that shadows pytest", {"pytest.py": "import sys\nsys.exit(0)\n"}),
    ("a json.py that shadows json", {"json.py": "def loads(*a, **k):\n    return {}\n"}),
    ("a sitecustomize.py", {"sitecustomize.py": "import builtins\nbuiltins.NotImplementedError = type(None)\n"}),
    ("a conftest.py inside the package", {"minibert/conftest.py": MARK_EVERY_TEST_PASSED}),
])
def test_files_outside_the_package_never_reach_the_grading_run(tmp_path, trick, files):
    repo, hw = blank_submission(tmp_path, files)
    points, _ = grade_of(repo, hw)
    assert points["layer-norm"][0] == 0 and points["gelu-erf"][0] == 0, trick
    assert "NotImplementedError: exercise layer-norm" in points["layer-norm"][1]


def test_a_package_that_points_its_path_at_the_reference_cannot_read_it(tmp_path):
    repo, hw = blank_submission(tmp_path)
    (hw / "minibert" / "__init__.py").write_text(f"__path__.insert(0, {str(repo / 'minibert')!r})\n")
    points, _ = grade_of(repo, hw)
    assert points["layer-norm"][0] == 0 and points["gelu-erf"][0] == 0
    # the reference's folder cannot even be listed: the import finds the submission's own blank
    assert "NotImplementedError: exercise layer-norm" in points["layer-norm"][1]


# The tricks that scored against a grader guarded from inside the graded
# process (an audit hook): each below did, and the jail stops every one.

READ_THE_REFERENCE = """\
import os
# Open the file system's root, then the instructor's lesson relative to it: a
# check of paths against the working folder never sees the real target.
root = os.open("/", os.O_RDONLY)
try:
    source = os.fdopen(os.open({relative!r}, os.O_RDONLY, dir_fd=root)).read()
except OSError as e:
    print("no reference:", e)
else:
    exec(compile(source, "lesson.py", "exec"), globals())
"""


@needs_jail
@pytest.mark.parametrize("how", ["dir_fd", "torch.from_file"])
def test_a_submission_cannot_read_the_instructors_lesson_by_any_route(tmp_path, how):
    repo, hw = blank_submission(tmp_path)
    lesson = repo / "minibert" / "lesson.py"
    attack = READ_THE_REFERENCE.format(relative=str(lesson).lstrip("/")) if how == "dir_fd" else (
        "import torch\ntry:\n    source = bytes(torch.from_file(%r, size=%d, dtype=torch.uint8).tolist()).decode()\n"
        "except RuntimeError as e:\n    print('no reference:', e)\nelse:\n"
        "    exec(compile(source, 'lesson.py', 'exec'), globals())\n" % (str(lesson), lesson.stat().st_size))
    (hw / "minibert" / "lesson.py").write_text((hw / "minibert" / "lesson.py").read_text() + "\n" + attack)
    points, _ = grade_of(repo, hw)
    assert points["layer-norm"][0] == 0 and points["gelu-erf"][0] == 0, points
    assert "NotImplementedError: exercise layer-norm" in points["layer-norm"][1]


def file_hashes(folder):
    import hashlib
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


@needs_jail
def test_the_instructors_checkout_is_byte_identical_after_grading_a_submission_that_writes_to_it(tmp_path):
    repo, hw = blank_submission(tmp_path)
    tests = repo / "tests" / "test_lesson.py"
    attack = (
        "import os, torch\n"
        "root = os.open('/', os.O_RDONLY)\n"
        f"for target in ({str(tests).lstrip('/')!r}, {str(repo / 'minibert' / 'lesson.py').lstrip('/')!r}):\n"
        "    try:\n"
        "        os.chdir('/tmp')\n"             # where writing is allowed, then a descriptor to elsewhere
        "        fd = os.open(target, os.O_WRONLY | os.O_TRUNC, dir_fd=root)\n"
        "        os.write(fd, b'def test_exercise_layer_norm():\\n    return None\\n')\n"
        "    except OSError as e:\n"
        "        print('not written:', e)\n"
        "    try:\n"
        "        torch.save({'x': 1}, '/' + target)\n"
        "    except (OSError, RuntimeError) as e:\n"
        "        print('not saved:', e)\n")
    (hw / "minibert" / "__init__.py").write_text(attack)
    before = file_hashes(repo)
    points, _ = grade_of(repo, hw)
    assert file_hashes(repo) == before
    assert points["layer-norm"][0] == 0
    # and the next student graded on that checkout is graded by the instructor's own tests
    _, second = blank_submission(tmp_path / "second")
    assert grade_of(repo, second)[0]["layer-norm"][0] == 0


@needs_jail
def test_a_submission_can_neither_forge_the_results_nor_kill_the_grader(tmp_path):
    repo, hw = blank_submission(tmp_path)
    results = tmp_path / "out" / "results.json"
    attack = (
        "import json, os, signal\n"
        "root = os.open('/', os.O_RDONLY)\n"
        "try:\n"
        "    grader = os.getppid()\n"
        "    argv = os.fdopen(os.open(f'proc/{grader}/cmdline', os.O_RDONLY, dir_fd=root), 'rb').read().split(b'\\0')\n"
        "    target = argv[argv.index(b'--json') + 1].decode()\n"
        "    fd = os.open(target.lstrip('/'), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, dir_fd=root)\n"
        "    os.write(fd, json.dumps({'score': 9, 'tests': []}).encode())\n"
        "    os.close(fd)\n"
        "    signal.pidfd_send_signal(os.pidfd_open(grader), signal.SIGKILL)\n"
        "except Exception as e:\n"
        "    print('attack failed:', type(e).__name__, e)\n")
    (hw / "minibert" / "__init__.py").write_text(attack)
    done = run_tool("check", "layer-norm", "gelu-erf", "--repo", hw, "--reference", repo, "--json", results)
    assert done.returncode == 1 and done.stdout.splitlines()[-2].split() == ["total", "0/2"], done.stdout + done.stderr
    written = json.loads(results.read_text())
    assert written["score"] == 0 and [t["status"] for t in written["tests"]] == ["failed", "failed"]


def processes_named(marker):
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@needs_jail
def test_no_process_a_submission_starts_outlives_its_grade(tmp_path):
    marker = f"{os.getpid()}.4242"          # a sleep no other process runs
    double_fork = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n")
    repo, hw = blank_submission(tmp_path, {"minibert/__init__.py": double_fork})
    grade_of(repo, hw)
    time.sleep(0.5)
    assert processes_named(marker) == []


@needs_jail
def test_when_the_grader_is_killed_its_jailed_child_goes_too(tmp_path):
    marker = f"{os.getpid()}.4343"
    looping = FAKE_LESSON.replace("    mean = sum(x) / len(x)\n",
                                  f"    import subprocess\n    subprocess.run(['/bin/sleep', '{marker}'])\n")
    repo, hw = blank_submission(tmp_path, {"minibert/lesson.py": looping})
    grader = subprocess.Popen([sys.executable, "-m", "minibert.coursework", "check", "layer-norm", "--repo", str(hw),
                               "--reference", str(repo)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_named(marker), "the graded exercise never started"
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 10
    while processes_named(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_named(marker) == []


@needs_jail
def test_memory_and_scratch_space_are_limited(tmp_path):
    greedy = FAKE_LESSON.replace("    mean = sum(x) / len(x)\n",
                                 "    import torch\n    torch.empty(5 << 30, dtype=torch.uint8)\n"
                                 "    mean = sum(x) / len(x)\n")
    greedy = greedy.replace("    doubled = 2 * x\n",
                            "    import os\n    try:\n        for i in range(6):\n"
                            "            with open(f'/tmp/fill{i}', 'wb') as f:\n"
                            "                f.write(bytes(60 << 20))\n"
                            "    finally:\n        for i in range(6):\n"
                            "            if os.path.exists(f'/tmp/fill{i}'):\n                os.remove(f'/tmp/fill{i}')\n"
                            "    doubled = 2 * x\n")
    repo, hw = blank_submission(tmp_path, {"minibert/lesson.py": greedy})
    points, _ = grade_of(repo, hw, ("layer-norm", "gelu-erf", "attention"))
    assert points["layer-norm"][0] == 0 and "memory" in points["layer-norm"][1].lower(), points["layer-norm"]
    assert points["gelu-erf"][0] == 0 and "No space left on device" in points["gelu-erf"][1], points["gelu-erf"]
    assert points["attention"][0] == 1


@needs_jail
def test_a_reference_implementation_cannot_be_imported_even_from_a_thread(tmp_path):
    pytest.importorskip("transformers")
    # the import runs on a thread of its own, where no frame of the package is on the stack
    init = ("import importlib, threading\nFOUND = []\n"
            "worker = threading.Thread(target=lambda: FOUND.append(importlib.import_module('transformers')))\n"
            "worker.start()\nworker.join()\n")
    uses = FAKE_LESSON.replace("    mean = sum(x) / len(x)\n",
                               "    from minibert import FOUND\n    assert FOUND, 'no reference'\n"
                               "    mean = sum(x) / len(x)\n")
    repo, hw = blank_submission(tmp_path, {"minibert/__init__.py": init, "minibert/lesson.py": uses})
    points, _ = grade_of(repo, hw, ("layer-norm",))
    assert points["layer-norm"][0] == 0, points


def test_without_a_jail_the_grader_refuses_unless_told_to_grade_unsandboxed(tmp_path, monkeypatch):
    repo = make_fake_repo(tmp_path)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(CourseworkError, match=r"^no sandbox: bubblewrap is not installed \(install bubblewrap "
                                              r".*give --unsandboxed to grade anyway \(the results say so\)$"):
        grading.check(repo, ["layer-norm"], reference=repo)
    grade = grading.check(repo, ["layer-norm"], reference=repo, unsandboxed=True)
    assert [r.points for r in grade.rows] == [1.0] and grade.notes[0].startswith("UNSANDBOXED: ")
    assert grading.gradescope(grade)["output"].startswith("UNSANDBOXED: ")


def test_a_symlinked_package_is_refused_with_a_zero_grade(tmp_path):
    repo, hw = blank_submission(tmp_path)
    shutil.rmtree(hw / "minibert")
    (hw / "minibert").symlink_to(repo / "minibert")
    points, grade = grade_of(repo, hw)
    assert [p for p, _ in points.values()] == [0.0, 0.0]
    assert "a symbolic link; hand in the package's own files" in grade.notes[0]


def test_a_value_equal_to_anything_does_not_score(tmp_path):
    anything = ("class Anything:\n    def __eq__(self, other):\n        return True\n\n\n"
                "def layer_norm(x):\n    return Anything()\n\n\ndef gelu(x):\n    return Anything()\n")
    # ... and every comparison a test could use made to say "equal", at import
    patch = ("import math, pytest\nmath.isclose = lambda *a, **k: True\n"
             "pytest.approx = lambda expected, *a, **k: type('Equal', (), {'__eq__': lambda s, o: True})()\n")
    repo, hw = blank_submission(tmp_path, {"minibert/lesson.py": anything, "minibert/__init__.py": patch})
    points, _ = grade_of(repo, hw)
    assert points["layer-norm"] == (0.0, "test_exercise_layer_norm: call 1 of layer_norm returned <Anything>, "
                                         "expected a list or tuple")
    assert points["gelu-erf"][0] == 0


def test_an_endless_loop_costs_only_its_own_exercise(tmp_path):
    looping = FAKE_LESSON.replace("    mean = sum(x) / len(x)\n", "    while True:\n        pass\n")
    repo, hw = blank_submission(tmp_path, {"minibert/lesson.py": looping})
    points, _ = grade_of(repo, hw, ("layer-norm", "gelu-erf", "attention"), exercise_seconds=4)
    assert points["layer-norm"] == (0.0, "test_exercise_layer_norm: did not finish within 4 s (a loop that never ends?)")
    assert points["gelu-erf"][0] == 1 and points["attention"][0] == 1


def test_a_time_bomb_at_import_gives_zero_in_bounded_time(tmp_path):
    repo, hw = blank_submission(tmp_path, {"minibert/__init__.py": "import time\ntime.sleep(3600)\n"})
    started = time.monotonic()
    points, _ = grade_of(repo, hw, import_seconds=4)
    assert time.monotonic() - started < 60
    assert points["layer-norm"][0] == 0
    assert points["layer-norm"][1].endswith("the package did not import within 4 s (a loop or a wait at import time?)")


def test_a_submission_of_the_package_alone_or_one_folder_down_is_graded(tmp_path):
    repo = make_fake_repo(tmp_path)
    for where in ("alone/minibert", "nested/handin/minibert"):
        shutil.copytree(repo / "minibert", tmp_path / where)
    assert [r.points for r in graded(tmp_path / "alone", ["layer-norm"], reference=repo).rows] == [1.0]
    assert [r.points for r in graded(tmp_path / "nested", ["layer-norm"], reference=repo).rows] == [1.0]
    assert [r.points for r in graded(tmp_path / "alone" / "minibert", ["layer-norm"],
                                            reference=repo).rows] == [1.0]


def test_check_refuses_an_unknown_exercise():
    with pytest.raises(CourseworkError, match="unknown exercise 'atention'"):
        grading.select(["atention"])
    assert grading.select([], [3]) == ["varint", "tensorbundle-entry", "masked-crc32c"]


def test_sweep_reports_a_leaking_exercise_and_an_empty_test(tmp_path):
    leaky = FAKE_LESSON.replace("shifted = x + 1", "shifted = gelu(x) // 2 + 1")  # attention calls gelu-erf
    tests = FAKE_TESTS + "\n\ndef test_exercise_layer_norm_of_nothing_is_nothing():\n    assert [] == []\n"
    repo = make_fake_repo(tmp_path, lesson=leaky, tests=tests)
    done = run_tool("sweep", "--repo", repo, "--json", tmp_path / "report.json")
    assert done.returncode == 1, done.stderr
    problems = [p for p in json.loads((tmp_path / "report.json").read_text())["problems"]
                if "is not marked in the code" not in p]
    assert problems == [
        "blanking 'gelu-erf' makes tests/test_lesson.py::test_exercise_attention (exercise 'attention') fail: "
        "NotImplementedError: exercise gelu-erf: see docs/coursework.md#gelu-erf",
        "blanking 'layer-norm' leaves its test tests/test_lesson.py::test_exercise_layer_norm_of_nothing_is_nothing "
        "succeeding (the test does not depend on the region)",
    ]


# ---- this repository -------------------------------------------------------


def test_every_exercise_of_the_table_is_marked_and_has_a_test():
    regions, errors = find_regions(REPO)
    assert errors == []
    tests, strays = exercise_tests(REPO)
    assert strays == []
    assert [name for a in ASSIGNMENTS for name in a.exercises if name not in tests] == []
    assert [r.name for r in regions if r.end - r.start - 1 > 30] == []  # short bodies, one sitting each
    # the placeholder's link target: a section of docs/coursework.md per exercise
    headings = {line[4:].strip() for line in (REPO / "docs" / "coursework.md").read_text().splitlines()
                if line.startswith("### ")}
    assert [r.name for r in regions if r.name not in headings] == []


def test_blanking_each_exercise_fails_its_own_tests_only(tmp_path):
    # The independence sweep, in one fresh process (see the sweep in minibert/coursework/exercises.py).
    done = run_tool("sweep", "--json", tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    problems = [p for p in report["problems"] if "is not marked in the code" not in p]
    assert problems == []
    assert all(entry["tests"] for entry in report["exercises"].values())


def test_student_copy_of_the_repository_imports_and_scores_zero(tmp_path):
    hw = tmp_path / "hw"
    files, regions = write_student_copy(REPO, hw)
    assert not any(part in (".git", "__pycache__") or part.endswith((".pyc", ".egg-info"))
                   for name in files for part in Path(name).parts)
    assert not any(name.startswith(("runs/", "cache/")) for name in files)       # the scratch folders at the root
    assert "minibert/commands/train_mlm.py" in files                               # the package's commands are code, copied
    for region in regions:  # the reference body is gone from the copy
        body = "".join((REPO / region.path).read_text().splitlines(keepends=True)[region.start:region.end - 1])
        assert body not in (hw / region.path).read_text()
        assert placeholder(region.name) in (hw / region.path).read_text()
    started = subprocess.run([sys.executable, "probe.py", "--help"], cwd=hw, capture_output=True, text=True,
                             timeout=120)  # the script's folder comes first on the path: the copy's minibert
    assert started.returncode == 0 and "usage: probe.py" in started.stdout
    from tiny_models import write_toy_sst2
    (tmp_path / "data" / "sst2").mkdir(parents=True)      # every exercise: the end-to-end rows read SST-2 too
    write_toy_sst2(tmp_path / "data" / "sst2")
    done = run_tool("check", "--repo", hw, "--data", tmp_path / "data", "--json", tmp_path / "results.json")
    assert done.returncode == 1, done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0
    assert len(results["tests"]) >= len(regions)
    assert all(set(t) >= {"name", "number", "score", "max_score", "status", "output", "visibility"}
               and t["score"] == 0 and t["status"] == "failed" for t in results["tests"])
    assert {"score", "execution_time", "visibility", "stdout_visibility", "tests"} <= set(results)
    # every exercise reaches its own blank (so the copy imports, and no exercise needs another)
    for region in regions:
        row = next(line for line in done.stdout.splitlines() if line.startswith(region.name + " "))
        assert f"NotImplementedError: exercise {region.name}: see docs/coursework.md#{region.name}" in row


def test_check_of_the_reference_scores_full_marks(tmp_path):
    done = run_tool("check", "layer-norm", "gelu-erf", "--json", tmp_path / "results.json")
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 2.0
    assert [(t["name"], t["score"], t["max_score"]) for t in results["tests"]] == [
        ("1. gelu-erf", 1.0, 1.0), ("1. layer-norm", 1.0, 1.0)]
    assert done.stdout.splitlines()[-2].split() == ["total", "2/2"]


def answer(hw, path, name, body):
    """Write `body` (lines, unindented) in place of exercise `name`'s blank."""
    file = hw / path
    lines = file.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if placeholder(name) in line)
    indent = lines[at][:len(lines[at]) - len(lines[at].lstrip())]
    lines[at:at + 1] = [indent + line + "\n" for line in body]
    file.write_text("".join(lines))


def test_calling_the_fused_kernel_or_the_slow_twin_is_not_an_answer(tmp_path):
    hw = tmp_path / "hw"
    write_student_copy(REPO, hw, [1, 7])
    answer(hw, "minibert/model.py", "layer-norm", ["return F.layer_norm(x, x.shape[-1:], weight, bias, eps)"])
    answer(hw, "minibert/model.py", "gelu-erf", ["return getattr(F, 'ge' + 'lu')(x)"])   # hidden from the source
    answer(hw, "minibert/model.py", "attention",
           ["return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_bias, dropout_p=dropout_p)"])
    answer(hw, "minibert/deberta.py", "c2p-p2c", ["return relative_scores_written_out(q, k, K_r, Q_r, delta)"])
    grade = graded(hw, ["layer-norm", "gelu-erf", "attention", "c2p-p2c"], reference=REPO, data=tmp_path / "no-data")
    rows = {r.name: r for r in grade.rows}
    assert [rows[name].points for name in ("layer-norm", "gelu-erf", "attention", "c2p-p2c")] == [0, 0, 0, 0]
    assert rows["layer-norm"].output == ("test_exercise_layer_norm: Refused: exercise layer-norm: calls "
                                         "torch.nn.functional.layer_norm, which this exercise asks you to write out")
    assert "calls torch.nn.functional.scaled_dot_product_attention, which" in rows["attention"].output
    assert "calls relative_scores_written_out (deberta.py), which" in rows["c2p-p2c"].output
    assert "calls torch.nn.functional.gelu, which this exercise asks you to write out" in rows["gelu-erf"].output


def rewrite(hw, path, old, new):
    file = hw / path
    text = file.read_text()
    assert old in text, old
    file.write_text(text.replace(old, new, 1))


def test_fused_kernels_through_the_back_door_are_refused_where_they_run(tmp_path):
    hw = tmp_path / "hw"
    write_student_copy(REPO, hw, [1, 2, 6, 7])
    model = "minibert/model.py"
    # a module-level alias, a default argument, an unlisted kernel, the copy's own fused column
    answer(hw, model, "layer-norm", ["return _K(x, x.shape[-1:], weight, bias, eps)"])
    rewrite(hw, model, "\ndef layer_norm(", "\n_K = torch.layer_norm\n\n\ndef layer_norm(")
    rewrite(hw, model, "def gelu(x):", "def gelu(x, _k=F.gelu):")
    answer(hw, model, "gelu-erf", ["return _k(x)"])
    answer(hw, model, "attention", ["return torch._scaled_dot_product_attention_math(q, k, v, attn_mask=attention_bias, "
                                    "dropout_p=dropout_p)[0]"])
    answer(hw, model, "gelu-tanh", ['return ACTIVATIONS["gelu_new"][0](x)'])
    answer(hw, "minibert/lstm.py", "lstm-gates", ["return _cell(x_t, (h, c), weight_ih, weight_hh, bias_ih, bias_hh)"])
    rewrite(hw, "minibert/lstm.py", "\ndef lstm_cell(", "\n_cell = torch.lstm_cell\n\n\ndef lstm_cell(")
    # the library's WordPiece, and the copy's written-out twin under another name
    answer(hw, "minibert/tokenization.py", "wordpiece",
           ["from tokenizers.models import WordPiece as Library",
            "return [t.value for t in Library(vocab, unk_token='[UNK]').tokenize(word)] or ['[UNK]']"])
    answer(hw, "minibert/deberta.py", "c2p-p2c", ["return _twin(q, k, K_r, Q_r, delta)"])
    rewrite(hw, "minibert/deberta.py", "\ndef relative_scores_gathered(",
            "\n_twin = relative_scores_written_out\n\n\ndef relative_scores_gathered(")
    names = ["layer-norm", "gelu-erf", "attention", "gelu-tanh", "lstm-gates", "wordpiece", "c2p-p2c"]
    rows = {r.name: r for r in graded(hw, names, reference=REPO, data=tmp_path / "no-data").rows}
    assert {name: rows[name].points for name in names} == dict.fromkeys(names, 0.0), \
        {name: rows[name].output for name in names}
    expected = {"layer-norm": "calls torch.layer_norm", "gelu-erf": "calls torch.nn.functional.gelu",
                "attention": "calls torch._scaled_dot_product_attention_math", "gelu-tanh": "calls torch.nn.functional.gelu",
                "lstm-gates": "calls torch.lstm_cell", "wordpiece": "calls tokenizers",
                "c2p-p2c": "calls relative_scores_written_out"}
    for name, text in expected.items():
        assert text in rows[name].output, (name, rows[name].output)


def test_switching_the_watch_off_or_computing_later_is_refused(tmp_path):
    hw = tmp_path / "hw"
    write_student_copy(REPO, hw, [1, 2])
    model = "minibert/model.py"
    # batch norm over a transposed tensor is a layer norm; the kernel is refused all the same
    answer(hw, model, "layer-norm", ["y = F.batch_norm(x.reshape(-1, x.shape[-1]).T, None, None, training=True, eps=eps)",
                                     "return y.T.reshape(x.shape) * weight + bias"])
    # the modes popped, the fused kernel called, the modes put back
    answer(hw, model, "attention", ["import torch.utils._python_dispatch as d",
                                    "from torch.overrides import _pop_mode_temporarily",
                                    "with d._pop_mode_temporarily(), _pop_mode_temporarily():",
                                    "    return F.scaled_dot_product_attention(q, k, v, attn_mask=attention_bias)"])
    # a tensor whose own __torch_function__ computes GELU after the window closed
    answer(hw, model, "gelu-erf", ["class Later(torch.Tensor):",
                                   "    @classmethod",
                                   "    def __torch_function__(cls, func, types, args=(), kwargs=None):",
                                   "        return super().__torch_function__(func, types, args, kwargs)",
                                   "return F.gelu(x.detach()).as_subclass(Later) if False else x.as_subclass(Later)"])
    # a thread computes with the fused kernel beside the watched one
    answer(hw, model, "gelu-tanh", ["import threading, queue",
                                    "out = queue.Queue()",
                                    "threading.Thread(target=lambda: out.put(F.gelu(x, approximate='tanh'))).start()",
                                    "return out.get()"])
    answer(hw, "minibert/tokenization.py", "basic-tokenizer",
           ["from tokenizers.pre_tokenizers import BertPreTokenizer",
            "return [w for w, _ in BertPreTokenizer().pre_tokenize_str(text.lower() if do_lower_case else text)]"])
    names = ["layer-norm", "attention", "gelu-erf", "gelu-tanh", "basic-tokenizer"]
    rows = {r.name: r for r in graded(hw, names, reference=REPO, data=tmp_path / "no-data").rows}
    assert {name: rows[name].points for name in names} == dict.fromkeys(names, 0.0), \
        {name: rows[name].output for name in names}
    assert "calls torch.ops.aten.native_batch_norm" in rows["layer-norm"].output or \
        "calls torch.nn.functional.batch_norm" in rows["layer-norm"].output, rows["layer-norm"].output
    assert "switches off the grader's watch" in rows["attention"].output, rows["attention"].output
    assert "returns a Later (a tensor subclass)" in rows["gelu-erf"].output, rows["gelu-erf"].output
    assert "thread of its own" in rows["gelu-tanh"].output or "threads of its own" in rows["gelu-tanh"].output, \
        rows["gelu-tanh"].output
    assert "calls tokenizers" in rows["basic-tokenizer"].output, rows["basic-tokenizer"].output


def test_answers_written_for_the_shipped_inputs_fail_and_honest_variants_score(tmp_path):
    hw = tmp_path / "hw"
    write_student_copy(REPO, hw, [1, 2, 5])
    import torch
    from minibert.model import gelu
    shipped = [torch.tensor([-1.0, 0.0, 1.0, 3.0], dtype=torch.float64), torch.linspace(-6, 6, 101)]
    table = [(x.tolist(), gelu(x).tolist(), str(x.dtype)) for x in shipped]
    answer(hw, "minibert/model.py", "gelu-erf", [f"for inputs, outputs, dtype in {table!r}:",
                                                 "    if x.flatten().tolist() == inputs:",
                                                 "        return torch.tensor(outputs, dtype=x.dtype)",
                                                 "return x"])
    # honest, and different from the reference: 0.0 for no overlap (the reference returns 0) ...
    answer(hw, "minibert/metrics.py", "squad-f1",
           ["common = collections.Counter(prediction_tokens) & collections.Counter(gold_tokens)",
            "same = sum(common.values())",
            "if not same:", "    return 0.0",
            "p, r = same / len(prediction_tokens), same / len(gold_tokens)", "return 2 * p * r / (p + r)"])
    # ... a schedule class of its own with the same rates ...
    answer(hw, "minibert/training.py", "lr-schedule",
           ["class WarmupThenLinear(torch.optim.lr_scheduler.LRScheduler):",
            "    def get_lr(self):",
            "        step = self.last_epoch",
            "        f = (step + 1) / max(1, warmup_steps) if step < warmup_steps else "
            "max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))",
            "        return [base * f for base in self.base_lrs]",
            "return WarmupThenLinear(optimizer)"])
    # ... and dropout written out, drawing its own way
    answer(hw, "minibert/model.py", "attention",
           ["probs = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + attention_bias).softmax(dim=-1)",
            "if dropout_p > 0:",
            "    probs = probs * (torch.rand_like(probs) >= dropout_p) / (1 - dropout_p)",
            "return probs @ v"])
    names = ["gelu-erf", "squad-f1", "lr-schedule", "attention"]
    rows = {r.name: r for r in graded(hw, names, reference=REPO, data=tmp_path / "no-data").rows}
    assert rows["gelu-erf"].points == 0 and rows["gelu-erf"].output == (
        "on inputs the grader drew for this grade: call 1 of gelu returned something else than the reference's")
    assert {name: rows[name].points for name in names[1:]} == dict.fromkeys(names[1:], 1.0), \
        {name: rows[name].output for name in names}


def test_every_exercise_has_a_probe_that_the_reference_passes():
    from minibert.coursework import probes
    from minibert.coursework.exercises import EXERCISE_NAMES
    assert set(probes.PROBES) == set(EXERCISE_NAMES)
    for name in EXERCISE_NAMES:      # the probes call only the reference's own functions here
        probes.run(name, 20261203)


# ---- Gradescope ------------------------------------------------------------


def gradescope_layout(tmp_path, submission_from, data=None):
    """/autograder as Gradescope lays it out: source/ (the archive unpacked,
    no git checkout), submission/ (the student's files), results/; and a bin/
    with python3 (this environment's interpreter, a virtualenv's too), and an
    apt-get and a pip3 that record what they are asked to install."""
    import shlex
    import zipfile
    from minibert.coursework.student import write_autograder
    root = tmp_path / "autograder"
    write_autograder(REPO, tmp_path / "autograder.zip", ["layer-norm", "gelu-erf"], data=data)
    with zipfile.ZipFile(tmp_path / "autograder.zip") as z:
        z.extractall(root / "source")
    shutil.copytree(submission_from, root / "submission")
    (root / "results").mkdir()
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    # a script, not a symbolic link: a link to a virtualenv's python run from outside it is the base interpreter
    (bin_folder / "python3").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    for tool in ("pip3", "apt-get"):
        (bin_folder / tool).write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / (tool + '-args')}\n")
    for tool in ("python3", "pip3", "apt-get"):
        (bin_folder / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}", "AUTOGRADER_ROOT": str(root)}
    return root, env


def run_autograder(root, env):
    if not JAIL:       # as an instructor would, where no jail can be built
        script = root / "source" / "run_autograder"
        script.write_text(script.read_text().replace("check ", "check --unsandboxed ", 1))
    done = subprocess.run(["bash", root / "source" / "run_autograder"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_the_gradescope_scripts_give_the_reference_full_marks_without_installing_it(tmp_path):
    honest = tmp_path / "honest"
    shutil.copytree(REPO / "minibert", honest / "minibert", ignore=shutil.ignore_patterns("__pycache__"))
    root, env = gradescope_layout(tmp_path, honest)
    subprocess.run(["bash", "setup.sh"], cwd=root / "source", env=env, check=True, timeout=60)
    assert (tmp_path / "apt-get-args").read_text().split() == ["install", "-y", "bubblewrap"]
    assert (tmp_path / "pip3-args").read_text().split() == ["install", "-r", "grading-requirements.txt", "pytest"]
    installed = (root / "source" / "grading-requirements.txt").read_text()
    assert "torch" in installed and "-e" not in installed                 # minibert itself is never installed
    results = run_autograder(root, env)
    assert results["score"] == 2.0 and [t["status"] for t in results["tests"]] == ["passed", "passed"]


def test_the_gradescope_scripts_give_a_blank_copy_zero_even_pointed_at_the_source(tmp_path):
    blank_copy = tmp_path / "blank"
    write_student_copy(REPO, blank_copy, [1])
    root, env = gradescope_layout(tmp_path, blank_copy / "minibert")   # the package's files alone are handed in
    init = root / "submission" / "__init__.py"
    init.write_text(f"__path__.insert(0, {str(root / 'source' / 'minibert')!r})\n" + init.read_text())
    results = run_autograder(root, env)
    assert results["score"] == 0 and [t["status"] for t in results["tests"]] == ["failed", "failed"]
    assert all("NotImplementedError: exercise" in t["output"] for t in results["tests"]), results["tests"]


@needs_jail
def test_the_gradescope_scripts_give_the_read_the_reference_attack_zero(tmp_path):
    blank_copy = tmp_path / "blank"
    write_student_copy(REPO, blank_copy, [1])
    root, env = gradescope_layout(tmp_path, blank_copy / "minibert")
    model = root / "submission" / "model.py"
    model.write_text(model.read_text() + "\n" + READ_THE_REFERENCE.format(
        relative=str(root / "source" / "minibert" / "model.py").lstrip("/")))
    before = file_hashes(root / "source")
    results = run_autograder(root, env)
    assert results["score"] == 0 and [t["status"] for t in results["tests"]] == ["failed", "failed"]
    assert file_hashes(root / "source") == before


def test_the_data_packed_for_gradescope_never_reaches_a_graded_tree(tmp_path):
    from minibert.coursework.student import MANIFEST_NAME, repository_files
    from tiny_models import write_toy_sst2
    (tmp_path / "data" / "sst2").mkdir(parents=True)
    write_toy_sst2(tmp_path / "data" / "sst2")
    root, _ = gradescope_layout(tmp_path, REPO / "minibert", data=tmp_path / "data")
    assert (root / "source" / "data" / "sst2" / "dev.tsv").is_file()        # there for the grader ...
    files = repository_files(root / "source")
    assert "minibert/model.py" in files and MANIFEST_NAME not in files
    assert not [name for name in files if name.startswith("data/")]        # ... never for a graded tree


def test_the_documented_gradescope_scripts_are_the_shipped_ones():
    text = (REPO / "docs" / "coursework.md").read_text()
    for name in ("setup.sh", "run_autograder"):
        shipped = (REPO / "minibert" / "coursework" / "gradescope" / name).read_text()
        assert f"```bash\n{shipped}```" in text, f"docs/coursework.md does not quote {name} as shipped"


# ---- the milestone ---------------------------------------------------------


def test_the_milestone_child_gets_no_dev_data_and_the_grader_scores_its_weights_in_its_own_model(tmp_path):
    import base64
    import io
    import torch
    from minibert.coursework import milestone
    from tiny_models import write_toy_sst2
    (tmp_path / "sst2").mkdir()
    write_toy_sst2(tmp_path / "sst2")
    work = tmp_path / "work"
    work.mkdir()
    spec = milestone.prepare(tmp_path / "sst2", work, {"train_examples": 64, "epochs": 1})
    assert sorted(p.name for p in work.iterdir()) == ["milestone-train.tsv"]       # no dev sentence, no dev label
    assert len(Path(spec["train"]).read_text().splitlines()) == 64
    model, steps = milestone.fine_tune_sst2(spec, written_out=True)             # the bundled model, two steps
    assert steps == 2
    dev = milestone.read_sst2(tmp_path / "sst2" / "dev.tsv")

    def weights(state):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return {"weights": base64.b64encode(buffer.getvalue()).decode(), "steps": 2}
    reached, note = milestone.score(weights(model.state_dict()), dev, target=0)
    expected = milestone.predict(model, [s for s, _ in dev])
    correct = sum(p == y for p, (_, y) in zip(expected, dev))
    assert reached and note == f"SST-2 dev accuracy {100 * correct / len(dev):.2f}% ({correct}/{len(dev)}) after 2 " \
                               f"steps; target 0%"
    # what the child returns is weights, read as tensors only, that fit the bundled model
    assert milestone.score({"weights": "not base64!"}, dev) == (False, "the returned weights cannot be read "
                                                                        "(Error)")
    state = dict(model.state_dict())
    state.pop(next(iter(state)))
    assert milestone.score(weights(state), dev) == (False, "the returned weights are not the bundled model with a "
                                                           "two-class head")
    buffer = io.BytesIO()
    torch.save({"code": print}, buffer)       # a pickle that would call a function: refused by weights_only
    assert milestone.score({"weights": base64.b64encode(buffer.getvalue()).decode()}, dev)[1].startswith(
        "the returned weights cannot be read")


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_full_disk_while_writing_the_student_copy_is_one_line_and_leaves_nothing(tmp_path):
    repo = make_fake_repo(tmp_path)
    (repo / "big.bin").write_bytes(bytes(50_000))
    program = ("import resource, signal, sys\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               "resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))\n"
               "from minibert.coursework.__main__ import main\nfrom minibert.support.cli import run\n"
               "run(main, sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-c", program, "student", str(tmp_path / "hw"), "--repo", str(repo)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot write the student copy (File too large" in done.stderr and "nothing was left there" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]


def test_check_json_never_lands_in_the_package_however_the_submission_is_given(tmp_path):
    repo = make_fake_repo(tmp_path)
    lesson = repo / "minibert" / "lesson.py"
    before = lesson.read_text()
    for submission in (repo, repo / "minibert", tmp_path):     # the repository, the package itself, one level up
        done = run_tool("check", "layer-norm", "--repo", submission, "--json", lesson)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert f"--json {lesson}: inside the submission's package" in done.stderr and not done.stdout
    assert lesson.read_text() == before
    (tmp_path / "notes.txt").write_text("mine")
    for target, message in ((tmp_path, "not a regular file"), (tmp_path / "notes.txt" / "results.json",
                                                               "cannot make its folder")):
        done = run_tool("check", "layer-norm", "--repo", repo, "--json", target)
        assert done.returncode == 1 and f"--json {target}: {message}" in done.stderr and not done.stdout, done.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_check_json_where_nothing_fits_is_one_line_before_grading(tmp_path):
    program = ("import resource, signal, sys\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"        # a write fails with EFBIG, as on a full disk
               "resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))\n"
               "from minibert.coursework.__main__ import main\nfrom minibert.support.cli import run\n"
               "run(main, sys.argv[1:])\n")
    results = tmp_path / "out" / "results.json"
    done = subprocess.run([sys.executable, "-c", program, "check", "layer-norm", "--json", str(results)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert f"--json {results}: cannot write there (File too large); nothing was graded" in done.stderr
    assert not done.stdout and sorted(p.name for p in results.parent.iterdir()) == []


def test_sweep_json_inside_the_swept_package_or_tests_is_refused_before_the_sweep(tmp_path):
    repo = make_fake_repo(tmp_path)
    for target in (repo / "minibert" / "lesson.py", repo / "tests" / "test_lesson.py"):
        before = target.read_text()
        done = run_tool("sweep", "--repo", repo, "--json", target)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and f"--json {target}: inside" in done.stderr
        assert not done.stdout and target.read_text() == before


def test_check_json_never_writes_over_a_file_it_did_not_write(tmp_path):
    repo = make_fake_repo(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("# my notes\n")
    done = run_tool("check", "layer-norm", "--repo", repo, "--reference", repo, "--json", readme)
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and not done.stdout, done.stderr
    assert f"--json {readme}: exists and is not a results file this command wrote" in done.stderr
    assert readme.read_text() == "# my notes\n"
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"score": 0, "tests": []}))       # an earlier grade's results: replaced
    done = run_tool("check", "layer-norm", "--repo", repo, "--reference", repo, "--json", results)
    assert done.returncode == 0, done.stderr
    assert json.loads(results.read_text())["score"] == 1.0


def test_list_into_a_closed_pipe_ends_quietly():
    done = subprocess.run(f"{sys.executable} -m minibert.coursework list | head -1", shell=True, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("Assignment 1: ") and done.stdout.count("\n") == 1
    assert done.stderr == ""


def test_autograder_with_a_data_folder_that_lacks_sst2_is_one_line(tmp_path):
    done = run_tool("autograder", tmp_path / "autograder.zip", "layer-norm", "--data", tmp_path / "nonexistent")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and not done.stdout, done.stderr
    assert f"--data {tmp_path / 'nonexistent'}: no sst2/train.tsv or sst2/dev.tsv there" in done.stderr
    assert not (tmp_path / "autograder.zip").exists()


def test_the_data_comes_from_the_data_flag_only_and_its_absence_is_one_line(tmp_path):
    # the milestone and the tokenizer's end-to-end rows read SST-2: no folder is guessed for it
    for args, needed in ((["autograder", tmp_path / "autograder.zip", "--assignment", "8"],
                          "sst2/train.tsv and sst2/dev.tsv"),
                         (["check", "wordpiece"], "sst2/dev.tsv")):
        done = run_tool(*args)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and not done.stdout, done.stderr
        assert f"error: --data DIR is needed: the folder holding {needed} (the end-to-end rows of these " \
               f"exercises read it)" in done.stderr
    done = run_tool("check", "wordpiece", "--data", tmp_path)
    assert done.returncode == 1 and f"--data {tmp_path}: no sst2/dev.tsv there" in done.stderr and not done.stdout
    assert not (tmp_path / "autograder.zip").exists()
    done = subprocess.run([sys.executable, "-m", "minibert.coursework.milestone"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "error: the following arguments are required: --data" in done.stderr
    done = subprocess.run([sys.executable, "-m", "minibert.coursework.milestone", "--data", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and f"error: --data {tmp_path}: no sst2/train.tsv or sst2/dev.tsv there" in done.stderr


def test_an_interrupted_student_copy_leaves_nothing(tmp_path, monkeypatch):
    from minibert.coursework import student
    repo = make_fake_repo(tmp_path)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(student.shutil, "copy2", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_student_copy(repo, tmp_path / "hw")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repo"]
