"""The coursework tools: the assignments, a student copy, the autograder.

    python -m minibert.coursework list
    python -m minibert.coursework student ../hw [--assignment 1 2]
    python -m minibert.coursework check --assignment 1 [--repo ../hw] [--json results.json]
    python -m minibert.coursework check attention layer-norm --repo ../hw
    python -m minibert.coursework sweep       (every exercise non-empty and independent)

The texts of the assignments: docs/coursework.md.
"""

import json
import sys
from pathlib import Path

from minibert.coursework import check as grading
from minibert.coursework.exercises import ASSIGNMENTS, find_regions
from minibert.support.cli import ArgumentParser, HelpFormatter, int_between, run

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENT = int_between(1, len(ASSIGNMENTS), " (an assignment number)")


def list_exercises(repo):
    regions, errors = find_regions(repo)
    where = {r.name: r for r in regions}
    for a in ASSIGNMENTS:
        print(f"Assignment {a.number}: {a.title}")
        print(f"  goal: {a.goal}")
        for name in a.exercises:
            r = where.get(name)
            place = f"{r.path}:{r.start}-{r.end}  {r.function}" if r else "(not marked in the code)"
            print(f"  {name:<22} {place}")
        print()
    print(f"{len(regions)} of {sum(len(a.exercises) for a in ASSIGNMENTS)} exercises marked", flush=True)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    return 1 if errors else 0


def write_student(repo, outdir, assignments):
    from minibert.coursework.student import write_student_copy
    files, regions = write_student_copy(repo, outdir, assignments)
    print(f"wrote {len(files)} files to {Path(outdir).resolve()}")
    for r in regions:
        print(f"  blanked {r.name:<22} assignment {r.assignment}  {r.where}  {r.function}")
    print(f"{len(regions)} exercises blanked; the texts: docs/coursework.md; "
          f"grade with: python -m minibert.coursework check --repo {outdir}")
    return 0


def run_check(repo, names, assignments, json_path, tests_from):
    rows = grading.check(repo, names, assignments, tests_from)
    print(grading.table(rows))
    if json_path:
        Path(json_path).write_text(json.dumps(grading.gradescope(rows), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {json_path}")
    return 0 if grading.all_passed(rows) else 1


def run_sweep(repo, full, json_path):
    from minibert.coursework.independence import sweep
    report = sweep(repo, full=full)
    for name, entry in report["exercises"].items():
        print(f"{name:<22} {entry['region']:<40} {len(entry['tests'])} tests, {entry['rerun']} rerun blanked")
    print(f"{len(report['exercises'])} exercises, {report['tests']} tests, {report['rounds']} rounds "
          f"in {report['seconds']} s")
    for problem in report["problems"]:
        print(f"problem: {problem}")
    if json_path:
        Path(json_path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if report["problems"] else 0


def main(argv=None):
    parser = ArgumentParser(prog="python -m minibert.coursework", description=__doc__, formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="the assignments and their exercises")
    student = commands.add_parser("student", help="a copy of the repository with the exercises blanked")
    student.add_argument("outdir", help="a new (or empty) folder outside the repository")
    grade = commands.add_parser("check", help="run the exercises' tests on a copy and score them")
    grade.add_argument("exercises", nargs="*", metavar="EXERCISE", help="exercise names (default: all)")
    grade.add_argument("--json", metavar="RESULTS", help="also write Gradescope's results.json here")
    grade.add_argument("--tests-from", type=Path, default=REPO, metavar="DIR",
                       help="the repository whose tests/ grade the copy (default: this checkout, so edits to the "
                            "copy's tests do not count)")
    sweeping = commands.add_parser("sweep", help="prove every exercise is non-empty and independent")
    sweeping.add_argument("--full", action="store_true", help="rerun every test in every round")
    sweeping.add_argument("--json", metavar="REPORT", help="also write the report as JSON")
    for command, default_help in ((student, "the exercises of these assignments only (default: all)"),
                                  (grade, "the exercises of these assignments")):
        command.add_argument("--assignment", type=ASSIGNMENT, nargs="+", action="extend", default=[],
                             metavar="N", help=default_help)
    for command, what in ((listing, "the repository to scan"), (student, "the repository to copy"),
                          (grade, "the copy to grade"), (sweeping, "the repository to sweep")):
        command.add_argument("--repo", type=Path, default=REPO, metavar="DIR", help=f"{what} (default: this checkout)")
    args = parser.parse_args(argv)
    if args.command == "list":
        return list_exercises(args.repo)
    if args.command == "student":
        return write_student(args.repo, args.outdir, args.assignment)
    if args.command == "check":
        return run_check(args.repo, args.exercises, args.assignment, args.json, args.tests_from)
    return run_sweep(args.repo, args.full, args.json)


if __name__ == "__main__":
    run(main)
