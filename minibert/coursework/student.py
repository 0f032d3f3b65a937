"""Handing the checkout out: the student copy, and Gradescope's autograder archive.

Both hold the same files of the instructor's checkout (repository_files):
the student copy with the chosen exercises blanked, the archive whole, with
the list of those files (MANIFEST_NAME) from which every graded tree is
written.

The student copy holds the files git knows (tracked, or new and not ignored); outside
git, the files listed in MANIFEST_NAME (which the Gradescope archive carries,
so that the data packed beside the checkout never reaches a graded tree), or
else every file but .git, caches, compiled files and runs; never a
virtual environment (a folder holding pyvenv.cfg, or .venv/venv), whose
editable install would point back at the instructor's checkout; so no
solution text reaches it through history, bytecode or site-packages.
"""

import os
import shlex
import shutil
import subprocess
import zipfile
from pathlib import Path

from minibert.coursework.exercises import CourseworkError, assignment, blank, regions_to_blank
from minibert.coursework.milestone import SST2_FILES, missing_data
from minibert.support.files import atomic_write, temporary_name

MANIFEST_NAME = ".minibert-files"     # one repository file per line, written by the autograder archive
SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".benchmarks", ".venv", "venv", ".tox", "build", "dist",
                ".mypy_cache", ".ipynb_checkpoints"}
# The repository's own scratch folders (runs/, where the README's examples write; cache/), skipped at its
# root only: a folder of the same name deeper down is the package's own.
SKIPPED_AT_ROOT = {"runs", "cache"}


def _skipped(relative):
    parts = Path(relative).parts
    return (any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in parts[:-1])
            or parts[0] in SKIPPED_AT_ROOT or relative.endswith((".pyc", ".pyo")) or parts[-1] in SKIPPED_DIRS)


def repository_files(repo):
    """The files of the repository, relative, with "/"."""
    repo = Path(repo).resolve()
    listed = None
    try:
        top = subprocess.run(["git", "-C", str(repo), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if Path(top).resolve() == repo:
            out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                                  "--exclude-standard"], capture_output=True, check=True).stdout
            listed = sorted({name for name in out.decode("utf-8").split("\0") if name})
    except (OSError, subprocess.CalledProcessError):
        listed = None
    if listed is None and (repo / MANIFEST_NAME).is_file():
        listed = sorted({name for name in (repo / MANIFEST_NAME).read_text(encoding="utf-8").splitlines()
                         if name and not name.startswith("/") and ".." not in Path(name).parts})
    if listed is None:
        listed = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    # a virtual environment is the folder that holds pyvenv.cfg, whatever its name
    environments = tuple(name[:-len("pyvenv.cfg")] for name in listed
                         if name.endswith("/pyvenv.cfg"))
    return [name for name in listed if not _skipped(name) and not (environments and name.startswith(environments))
            and (repo / name).is_file()]


def write_student_copy(repo, outdir, assignments=None):
    """Copy `repo` to `outdir` with the exercises of `assignments` (numbers;
    None = all) blanked. Returns (files copied, regions blanked)."""
    repo, outdir = Path(repo).resolve(), Path(outdir).resolve()
    if outdir.is_relative_to(repo):
        raise CourseworkError(f"{outdir}: inside the repository {repo}; write the student copy elsewhere")
    if outdir.exists() and (not outdir.is_dir() or any(outdir.iterdir())):
        raise CourseworkError(f"{outdir}: exists and is not an empty folder")
    regions, _ = regions_to_blank(repo)
    if assignments:
        chosen = {number for number in assignments if assignment(number)}
        regions = [r for r in regions if r.assignment in chosen]
    by_file = {}
    for region in regions:
        by_file.setdefault(region.path, []).append(region)
    blanked = {}
    for path, found in by_file.items():
        text = blank((repo / path).read_text(encoding="utf-8"), found)
        try:
            compile(text, path, "exec")
        except SyntaxError as e:
            raise CourseworkError(f"{path}:{e.lineno}: blanked, the file no longer compiles: {e.msg}") from None
        blanked[path] = text
    files = repository_files(repo)
    # Written into a hidden sibling, then renamed: a full disk or a kill leaves no half copy behind.
    staging = temporary_name(outdir)
    try:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        for name in files:
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if name in blanked:
                target.write_text(blanked[name], encoding="utf-8")
            else:
                shutil.copy2(repo / name, target)
        if outdir.exists():
            outdir.rmdir()                   # empty, as checked above
        os.replace(staging, outdir)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise CourseworkError(f"{outdir}: cannot write the student copy ({e.strerror or e}"
                              f"{', ' + e.filename if e.filename else ''}); nothing was left there") from None
    except BaseException:             # Ctrl-C: the half copy goes too
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return files, regions


# ----------------------------------------------------------------------------
# Gradescope's autograder archive
# ----------------------------------------------------------------------------

# Gradescope unpacks the archive an instructor uploads into /autograder/source,
# runs its `setup.sh` once to build the image, then `run_autograder` for every
# submission (the student's files in /autograder/submission, the grade expected
# in /autograder/results/results.json). The archive written here holds the
# instructor's checkout (the files git knows, as a student copy does), the two
# scripts of minibert/coursework/gradescope/ at its root, with the exercises to
# grade written into run_autograder, and the SST-2 files of the data folder
# given (the end-to-end rows read them) under data/sst2/, outside the list of
# the checkout's files (MANIFEST_NAME) from which every graded tree is
# written: source/ is no git checkout, and without the list the data and its
# labels would be copied into the tree the submission runs in.

SCRIPTS = Path(__file__).with_name("gradescope")


def run_autograder_script(selection):
    """run_autograder with SELECTION replaced by the check's arguments."""
    text = (SCRIPTS / "run_autograder").read_text(encoding="utf-8")
    return text.replace(" SELECTION ", f" {shlex.join(selection)} " if selection else " ")


def write_autograder(repo, archive, selection, data=None):
    """Write the archive of the checkout `repo`, grading `selection` (check's
    arguments), with the SST-2 files of the folder `data` (None: no data);
    returns the names it holds."""
    repo, archive = Path(repo).resolve(), Path(archive)
    if archive.resolve().is_relative_to(repo):
        raise CourseworkError(f"{archive}: inside the repository {repo}; write the archive elsewhere")
    if archive.suffix != ".zip":
        raise CourseworkError(f"{archive}: expected a .zip file name (Gradescope takes a zip archive)")
    if archive.exists() and not archive.is_file():
        raise CourseworkError(f"{archive}: exists and is not a file")
    problem = missing_data(data) if data is not None else None
    if problem:
        raise CourseworkError(f"{problem}; give the folder holding {' and '.join(SST2_FILES)}")
    names = []
    with atomic_write(archive, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
        files = [name for name in repository_files(repo) if name != MANIFEST_NAME]
        for name in files:
            z.write(repo / name, name)
            names.append(name)
        z.writestr(MANIFEST_NAME, "".join(f"{name}\n" for name in files))
        names.append(MANIFEST_NAME)
        for script, text in (("setup.sh", (SCRIPTS / "setup.sh").read_text(encoding="utf-8")),
                             ("run_autograder", run_autograder_script(selection))):
            info = zipfile.ZipInfo(script)
            info.external_attr = 0o100755 << 16      # executable: Gradescope runs them as programs
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, text)
            names.append(script)
        for name in SST2_FILES if data is not None else ():
            z.write(Path(data) / name, f"data/{name}")
            names.append(f"data/{name}")
    return names
