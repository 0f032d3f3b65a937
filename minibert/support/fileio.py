"""Writing files so that a crash never leaves half a file behind.

A checkpoint written in place is destroyed if the process dies half-way
through: the old file is already truncated and the new one is incomplete.
`atomic_write` avoids that with the usual three steps:

1. write everything to a temporary file in the *same folder* as the target
   (a rename is only atomic within one file system);
2. flush Python's buffer and `os.fsync` the file, so the bytes are on disk
   and not just in the operating system's cache;
3. `os.replace` the temporary file onto the target. Readers see either the
   old complete file or the new complete file, never a mixture.

If anything goes wrong before step 3, the temporary file is deleted and the
target is left untouched. A rename replaces whatever the name pointed at, so
a target that is not a regular file (a symbolic link, a FIFO, a device such
as /dev/null, a folder) is refused: renaming onto it would replace the link
or the device node itself with a plain file. A full disk or a file-size
limit is a one-line error naming the file.

    with atomic_write("model.safetensors") as f:
        f.write(header)
        f.write(data)
"""

import contextlib
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path

from minibert.support.errors import MiniBertError

# A full disk, a file-size limit (RLIMIT_FSIZE) or a full quota.
DISK_FULL = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def temporary_name(path):
    """A fresh hidden name next to `path`, e.g. `.model.safetensors.1234.9f2c.tmp`."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


# What a writer leaves while it works, named after its process: temporary_name's
# .NAME.PID.HEX.tmp, and folders.write_folder's .FOLDER.PID.HEX.old (the old
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
            error.filename = str(path)          # for a writer of many files (folders.write_folder)
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
