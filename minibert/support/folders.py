"""Folder I/O for what fine-tuning and distillation write: a model folder
written as one unit, and a small JSON record in it (the weights beside it
are checkpoints/safetensors.py's save_weights).

A model folder is written as one unit (write_folder): every file goes into a
hidden sibling folder, which is then renamed into place, so a killed run
leaves either the old model or the new one, never one file of each.
What a kill leaves behind is recognisable by its name and put right by the
next run (recover_folder). Every single file is also written atomically (a
temporary file renamed into place). Reading checks before it trusts: a
missing file or a missing field ends in one MiniBertError line naming the
file.
"""

import os
import shutil
import time
from pathlib import Path

from minibert.support.errors import MiniBertError
from minibert.support.fileio import (DISK_FULL, LEFTOVER, fsync_folder, glob_escape, process_is_alive, read_json_object,
                                     temporary_name, write_json)

# A model folder holds weights, or a record of minibert's or a config next
# to a tokenizer's files (a Google TF folder: bert_config.json, vocab.txt).
# A record or config.json alone is any program's JSON file.
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "tf_model.h5", "flax_model.msgpack", "student.safetensors")
RECORD_FILES = ("config.json", "bert_config.json", "task.json", "student.json")
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "spm.model", "tokenizer_config.json")
CHECKPOINT = "checkpoint.pt"
# Every file a model folder of any kind may hold: what a new model written
# over an old one (--force) replaces rather than keeps beside itself.
MODEL_FOLDER_FILES = (WEIGHTS + RECORD_FILES + TOKENIZER_FILES
                      + ("duplication.json", "metrics.json", "special_tokens_map.json", "added_tokens.json",
                         "vocab.json", "merges.txt", "spiece.model", "generation_config.json"))


def write_folder(folder, write_into, leave_behind=()):
    """Write a model folder as one unit: write_into(staging) fills a hidden
    sibling folder; then the old folder (if any) is renamed away, the new
    one renamed into place, and the old one deleted. Whatever the old folder
    holds that the new one does not (the run's checkpoint.pt, a user's
    files) is carried over, except the names in `leave_behind` (the files of
    another model that --force writes over). A kill at any point leaves the old
    folder or the new one, complete, plus leftovers recover_folder removes."""
    folder = Path(folder).absolute()
    if folder.is_symlink():              # replace the folder the link points to, and keep the link
        folder = folder.resolve()
    if Path.cwd().resolve().is_relative_to(folder.resolve()):
        raise MiniBertError(f"{folder}: holds the current working directory, which cannot be replaced; "
                            f"write the model to another folder")
    if folder.exists() and not folder.is_dir():
        raise MiniBertError(f"{folder}: is a file, not a folder")
    folder.parent.mkdir(parents=True, exist_ok=True)
    recover_folder(folder)
    staging = temporary_name(folder)
    try:
        staging.mkdir()
    except OSError as e:
        raise MiniBertError(f"{folder}: cannot write a folder here ({e.strerror})") from None
    try:
        write_into(staging)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        # A write not made through atomic_write raises the OSError; atomic_write's one line (naming the
        # file in the staging folder) keeps it as its cause.
        cause = e.__cause__ if isinstance(e, MiniBertError) else e
        if isinstance(cause, OSError) and cause.errno in DISK_FULL:
            old_model = folder.is_dir() and any(folder.iterdir())
            kept = "the previous folder is unchanged" if old_model else "nothing was written"
            name = cause.filename or getattr(e, "filename", None)
            where = f", {Path(name).name}" if name else ""
            raise MiniBertError(f"{folder}: cannot write it ({cause.strerror}{where}); {kept}") from None
        raise
    fsync_folder(staging)
    old = staging.with_name(staging.name[:-len(".tmp")] + ".old")
    try:
        if folder.exists():
            os.replace(folder, old)
        os.replace(staging, folder)      # from here on the folder is the new one
    except BaseException:
        # Ctrl-C (KeyboardInterrupt) or a failed rename between the two: the process is still
        # alive, so it puts the old folder back itself instead of leaving it to the next run.
        if not folder.exists() and old.exists():
            os.replace(old, folder)
        elif old.exists() and not staging.exists():     # interrupted just after the new folder arrived
            carry_over(old, folder, leave_behind)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_folder(folder.parent)
    if old.exists():
        try:
            carry_over(old, folder, leave_behind)
        except KeyboardInterrupt:        # finish moving the checkpoint over, then stop
            carry_over(old, folder, leave_behind)
            raise


def carry_over(old, folder, leave_behind=()):
    """Move what `old` holds and `folder` lacks into `folder`, then delete `old`.
    A file another live process is writing (.NAME.PID.HEX.tmp) moves too, so
    its rename onto NAME still lands in the folder; a dead one's is dropped."""
    for entry in sorted(old.iterdir()):
        leftover = LEFTOVER.fullmatch(entry.name)
        if leftover is not None and not process_is_alive(int(leftover["pid"])):
            continue
        if entry.name not in leave_behind and not (folder / entry.name).exists():
            os.replace(entry, folder / entry.name)
    shutil.rmtree(old, ignore_errors=True)
    fsync_folder(folder)


def recover_folder(folder):
    """Put right what a killed write_folder or atomic_write left, for
    `folder`: a new folder half-written (.FOLDER.PID.HEX.tmp) is deleted; an
    old folder renamed away (.FOLDER.PID.HEX.old) is renamed back if the new
    one never arrived, or else has its extra files carried over and is
    deleted; half-written files inside the folder (.FILE.PID.HEX.tmp, e.g.
    .model.safetensors.1234.9f2c.tmp) are deleted. Only what processes that
    are gone left is touched: a live one may be writing right now. Returns
    the names it removed or restored."""
    folder = Path(folder).absolute()
    done = []
    for entry in sorted(folder.parent.glob(f".{glob_escape(folder.name)}.*")):
        match = LEFTOVER.fullmatch(entry.name)
        if match is None or match["name"] != folder.name or process_is_alive(int(match["pid"])):
            continue
        if match["kind"] == "old" and not folder.exists():
            os.replace(entry, folder)       # killed between the two renames: the old folder is complete
        elif match["kind"] == "old":
            carry_over(entry, folder, MODEL_FOLDER_FILES)   # the run's files, never the old model's beside the new
        else:
            shutil.rmtree(entry, ignore_errors=True)
        done.append(entry.name)
    if folder.is_dir():
        for entry in sorted(folder.glob(".*.tmp")):
            match = LEFTOVER.fullmatch(entry.name)
            if match is not None and not process_is_alive(int(match["pid"])):
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
                done.append(f"{folder.name}/{entry.name}")
    return done


def restore_interrupted(folder, wait_seconds=5.0):
    """What a reader does with a folder that is missing: a write killed
    between write_folder's two renames left the previous folder whole, as
    .FOLDER.PID.HEX.old beside it, and it is put back (True). Nothing such
    there: False. A writer still alive may be between its renames right now:
    wait a moment for it (it renames within milliseconds); one that stays
    there, or an old folder that cannot be renamed, is one line saying what to do."""
    folder = Path(folder).absolute()
    for _ in range(max(1, round(wait_seconds / 0.1))):
        if folder.exists():
            return False
        olds = [(entry, LEFTOVER.fullmatch(entry.name)) for entry in
                sorted(folder.parent.glob(f".{glob_escape(folder.name)}.*.old"))]
        olds = [(entry, int(m["pid"])) for entry, m in olds if m is not None and m["name"] == folder.name]
        if not olds:
            return False
        entry, pid = olds[-1]
        if not process_is_alive(pid):
            try:
                os.replace(entry, folder)
            except OSError as e:
                raise MiniBertError(f"{folder}: missing; a write killed half-way left the previous folder as "
                                    f"{entry}, which cannot be renamed back ({e.strerror}): run "
                                    f"mv {entry} {folder}") from None
            return True
        time.sleep(0.1)
    raise MiniBertError(f"{folder}: missing while the run with PID {pid} replaces it (its previous folder is "
                        f"{entry}); try again when that run ends, or if it is stopped: mv {entry} {folder}")


def folder_identity(folder):
    """What tells one folder from the next one write_folder puts under the
    same name: its inode (a new folder is made before the old one is
    deleted, so the two never share one). None for no folder."""
    try:
        status = os.stat(folder)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def read_as_one(folder, read, attempts=3):
    """read(), which reads several files of `folder` (weights, then the
    tokenizer), as one snapshot: a run that replaced the folder in between
    (write_folder) would pair the old weights with the new vocabulary. The
    folder must be the same one before and after; if it was replaced, all is
    read again."""
    for _ in range(attempts):
        before = folder_identity(folder)
        value = read()
        if folder_identity(folder) == before:
            return value
    raise MiniBertError(f"{folder}: replaced by another run each time it was read ({attempts} times); try again "
                        f"when that run has ended")


def write_record(folder, filename, record):
    """The JSON record `folder/filename`, written atomically."""
    write_json(Path(folder) / filename, record)


def read_record(folder, filename, required=(), missing_hint=""):
    """The JSON object of `folder/filename`. A missing file is a MiniBertError
    ("not a ... folder" is what `missing_hint` adds), and so is a missing
    `required` field."""
    path = Path(folder) / filename
    restore_interrupted(folder)
    if not path.is_file():
        raise MiniBertError(f"{folder}: no {filename}" + (f" ({missing_hint})" if missing_hint else ""))
    record = read_json_object(path)
    for key in required:
        if key not in record:
            raise MiniBertError(f"{path}: field '{key}' is missing")
    return record


def check_task_record(path, record, task_names):
    """A fine-tuned folder's task.json fields: a known task, labels as a list
    of names, a max_seq_len a model can use. Each problem is one line naming
    the file and the field."""
    labels, length = record.get("labels"), record["max_seq_len"]
    if record["task"] not in task_names:
        raise MiniBertError(f"{path}: field 'task' is {str(record['task'])[:40]!r}; expected one of "
                            f"{', '.join(task_names)}")
    if labels is not None and not (isinstance(labels, list) and labels and all(isinstance(x, str) for x in labels)):
        raise MiniBertError(f"{path}: field 'labels' must be a list of label names (strings), got {str(labels)[:60]}")
    if type(length) is not int or length < 8:
        raise MiniBertError(f"{path}: field 'max_seq_len' must be an integer >= 8, got {str(length)[:40]}")
