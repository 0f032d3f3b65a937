"""Input files that are pipes, and the message for a path that is no file.

A run reads its data files more than once: finetune.py reads --train's first
line to tell its format, then the whole file, then hashes it for --resume;
train_mlm.py trains its vocabulary on the corpus, then tokenizes it. A pipe
(`--train <(zcat train.tsv.gz)`, a FIFO) gives its bytes only once, so the
second read found it empty and said "the file is empty" or "looks like a
TSV". `read_once` copies such an input into a temporary regular file the
first time, and the run reads that copy as often as it needs. A message about
its lines names the path the user gave, not the copy: `as_given` puts it back,
and cli.run calls it on every error; what a run records (task.json,
student.json, --json) names the given path too, and `copy_for` finds the copy
again where a record is read back (a --resume's hash). The copies are removed when the process
ends, and those of a killed process by the next run that copies a pipe. Waiting on a FIFO that no one writes is
ordinary Unix behaviour and stays.
"""

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

from minibert.support.errors import MiniBertError

_copies = []            # the temporary folders holding this process's copies of pipes
_given = {}             # each copy's path -> the path the user gave
_copy_of = {}           # (device, inode) of each pipe read -> its copy
_copy_named = {}        # the path the user gave -> its copy (the last, for two pipes of one name)


def kind_of(path):
    """What a path that exists but is no regular file or folder is, in words."""
    mode = Path(path).stat().st_mode
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


# The input flags whose value is one file, in every script that has them (a
# flag means one thing in every script), and the files a folder given in its
# place may hold under the expected name (a model folder holds its config.json
# and vocab.txt). safe_run refuses a folder there before anything reads it:
# one line naming the flag, rather than the reader's "Is a directory".
# (--corpus and --heldout-corpus take folders of text files; --model, --teacher
# and --student take model folders; --embeddings also takes "random" and "teacher".)
FILE_FLAGS = {"--config": ("config.json", "bert_config.json", "albert_config.json"), "--vocab": ("vocab.txt",),
              "--train": (), "--eval": (), "--predict": (), "--text": (), "--fit-head": (), "--pos-file": ()}


def not_a_file(path, flag, folders=False):
    """The one-line message for an input `path` that cannot be read as a file
    (folders=True: nor as a folder of files), or None if it can. A folder
    given for a file names the file in it that `flag` expects, if it is there."""
    path = Path(path)
    if path.is_file() or (folders and path.is_dir()):
        return None
    if not path.exists():
        return f"{flag} {path}: no such file" + (" or folder" if folders else "")
    if path.is_dir():
        inside = next((path / name for name in FILE_FLAGS.get(flag, ()) if (path / name).is_file()), None)
        return f"{flag} {path}: a folder; expected a file" + (f" ({inside} is there: give that)" if inside else "")
    return f"{flag} {path}: {kind_of(path)}; expected a file" + (" or a folder" if folders else "")


def read_once(path, flag):
    """`path` itself if it is a regular file or a folder (the caller's
    checks say whether it may be one); for a pipe, a character device or a
    socket, the path of a regular temporary copy of all it gives, read once.
    A path that names nothing is one line naming `flag`, the one place every
    script's input files are first looked at."""
    if path is not None and not Path(path).exists():
        raise MiniBertError(f"{flag} {path}: no such file or folder")
    if path is None or Path(path).is_file() or Path(path).is_dir():
        return path
    if not _copies:
        remove_dead_copies()
        _copies.append(tempfile.mkdtemp(prefix=f"minibert-inputs-{os.getpid()}-"))
        atexit.register(shutil.rmtree, _copies[0], ignore_errors=True)
    status = Path(path).stat()
    pipe = (status.st_dev, status.st_ino)
    if pipe in _copy_of:            # the same pipe named twice: copied already (opening it again would wait)
        return _copy_of[pipe]
    copy = Path(_copies[0]) / f"{flag.lstrip('-')}-{len(_given)}-{Path(path).name}"
    try:
        with open(path, "rb") as source, open(copy, "xb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
    except OSError as e:
        raise MiniBertError(f"{flag} {path}: cannot read ({e.strerror or e})") from None
    _given[str(copy)] = str(path)
    _copy_of[pipe] = copy
    _copy_named[str(path)] = copy
    return copy


def check_file_flags(inputs):
    """Every input of FILE_FLAGS in `inputs` ({flag: a path, a list of paths
    or None}) that names a folder is refused, in one line (not_a_file). A
    path that does not exist is left to the run (read_once, or the reader)."""
    for flag, paths in inputs.items():
        if flag not in FILE_FLAGS or paths is None:
            continue
        for path in paths if isinstance(paths, (list, tuple)) else [paths]:
            if Path(path).is_dir():
                raise MiniBertError(not_a_file(path, flag))


def read_all_once(data):
    """read_once for every input of one run ({flag: a path, a list of paths
    or None}), returned in the same form. A pipe named twice in the run is
    copied once; a new run in the same process (main() called again) reads
    its pipes anew, since a pipe of the last run may have left its inode to
    a new one."""
    _copy_of.clear()
    return {flag: [read_once(p, flag) for p in paths] if isinstance(paths, (list, tuple)) else read_once(paths, flag)
            for flag, paths in data.items()}


def remove_dead_copies():
    """Remove the copies that killed runs left (atexit never ran for them): each
    folder is named after its process, minibert-inputs-PID-XXXX, and one whose
    process is gone is removed by the next run that copies a pipe."""
    from minibert.support.fileio import process_is_alive
    for folder in Path(tempfile.gettempdir()).glob("minibert-inputs-*-*"):
        pid = folder.name.split("-")[2]
        if pid.isdigit() and not process_is_alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def copy_for(path):
    """The copy read_once made of `path` (a pipe as the user named it), or
    `path` itself: what a record that names the pipe reads again (its hash)."""
    return _copy_named.get(str(path), path)


def as_given(message):
    """`message` with every pipe's copy named by the path the user gave."""
    for copy, given in _given.items():
        message = message.replace(copy, given)
    return message
