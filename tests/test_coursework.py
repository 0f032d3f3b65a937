"""The coursework tools: markers found and checked, the student copy, the
autograder, and the sweep that proves every exercise is non-empty and
independent of the others.

The first half uses a tiny fake repository (a `minibert` package of one
lesson file and its tests), so the tools are tested apart from the lessons;
the second half runs them on this repository.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minibert.coursework import check as grading
from minibert.coursework.__main__ import main
from minibert.coursework.exercises import (ASSIGNMENTS, CourseworkError, blank, exercise_tests, find_regions,
                                           placeholder, scan_text)
from minibert.coursework.student import write_student_copy

REPO = Path(__file__).resolve().parents[1]

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
    return subprocess.run([sys.executable, "-m", "minibert.coursework", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


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
    assert "3 of 31 exercises marked" in out
    assert err.count("error: ") == 28


# ---- the student copy ------------------------------------------------------


def test_student_copy_blanks_the_chosen_assignments_and_leaves_no_caches(tmp_path):
    repo = make_fake_repo(tmp_path)
    for junk in ("minibert/__pycache__/lesson.cpython-311.pyc", "runs/model/weights.bin", "cache/x",
                 "minibert.egg-info/PKG-INFO", ".pytest_cache/v"):
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
    rows = grading.check(repo, ["layer-norm", "gelu-erf"], tests_from=repo)
    assert [(r.name, r.points, r.status, r.output) for r in rows] == [
        ("gelu-erf", 1.0, "passed", "1 test passed"), ("layer-norm", 1.0, "passed", "1 test passed")]
    assert grading.all_passed(rows)
    write_student_copy(repo, tmp_path / "hw", assignments=[1])
    edited = FAKE_TESTS.replace("assert lesson", "assert True or lesson")
    (tmp_path / "hw" / "tests" / "test_lesson.py").write_text(edited)
    # graded with the tests of the reference: the copy's edited tests do not count
    rows = grading.check(tmp_path / "hw", ["layer-norm", "gelu-erf", "gelu-tanh"], tests_from=repo)
    assert [(r.name, r.points, r.status) for r in rows] == [
        ("gelu-erf", 0.0, "failed"), ("gelu-tanh", 0.0, "failed"), ("layer-norm", 0.0, "failed")]
    assert rows[2].output == ("test_exercise_layer_norm: NotImplementedError: exercise layer-norm: "
                              "see docs/coursework.md#layer-norm")
    assert rows[1].output == "no test_exercise_gelu_tanh* test found under tests/"
    assert not grading.all_passed(rows)
    report = grading.gradescope(rows)
    assert report["score"] == 0 and report["tests"][0] == {
        "name": "1. gelu-erf", "score": 0.0, "max_score": 1.0,
        "output": "failed: test_exercise_gelu_erf: NotImplementedError: exercise gelu-erf: "
                  "see docs/coursework.md#gelu-erf"}


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
        "passing (the test does not depend on the region)",
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
    # The independence sweep, in one fresh process (see minibert/coursework/independence.py).
    done = run_tool("sweep", "--json", tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    problems = [p for p in report["problems"] if "is not marked in the code" not in p]
    assert problems == []
    assert all(entry["tests"] for entry in report["exercises"].values())


def test_student_copy_of_the_repository_imports_and_scores_zero(tmp_path):
    hw = tmp_path / "hw"
    files, regions = write_student_copy(REPO, hw)
    assert not any(part in (".git", "__pycache__", "runs") or part.endswith((".pyc", ".egg-info"))
                   for name in files for part in Path(name).parts)
    for region in regions:  # the reference body is gone from the copy
        body = "".join((REPO / region.path).read_text().splitlines(keepends=True)[region.start:region.end - 1])
        assert body not in (hw / region.path).read_text()
        assert placeholder(region.name) in (hw / region.path).read_text()
    started = subprocess.run([sys.executable, "probe.py", "--help"], cwd=hw, capture_output=True, text=True,
                             env=grading._environment(hw), timeout=120)
    assert started.returncode == 0 and "usage: probe.py" in started.stdout
    done = run_tool("check", "--repo", hw, "--json", tmp_path / "results.json")
    assert done.returncode == 1, done.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0
    assert len(results["tests"]) >= len(regions)
    assert all(set(t) == {"name", "score", "max_score", "output"} and t["score"] == 0 for t in results["tests"])
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
