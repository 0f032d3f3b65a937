"""Gradescope's autograder archive.

Gradescope unpacks the archive an instructor uploads into /autograder/source,
runs its `setup.sh` once to build the image, then `run_autograder` for every
submission (the student's files in /autograder/submission, the grade expected
in /autograder/results/results.json). The archive written here holds the
instructor's checkout (the files git knows, as a student copy does), the two
scripts of minibert/coursework/gradescope/ at its root, with the exercises to
grade written into run_autograder, and the SST-2 files of the data folder
given (the end-to-end rows read them) under data/sst2/, outside the list of
the checkout's files
(student.MANIFEST_NAME) from which every graded tree is written: source/
is no git checkout, and without the list the data and its labels would be
copied into the tree the submission runs in.
"""

import shlex
import zipfile
from pathlib import Path

from minibert.coursework.exercises import CourseworkError
from minibert.coursework.milestone import SST2_FILES, missing_data
from minibert.coursework.student import MANIFEST_NAME, repository_files
from minibert.support.files import atomic_write

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
