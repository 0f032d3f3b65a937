"""The coursework tools: the assignments, a student copy, the autograder.

    python -m minibert.coursework list
    python -m minibert.coursework student ../hw [--assignment 1 2]
    python -m minibert.coursework check --assignment 1 [--repo ../hw] [--json results.json]
    python -m minibert.coursework check attention layer-norm --repo ../hw --time-limit 60
    python -m minibert.coursework check --assignment 8 --repo ../hw --data DATA   (DATA/sst2/*.tsv)
    python -m minibert.coursework autograder ../autograder.zip --assignment 1   (for Gradescope)
    python -m minibert.coursework sweep       (every exercise non-empty and independent)

check runs the submission in a bubblewrap jail (apt-get install bubblewrap): it sees only a fresh
copy of the tree and the unlabelled inputs of its checks, writes only its own small /tmp, and
nothing it starts outlives the grade. Without bubblewrap, check refuses to grade unless given
--unsandboxed, and then every report says so.

The texts of the assignments: docs/coursework.md.
"""

import json
import os
import sys
from argparse import ArgumentTypeError
from pathlib import Path

from minibert.coursework import check as grading
from minibert.coursework import sandbox
from minibert.coursework.exercises import ASSIGNMENTS, TESTS_FOLDER, CourseworkError, find_regions
from minibert.coursework.milestone import SST2_FILES, TARGET_PERCENT, missing_data
from minibert.support.cli import ArgumentParser, HelpFormatter, int_between, run
from minibert.support import MiniBertError
from minibert.support.files import atomic_write, temporary_name

# The checkout this minibert package was imported from: what --repo and
# --reference mean when not given. The library takes both as arguments.
CHECKOUT = Path(__file__).resolve().parents[2]
ASSIGNMENT = int_between(1, len(ASSIGNMENTS), " (an assignment number)")
RESULTS_ROOM = 1 << 16      # bytes --json's folder must take before grading: more than any results.json


def positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


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


def require_data(data, chosen):
    """--data, where the exercises `chosen` switch on an end-to-end row that
    reads SST-2: given, and holding the files that row reads."""
    needed = grading.data_files(chosen)
    problem = missing_data(data, needed) if needed else None
    if problem:
        raise CourseworkError(f"{problem} (the end-to-end rows of these exercises read it)")


def run_check(args):
    require_data(args.data, grading.select(args.exercises, args.assignment))
    json_path = check_results_path(args.json, args.repo, args.reference) if args.json else None
    grade = grading.check(args.repo, args.exercises, args.assignment, reference=args.reference, data=args.data,
                          exercise_seconds=args.time_limit, import_seconds=args.time_limit,
                          total_seconds=args.total_limit, milestone_seconds=args.milestone_time_limit,
                          milestone_target=args.milestone_target, unsandboxed=args.unsandboxed,
                          limits=sandbox.Limits(memory_bytes=args.memory_limit << 20))
    print(grading.table(grade), flush=True)
    if json_path:
        text = json.dumps(grading.gradescope(grade), indent=2) + "\n"
        try:
            with atomic_write(json_path, "w") as f:
                f.write(text)
        except (OSError, MiniBertError) as e:
            cause = e if isinstance(e, OSError) else e.__cause__      # atomic_write's one line keeps the OSError
            reason = cause.strerror if isinstance(cause, OSError) else str(e)
            raise CourseworkError(f"--json {json_path}: cannot write the results ({reason}); the table above "
                                  f"is the grade") from None
        print(f"wrote {json_path}")
    return 0 if grading.all_passed(grade) else 1


def check_results_path(path, submission, reference, package_name="the submission's package"):
    """--json: a new file, or one this command wrote before (a results file),
    outside the submission's package (wherever --repo finds it: the folder
    itself, minibert/ or one level down) and the instructor's package and
    tests; its folder is made if missing, and a small file is written there
    and removed, so that a full disk is found too. Checked before grading,
    so a grade is never computed and then lost, and no other file (a
    README, a lesson) is ever written over."""
    path = Path(path)
    resolved = path.resolve()
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise CourseworkError(f"--json {path}: not a regular file; give a new or existing file's path")
    try:
        package = grading.find_package(submission)
    except CourseworkError:           # the grade says why; nothing of it can be written over
        package = Path(submission) / "minibert"
    for folder, what in ((package, package_name),
                         (Path(reference) / "minibert", "the instructor's package"),
                         (Path(reference) / TESTS_FOLDER, "the instructor's tests")):
        folder = Path(folder).resolve()
        if resolved.is_relative_to(folder):
            raise CourseworkError(f"--json {path}: inside {what} ({folder}); write the results elsewhere")
    if path.exists() and not is_results_file(path):
        raise CourseworkError(f"--json {path}: exists and is not a results file this command wrote; give a new "
                              f"file's path (nothing is written over another file)")
    try:
        resolved.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CourseworkError(f"--json {path}: cannot make its folder ({e.strerror})") from None
    probe = temporary_name(resolved)
    try:
        with open(probe, "xb") as f:
            f.write(bytes(RESULTS_ROOM))
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise CourseworkError(f"--json {path}: cannot write there ({e.strerror}); nothing was graded") from None
    finally:
        probe.unlink(missing_ok=True)
    return path


def is_results_file(path):
    """Whether `path` holds what check --json or sweep --json writes: a JSON
    object with its "tests" (Gradescope's results) or "exercises" (the sweep)."""
    try:
        if path.stat().st_size > 64 << 20:
            return False
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(value, dict) and ("tests" in value or "exercises" in value)


def write_autograder(args):
    from minibert.coursework.student import write_autograder
    chosen = grading.select(args.exercises, args.assignment)   # the names are checked here, not on Gradescope
    require_data(args.data, chosen)
    selection = list(args.exercises) + (["--assignment", *map(str, args.assignment)] if args.assignment else [])
    names = write_autograder(args.repo, args.archive, selection, args.data)
    print(f"wrote {args.archive}: {len(names)} files; grades {len(chosen)} exercises "
          f"({' '.join(selection) or 'all'})")
    print("upload it as the autograder of a programming assignment (base image: Ubuntu, Python 3.10 or newer)")
    return 0


def run_sweep(repo, full, json_path):
    from minibert.coursework.exercises import sweep
    if json_path:                      # before the sweep, which rewrites and restores the lessons' files
        check_results_path(json_path, repo, repo, package_name="the repository's package")
    report = sweep(repo, full=full)
    for name, entry in report["exercises"].items():
        print(f"{name:<22} {entry['region']:<40} {len(entry['tests'])} tests, {entry['rerun']} rerun blanked")
    print(f"{len(report['exercises'])} exercises, {report['tests']} tests, {report['rounds']} rounds "
          f"in {report['seconds']} s")
    for problem in report["problems"]:
        print(f"problem: {problem}")
    if json_path:
        with atomic_write(json_path, "w") as f:
            f.write(json.dumps(report, indent=2) + "\n")
    return 1 if report["problems"] else 0


def main(argv=None):
    parser = ArgumentParser(prog="python -m minibert.coursework", description=__doc__, formatter_class=HelpFormatter)
    data_rows = " and ".join(row for row, _, _, needs in grading.END_TO_END if needs)
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="the assignments and their exercises")
    student = commands.add_parser("student", help="a copy of the repository with the exercises blanked")
    student.add_argument("outdir", help="a new (or empty) folder outside the repository")
    grade = commands.add_parser("check", help="run the exercises' tests on a copy and score them")
    grade.add_argument("exercises", nargs="*", metavar="EXERCISE", help="exercise names (default: all)")
    grade.add_argument("--json", metavar="RESULTS", help="also write Gradescope's results.json here")
    grade.add_argument("--reference", type=Path, default=CHECKOUT, metavar="DIR",
                       help="the instructor's checkout: its tests, fixtures and outputs grade the submission "
                            "(default: this checkout, so a submission's own tests never count)")
    grade.add_argument("--data", type=Path, metavar="DIR",
                       help=f"the data folder holding {' and '.join(SST2_FILES)}, which the end-to-end rows "
                            f"{data_rows} read; needed only where the exercises chosen switch one of them on")
    grade.add_argument("--time-limit", type=positive_seconds, default=grading.EXERCISE_SECONDS, metavar="S",
                       help="seconds each exercise's tests (and the package's import) may take; one that runs "
                            "longer scores 0 and the others go on (default: %(default)s)")
    grade.add_argument("--total-limit", type=positive_seconds, default=grading.TOTAL_SECONDS, metavar="S",
                       help="seconds the whole grade may take; what is not reached by then scores 0 "
                            "(default: %(default)s)")
    grade.add_argument("--milestone-time-limit", type=positive_seconds, default=grading.MILESTONE_SECONDS,
                       metavar="S", help="seconds the SST-2 milestone's fine-tuning may take (default: %(default)s)")
    grade.add_argument("--milestone-target", type=float, default=None, metavar="PERCENT",
                       help=f"SST-2 dev accuracy the milestone must reach (default: {TARGET_PERCENT:g})")
    grade.add_argument("--memory-limit", type=int_between(512, 1 << 20, " (MiB)"),
                       default=sandbox.Limits().memory_bytes >> 20, metavar="MIB",
                       help="address space each process of the submission may map, in MiB; torch alone maps "
                            "about 1 GiB before any tensor (default: %(default)s)")
    grade.add_argument("--unsandboxed", action="store_true",
                       help="grade without the bubblewrap jail where none can be built (no bubblewrap, or user "
                            "namespaces switched off): the submission then runs with your rights, so use it only "
                            "for your own code; every report of the grade says it was unsandboxed")
    zipping = commands.add_parser("autograder", help="Gradescope's autograder archive for these exercises")
    zipping.add_argument("archive", metavar="ARCHIVE", help="the .zip to write, outside the repository")
    zipping.add_argument("exercises", nargs="*", metavar="EXERCISE", help="exercise names (default: all)")
    zipping.add_argument("--data", type=Path, metavar="DIR",
                         help=f"the data folder whose {' and '.join(SST2_FILES)} go into the archive, for the "
                              f"end-to-end rows; needed only where the exercises chosen switch one of them on")
    sweeping = commands.add_parser("sweep", help="prove every exercise is non-empty and independent")
    sweeping.add_argument("--full", action="store_true", help="rerun every test in every round")
    sweeping.add_argument("--json", metavar="REPORT", help="also write the report as JSON")
    for command, default_help in ((student, "the exercises of these assignments only (default: all)"),
                                  (grade, "the exercises of these assignments"),
                                  (zipping, "the exercises of these assignments")):
        command.add_argument("--assignment", type=ASSIGNMENT, nargs="+", action="extend", default=[],
                             metavar="N", help=default_help)
    for command, what in ((listing, "the repository to scan"), (student, "the repository to copy"),
                          (grade, "the submission to grade: a repository, a folder holding one, or its minibert/ package"),
                          (zipping, "the instructor's checkout to pack"), (sweeping, "the repository to sweep")):
        command.add_argument("--repo", type=Path, default=CHECKOUT, metavar="DIR",
                             help=f"{what} (default: this checkout)")
    args = parser.parse_args(argv)
    if args.command == "list":
        return list_exercises(args.repo)
    if args.command == "student":
        return write_student(args.repo, args.outdir, args.assignment)
    if args.command == "check":
        return run_check(args)
    if args.command == "autograder":
        return write_autograder(args)
    return run_sweep(args.repo, args.full, args.json)


if __name__ == "__main__":
    run(main)
