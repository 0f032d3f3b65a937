"""Files: written so that a crash never leaves half of one, known by a hash,
and read once when they are pipes.

    atomic writes      a temporary name in the same folder, fsync, then a rename
                       (atomic_write); JSON files, arrays and torch files written so
    fingerprints       the one hash of a record (fingerprint) and of a file's bytes
                       (file_sha256); a tokenizer's, so a replaced vocab.txt is refused
    inputs             an input that is a pipe, copied once into a regular file
                       (read_once); the message for a path that is no file

Each part below opens with why it is needed.
"""

import atexit
import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from pathlib import Path

from minibert.support import MiniBertError

# ==============================================================================
# Writing files so that a crash never leaves half a file behind.
#
# A checkpoint written in place is destroyed if the process dies half-way
# through: the old file is already truncated and the new one is incomplete.
# `atomic_write` avoids that with the usual three steps:
#
# 1. write everything to a temporary file in the *same folder* as the target
#    (a rename is only atomic within one file system);
# 2. flush Python's buffer and `os.fsync` the file, so the bytes are on disk
#    and not just in the operating system's cache;
# 3. `os.replace` the temporary file onto the target. Readers see either the
#    old complete file or the new complete file, never a mixture.
#
# If anything goes wrong before step 3, the temporary file is deleted and the
# target is left untouched. A rename replaces whatever the name pointed at, so
# a target that is not a regular file (a symbolic link, a FIFO, a device such
# as /dev/null, a folder) is refused: renaming onto it would replace the link
# or the device node itself with a plain file. A full disk or a file-size
# limit is a one-line error naming the file.
#
#     with atomic_write("model.safetensors") as f:
#         f.write(header)
#         f.write(data)
# ==============================================================================


# A full disk, a file-size limit (RLIMIT_FSIZE) or a full quota.
DISK_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def temporary_name(path):
    """A fresh hidden name next to `path`, e.g. `.model.safetensors.1234.9f2c.tmp`."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


# What a writer leaves while it works, named after its process: temporary_name's
# .NAME.PID.HEX.tmp, and outputs.write_folder's .FOLDER.PID.HEX.old (the old
# folder between its two renames). A kill leaves them behind for good.
LEFTOVER = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.[0-9a-f]+\.(?P<kind>tmp|old)")


def process_is_alive(pid):
    """Is process `pid` running on this machine? (Signal 0 checks without sending anything.)"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):   # it exists, but belongs to another user; or not a pid at all
        return True
    return True


def remove_leftovers(path):
    """Remove the .NAME.PID.HEX.tmp files (or folders) that killed writers
    left next to `path`; a live PID's are kept: it may be writing right now.
    Returns the names removed."""
    path = Path(path)
    removed = []
    for candidate in sorted(path.parent.glob(f".{glob_escape(path.name)}.*.tmp")):
        match = LEFTOVER.fullmatch(candidate.name)
        if match is None or match["name"] != path.name or process_is_alive(int(match["pid"])):
            continue
        if candidate.is_dir():
            shutil.rmtree(candidate, ignore_errors=True)
        else:
            candidate.unlink(missing_ok=True)
        removed.append(candidate.name)
    return removed


def remove_leftovers_in(folder):
    """Remove every killed writer's .NAME.PID.HEX.tmp in `folder`, whatever
    NAME: for a folder that belongs to one cache, whose next file may have
    another name than the one a killed run was writing (the teacher-logit
    cache's key changes with the settings). A live PID's are kept. Returns
    the names removed."""
    folder = Path(folder)
    removed = []
    for candidate in sorted(folder.glob(".*.tmp")) if folder.is_dir() else ():
        match = LEFTOVER.fullmatch(candidate.name)
        if match is not None and not process_is_alive(int(match["pid"])):
            removed += remove_leftovers(folder / match["name"])
    return removed


def glob_escape(name):
    """`name` with glob's special characters taken literally."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def fsync_folder(folder):
    """Make a rename inside `folder` durable. Best effort: not every OS allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path, mode="wb"):
    """Open a temporary file for writing; on success move it onto `path`.

    `mode` is "wb" (bytes, the default) or "w" (UTF-8 text). The file gets the
    usual permissions for a new file (0666 minus the umask).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_write: mode must be 'wb' or 'w', not {mode!r}")
    path = Path(path)
    refuse_special(path)
    remove_leftovers(path)              # what a killed writer of this same file left: this run cleans up
    tmp = temporary_name(path)
    try:
        # O_EXCL: never write into a file someone else created under that name.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise MiniBertError(f"{path}: cannot write here ({e.strerror})") from e
    try:
        encoding = "utf-8" if mode == "w" else None
        with open(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            kept = "the previous file is unchanged" if path.exists() else "nothing was written"
            error = MiniBertError(f"{path}: cannot write it ({e.strerror}); {kept}")
            error.filename = str(path)          # for a writer of many files (outputs.write_folder)
            raise error from e
        raise
    fsync_folder(path.parent)


def save_array(path, array):
    """np.save, atomically (atomic_write), so that a full disk is one line
    naming the file. numpy writes straight from its buffer to a real file and
    reports a short write without an errno ("N requested and M written"); a
    plain writer object makes it go through write(), whose OSError says
    ENOSPC or EFBIG."""
    import numpy as np

    class Writer:
        def __init__(self, f):
            self.write = f.write

    with atomic_write(path) as f:
        np.save(Writer(f), array)


def save_torch(path, value):
    """torch.save, atomically (atomic_write), so that a full disk is one line
    naming the file: torch's zip writer turns a failed write into a
    RuntimeError ("unexpected pos"), so the OSError that caused it is kept
    here and raised instead."""
    import torch

    class Writer:
        error = None

        def __init__(self, f):
            self.f = f

        def write(self, data):
            try:
                return self.f.write(data)
            except OSError as e:
                self.error = e
                raise

        def flush(self):
            self.f.flush()

    with atomic_write(path) as f:
        writer = Writer(f)
        try:
            torch.save(value, writer)
        except RuntimeError:
            if writer.error is not None:
                raise writer.error from None
            raise


def refuse_special(path):
    """A MiniBertError unless `path` is absent or a regular file (not a link)."""
    path = Path(path)
    if path.is_symlink():
        raise MiniBertError(f"{path}: a symbolic link; give the path of a regular file (writing would replace "
                            f"the link, not the file it points to)")
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file (a device, FIFO or socket)"
        raise MiniBertError(f"{path}: {what}; give the path of a new or existing regular file")


def read_json_object(path):
    """A JSON file holding one object (a config), or a MiniBertError naming the file.

    Every way the parse can fail ends in a MiniBertError: bad JSON, bad UTF-8,
    nesting deeper than Python's recursion limit, and integers longer than
    Python's limit on integer digits (a guard against slow conversions).
    """
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read JSON ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:  # bad JSON, bad UTF-8
        raise MiniBertError(f"{path}: cannot read JSON ({e})") from None
    except ValueError:  # the one other ValueError json raises: Python's integer-digit limit
        raise MiniBertError(f"{path}: cannot read JSON (an integer with more digits "
                            f"than Python converts)") from None
    except RecursionError:  # json recurses once per nested [ or {
        raise MiniBertError(f"{path}: cannot read JSON (nested too deeply)") from None
    if not isinstance(values, dict):
        raise MiniBertError(f"{path}: expected a JSON object")
    return values


def write_json(path, values):
    """`values` as indented JSON, written atomically: the one writer for
    results, summaries and records (a crash never leaves half a JSON file)."""
    with atomic_write(path, mode="w") as f:
        json.dump(values, f, indent=2)
        f.write("\n")


def file_sha256(path, chunk_bytes=1 << 20):
    """The SHA-256 of a file's bytes, as hex, read a chunk at a time (files may be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            h.update(chunk)
    return h.hexdigest()


# ==============================================================================
# Fingerprints: a short hash that says whether two things are the same.
#
# `fingerprint(value)` is the one hash of a record (a JSON-able value), and
# file_sha256 (above) the one hash of a file's bytes: every cache key and every
# record --resume compares is made of these two. A tokenizer's fingerprint covers its kind, its casing and every token in id
# order. The pretraining token cache is keyed by it (caches.py), --resume
# compares it, and a fine-tuned folder records it in task.json, so that a
# vocab.txt replaced later (another vocabulary of any size, or another casing)
# is refused instead of quietly feeding the model the wrong ids.
# ==============================================================================


def fingerprint(value):
    """SHA-256 (hex) of a JSON-able value, its dict keys sorted."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def vocabulary(tokenizer):
    """Every token, in id order."""
    return tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))


def tokenizer_fingerprint(tokenizer):
    """SHA-256 of the tokenizer's kind, casing and tokens in id order."""
    return fingerprint([tokenizer.kind, tokenizer.do_lower_case, vocabulary(tokenizer)])


def check_tokenizer_matches(folder, tokenizer, config, record):
    """A fine-tuned folder's tokenizer is the one its model was fine-tuned
    with. Ids beyond the embedding table would fail mid-run (an index out of
    range); another vocabulary of any size would quietly feed the model wrong
    ids (task.json records the fingerprint, and a task.json without it is
    refused: the check cannot be made)."""
    if tokenizer.vocab_size > config.vocab_size:
        raise MiniBertError(f"{folder}: its tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
                            f"vocab_size {config.vocab_size} (config.json): the vocabulary is not this model's")
    if "vocabulary_fingerprint" not in record:
        raise MiniBertError(f"{Path(folder) / 'task.json'}: field 'vocabulary_fingerprint' is missing")
    if record["vocabulary_fingerprint"] != tokenizer_fingerprint(tokenizer):
        raise MiniBertError(f"{folder}: its tokenizer files (vocab.txt, ...) are not the vocabulary it was "
                            f"fine-tuned with (task.json's vocabulary_fingerprint): tokens or casing changed")


# ==============================================================================
# Input files that are pipes, and the message for a path that is no file.
#
# A run reads its data files more than once: finetune.py reads --train's first
# line to tell its format, then the whole file, then hashes it for --resume;
# train_mlm.py trains its vocabulary on the corpus, then tokenizes it. A pipe
# (`--train <(zcat train.tsv.gz)`, a FIFO) gives its bytes only once, so the
# second read found it empty and said "the file is empty" or "looks like a
# TSV". `read_once` copies such an input into a temporary regular file the
# first time, and the run reads that copy as often as it needs. A message about
# its lines names the path the user gave, not the copy: `as_given` puts it back,
# and cli.run calls it on every error; what a run records (task.json,
# student.json, --json) names the given path too, and `copy_for` finds the copy
# again where a record is read back (a --resume's hash). The copies are removed when the process
# ends, and those of a killed process by the next run that copies a pipe. Waiting on a FIFO that no one writes is
# ordinary Unix behaviour and stays.
# ==============================================================================


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
