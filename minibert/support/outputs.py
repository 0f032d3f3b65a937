"""A run made safe by one call: every script that writes calls safe_run once,
with what it reads and what it writes, before any slow work.

    safe = safe_run(inputs={"--model": args.model}, data={"--train": args.train},
                    folder=args.output, record="task.json", files={"--json": args.json},
                    resume=args.resume)
    examples = task.read(safe.data["--train"])        # a pipe: its copy, read as often as needed
    fine_tune(..., args.output, resume=safe.resume)

What the run then holds, in this order:

  - every place it writes (the model `folder`, its `caches`, its `files`:
    predictions, --json, --plot) is apart from everything it reads (`inputs`
    and `data`): not one of them, not inside one, not holding one (a folder
    written as one unit would drop or replace what it held); nowhere in the
    minibert package, whose bundled model every script falls back on; inside
    no model folder of any kind (pretrained, fine-tuned, student), where it
    would replace the model's files; never inside the folder of the model it
    copies (`source`), even with --force;
  - no two of its outputs are one file (the last written would be all that is left);
  - one run per folder: a second run on the same `folder` stops at once, naming
    the PID of the first (a lock the operating system drops when the run dies,
    however it dies); and, holding it, what a killed writer left there is put
    right (recover_folder, below) before the folder is looked at;
  - the folder holds nothing the run would write over: a training run's
    (`record`, e.g. "task.json") may hold its own record and checkpoint only
    with --resume, and never another model; any other model folder must be
    new or empty unless --force;
  - every `data` file that is a pipe (`<(zcat ...)`, /dev/stdin) is read once,
    into a copy the run reads as often as it needs (support/files.read_once);
  - --resume continues from the folder's checkpoint, or says that it starts
    from step 0 (`safe.resume`);
  - the folder is written as one unit (write_folder, below, which every
    run's save goes through), and SIGTERM puts the old folder back as Ctrl-C does.

A model folder is recognised by its files (model_files), not by its name.

The second half of this file writes the folder: as one unit (write_folder),
put right after a kill (recover_folder), read back as one snapshot
(read_as_one), with its small JSON record (write_record, read_record).

Under torchrun every process runs the script, and one of them, the main
process (is_main_process), does everything a single run would do once: it
holds the lock, prints, and writes the model folder, --json and --plot.
"""

import os
import shutil
import signal
import threading
import time
from pathlib import Path

from minibert.support import MiniBertError, Terminated
from minibert.support.files import (DISK_FULL, LEFTOVER, as_given, check_file_flags, copy_for, file_sha256,
                                    fingerprint, fsync_folder, glob_escape, process_is_alive, read_all_once,
                                    read_json_object, refuse_special, temporary_name, write_json)


def is_main_process(rank=None):
    """Whether the process of `rank` (default: this one) is the main one: the
    only process that prints, shows progress and writes files. torchrun starts
    several copies of a script and numbers them in the environment variable
    RANK; the first, rank 0, is the main one, and so is a script started
    without torchrun. The one rule for the whole package: the commands'
    Context.is_main (commands/trainer.py), the lock below and cli.script_main,
    which silences the other processes, all ask it. Read from the
    environment, not from torch.distributed, so it answers before torch is
    imported (--help) and before the processes have joined their group."""
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    return int(rank) == 0


def safe_run(inputs=(), data=(), *, folder=None, record=None, force=False, resume=None, source=None,
             keep=(), caches=(), files=(), flag="--output"):
    """Make a run safe, once, before any slow work (the module's docstring
    says what it then holds). Returns a SafeRun: `.data` (each data flag's
    path to read: a pipe's copy), `.resume` and `.folder`.

    inputs: {flag: path, a list of paths or None} the run reads (a path that
    does not exist, a hub name, is skipped). data: inputs read as files,
    which must exist; a pipe among them is copied once. folder: the model
    folder the run writes (its flag `flag`), or None. record: a training
    run's record file ("task.json", "student.json"); without one the folder
    must be new or empty unless `force`. resume: None for a run that cannot
    resume; True or False (--resume) for one that can. source: the model a
    copy is made of (duplicate.py). keep: names in the folder that do not
    count as contents (a token cache). caches: {flag: folder} the run fills
    (they may lie inside its folder). files: {flag: path or None} the other
    files it writes."""
    inputs = {**dict(inputs), **dict(data)}
    check_file_flags(inputs)                 # a folder given where one file is expected
    caches = {f: path for f, path in dict(caches).items() if path is not None}
    files = {f: path for f, path in dict(files).items() if path}
    owned = {flag: folder} if folder is not None else {}
    if folder is not None:
        _check_folder_place(folder, {**inputs, **caches}, flag, source, filled=tuple(caches))
    for cache_flag, cache in caches.items():
        _check_cache_folder(cache_flag, cache, inputs, folder)
    for file_flag, path in files.items():
        _check_output_file(path, inputs, file_flag, {**owned, **caches})
    _check_distinct_outputs(files)
    lock = None
    if folder is not None and is_main_process():    # torchrun: the main process alone
        lock = _lock(folder, flag)
    run = SafeRun(folder and Path(folder), {}, False, lock)
    try:
        if lock is not None:
            recover_folder(folder)
        if folder is not None and record is not None:
            _check_training_contents(folder, record, resume, flag)
        elif folder is not None:
            _check_folder_contents(folder, force, resume, keep, flag)
        run.data = read_all_once(dict(data))
        run.resume = folder is not None and bool(resume) and _resume_from_checkpoint(folder)
    except BaseException:
        run.close()                          # refused: the folder is free again at once
        raise
    return run


class SafeRun:
    """What safe_run gives the run: `folder` (a Path, or None), `data` ({flag:
    the path to read}, a pipe's copy in place of the pipe) and `resume` (True:
    continue from the folder's checkpoint). Its lock on the folder is
    released when the script's main returns (cli.script_main), or at the end
    of a `with safe_run(...)` block."""

    def __init__(self, folder, data, resume, lock):
        self.folder, self.data, self.resume, self.lock = folder, data, resume, lock

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def close(self):
        """Release the lock on the folder (the run has ended)."""
        if self.lock in HELD_LOCKS:
            HELD_LOCKS.remove(self.lock)
            _release(self.lock)


# What a model folder is: its files (WEIGHTS, RECORD_FILES and TOKENIZER_FILES below). A record of
# minibert's marks a kind; a folder with weights and neither record is a pretrained model.
RECORDS = {"student.json": "student", "task.json": "fine-tuned"}
KINDS = {"student": "a distilled student", "fine-tuned": "a fine-tuned model", "pretrained": "a pretrained model"}


def model_files(folder):
    """The files that make `folder` a model folder (an empty list: it is not one)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    weights = [name for name in WEIGHTS if (folder / name).is_file()]
    records = [name for name in RECORD_FILES if (folder / name).is_file()]
    if weights or any((folder / name).is_file() for name in TOKENIZER_FILES):
        return records + weights
    return []


def describe(folder, files):
    """"a fine-tuned model", "a distilled student" or "a pretrained model", with the files that say so."""
    kind = KINDS[model_folder_kind(folder) or "pretrained"]
    return f"{kind} ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})"


def model_folder_kind(folder):
    """What kind of model `folder` holds, named by the files that mark it (the
    one place that tells them apart, for every message that names a folder's
    kind): "student" (distill.py's BiLSTM: student.json), "fine-tuned"
    (finetune.py's encoder plus task head: task.json), "pretrained" (weights,
    or a config beside a tokenizer's files, with neither record), or None
    (not a model folder). A record decides before the weights do: a
    fine-tuned folder holds config.json and model.safetensors too."""
    files = model_files(folder)
    if not files:
        return None
    return next((RECORDS[name] for name in RECORDS if name in files), "pretrained")


def describe_model_folder(folder):
    """A model folder's kind in words, for a message that must say what the
    user gave: "a distilled student (distill.py's BiLSTM, student.json)",
    "a fine-tuned sst2 model (finetune.py's, task.json)", "a pretrained
    model" or "not a model folder". A fine-tuned folder's task is read from
    its task.json, as far as that file can be read (the message is about
    the folder's kind, not about a damaged record)."""
    kind = model_folder_kind(folder)
    if kind == "student":
        return "a distilled student (distill.py's BiLSTM, student.json)"
    if kind == "fine-tuned":
        try:
            task = read_json_object(Path(folder) / "task.json").get("task")
        except MiniBertError:
            task = None
        task = f"{task} " if isinstance(task, str) and task.isprintable() and len(task) <= 40 else ""
        return f"a fine-tuned {task}model (finetune.py's, task.json)"
    return "a pretrained model" if kind == "pretrained" else "not a model folder"


def check_pretrained_source(folder):
    """Duplication copies an encoder with its pretraining heads. A fine-tuned
    folder (finetune.py's, with task.json) has a task head that the copy
    would drop, together with task.json: refused, rather than writing a
    model that is neither the fine-tuned one nor its base."""
    if folder is not None and model_folder_kind(folder) == "fine-tuned":
        raise MiniBertError(f"--model {folder}: {describe_model_folder(folder)}; duplicating it would drop its "
                            f"task head and task.json. Give the pretrained model it was fine-tuned from, then "
                            f"fine-tune the deeper one")


def enclosing_model_folder(path):
    """The nearest folder above `path` that is a model folder, or None."""
    for parent in Path(path).resolve().parents:
        if model_files(parent):
            return parent
    return None


# ----------------------------------------------------------------------------
# The guards safe_run applies, each one line naming the flag and the path
# ----------------------------------------------------------------------------

# The minibert package's folder (this file is minibert/support/outputs.py).
PACKAGE = Path(__file__).resolve().parent.parent


def _check_outside_package(flag, output):
    """`output` is not the minibert package's folder, nor inside it (its
    bundled model, minibert/pretrained, is what every script falls back on),
    nor a folder holding it: --force does not allow any of these."""
    package = PACKAGE
    target = Path(output).resolve()
    where = ("is" if target == package else "lies inside" if package in target.parents
             else "holds" if target in package.parents else None)
    if where is not None:
        raise MiniBertError(f"{flag} {output}: {where} the minibert package ({package}), whose files and bundled "
                            f"model no run replaces; choose a place outside it (--force does not allow this)")


def _check_apart_from_inputs(flag, output, inputs, owned=None, filled=()):
    """`output` is none of the paths the run reads, lies inside none of
    them and holds none of them (a folder written as one unit would drop or
    replace what it held), and lies nowhere in the package. inputs: {flag:
    path, a list of paths, or None}; paths that do not exist (a hub name,
    the bundled model) are skipped. owned: {flag: folder} the run itself
    writes (its --output), checked even before they exist. filled: the
    flags of inputs the run also writes (a cache it fills), which may lie
    inside `output`."""
    _check_outside_package(flag, output)
    target = Path(output).resolve()
    for input_flag, path in (owned or {}).items():
        if path is not None and (target == Path(path).resolve() or Path(path).resolve() in target.parents):
            raise MiniBertError(f"{flag} {output}: lies inside the {input_flag} folder {path} this run writes; "
                                f"choose a place apart from it")
    listed = [(f, p) for f, paths in inputs.items() for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
    for input_flag, path in listed:
        if path is None or not Path(path).exists():
            continue
        source = Path(path).resolve()
        if target == source:
            raise MiniBertError(f"{flag} {output}: is the {input_flag} {path} this run reads; choose another "
                                f"{'folder' if source.is_dir() else 'file'}")
        if source.is_dir() and source in target.parents:
            raise MiniBertError(f"{flag} {output}: lies inside the {input_flag} folder {path} this run reads; "
                                f"choose a place apart from it")
        if target in source.parents and input_flag not in filled:
            raise MiniBertError(f"{flag} {output}: holds the {input_flag} {path} this run reads; choose a folder "
                                f"apart from it (--force does not allow this)")


def _check_not_in_model_folder(flag, output):
    """`output` lies inside no model folder."""
    holder = enclosing_model_folder(output)
    if holder is not None:
        raise MiniBertError(f"{flag} {output}: lies inside the model folder {holder}, which holds "
                            f"{describe(holder, model_files(holder))}; choose a place outside it")


def _check_folder_place(output, inputs, flag="--output", source=None, filled=()):
    """Where the model folder a run writes may be: not a file; outside the
    package; never the folder of the model a copy is made of (`source`: a
    folder or a file in one), one inside it or one holding it, even with
    --force (that would overwrite the model or nest one model folder in the
    other); apart from the inputs; inside no model folder."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise MiniBertError(f"{flag} {output}: exists and is not a folder")
    _check_outside_package(flag, output)
    if source is not None and Path(source).exists():
        source_dir = Path(source).resolve()
        source_dir = source_dir if source_dir.is_dir() else source_dir.parent
        target = output.resolve()
        where = ("is" if target == source_dir else "is inside" if source_dir in target.parents
                 else "holds" if target in source_dir.parents else None)
        if where is not None:
            raise MiniBertError(f"{flag} {output}: {where} the folder of the model being copied ({source_dir}); "
                                f"choose a folder apart from it (--force does not allow this)")
    _check_apart_from_inputs(flag, output, inputs, filled=filled)
    _check_not_in_model_folder(flag, output)


def _check_cache_folder(flag, folder, inputs, output=None):
    """A folder a run keeps a cache in (train_mlm.py's token cache, distill.py's
    teacher logits): not a path the run reads nor inside one, and no model
    folder nor inside one (the cache would add its files to that model's),
    unless it lies inside the run's own `output`."""
    _check_apart_from_inputs(flag, folder, inputs)
    if output is not None and Path(folder).resolve().is_relative_to(Path(output).resolve()):
        return
    files = model_files(folder)
    if files:
        raise MiniBertError(f"{flag} {folder}: holds {describe(folder, files)}; keep the cache in a folder "
                            f"of its own")
    _check_not_in_model_folder(flag, folder)


def _check_folder_contents(output, force=False, resume=None, keep=(), flag="--output"):
    """What a model folder written whole (duplicate.py, train_mlm.py) may
    already hold: nothing, or anything with force (--force). A run that can
    resume (resume not None) may find its checkpoint there only with resume.
    The names in `keep` (a token cache) and the temporary files of an
    unfinished write do not count as contents."""
    output = Path(output)
    if force or not output.is_dir():
        return
    if resume is not None and (output / CHECKPOINT).is_file():
        if resume:
            return
        raise MiniBertError(f"{flag} {output}: holds the checkpoint of an earlier run; pass --resume to continue "
                            f"it, or --force to start over in this folder")
    others = sorted(p.name for p in output.iterdir() if p.name not in keep and not LEFTOVER.fullmatch(p.name))
    if others and resume is None:
        raise MiniBertError(f"{flag} {output}: folder exists and is not empty; pass --force to write into it")
    if others:
        raise MiniBertError(f"{flag} {output}: folder is not empty ({', '.join(others[:3])}"
                            f"{', ...' if len(others) > 3 else ''}) and holds no checkpoint to --resume; "
                            f"choose a new folder, or pass --force to write into it")


def check_output_folder(output, force=False, *, flag="--output", source=None, resume=None, keep=()):
    """The folder a model is written into, checked where it is written
    (commands/duplicate.write_model, which bench/ calls without a script) as
    safe_run checks it: its place, then its contents. Returns it as a Path."""
    _check_folder_place(output, {}, flag, source)
    _check_folder_contents(output, force, resume, keep, flag)
    return Path(output)


def _check_training_contents(output, record_file, resume=False, flag="--output"):
    """What the folder a training run writes its model into (finetune.py:
    record_file "task.json"; distill.py: "student.json") may already hold:
    no model, or this kind of run's own files (its record, its checkpoint)
    only with --resume."""
    output = Path(output)
    files = model_files(output)
    others = [name for name in RECORDS if name != record_file and name in files]
    own = record_file in files or (output / CHECKPOINT).is_file()
    if others or (files and record_file not in files):
        raise MiniBertError(f"{flag} {output}: holds {describe(output, files)}; a run never writes over a model: "
                            f"choose another folder")
    if own and not resume:
        what = (f"already holds {KINDS[RECORDS[record_file]]}" if record_file in files
                else f"holds the {CHECKPOINT} of an earlier run")
        raise MiniBertError(f"{flag} {output}: {what}; choose another folder (or --resume to continue its run)")


def _check_output_file(output, inputs, flag="--output", owned=None):
    """A file a run writes (predictions, --json, --plot): a regular file or
    a new name (never a link, FIFO or device, which the rename would
    replace), not a file it reads, nor inside one of its input folders, the
    folders it writes (owned) or any model folder."""
    output = Path(output)
    try:
        refuse_special(output)
    except MiniBertError as e:
        raise MiniBertError(f"{flag} {e}") from None
    _check_apart_from_inputs(flag, output, inputs, owned)
    _check_not_in_model_folder(flag, output)
    if flag == "--plot":
        from minibert.support.plots import check_plot_format
        check_plot_format(output)


def _check_distinct_outputs(outputs):
    """The files one run writes ({flag: path, or None where not given}) are
    distinct: two flags naming one file would leave only the last one written."""
    seen = {}
    for flag, path in outputs.items():
        if not path:
            continue
        key = Path(path).resolve()
        if key in seen:
            raise MiniBertError(f"{flag} {path}: is also the {seen[key]} this run writes; give each its own file")
        seen[key] = flag


def file_identity(path):
    """A data file as a resumed run compares it: its path, size and SHA-256
    (a file edited in place keeps its path). None for no file. A pipe is
    named as the user gave it and hashed through its copy (files.read_once).
    A folder (train_mlm.py's prepared token cache) is its files: their
    names, sizes and hashes."""
    if path is None:
        return None
    real = Path(copy_for(path))
    if real.is_dir():
        files = sorted(p for p in real.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        digest = fingerprint([[str(p.relative_to(real)), file_sha256(p)] for p in files])
        return f"{as_given(str(path))} (a folder of {len(files)} files, {size} bytes, sha256 {digest[:16]})"
    return f"{as_given(str(path))} ({real.stat().st_size} bytes, sha256 {file_sha256(real)[:16]})"


def _resume_from_checkpoint(output):
    """--resume with a checkpoint to continue. A run killed before its first
    checkpoint has none (its folder may already hold the first best epoch),
    nor has a finished run, which removes it (unless --keep-checkpoint): it
    starts again from step 0, and says so."""
    if (Path(output) / CHECKPOINT).is_file():
        return True
    if not is_main_process():           # torchrun starts several processes: one line is enough
        return False
    print(f"--resume: {output} holds no {CHECKPOINT} (the run stopped before its first one, or finished and "
          f"removed it); starting from step 0")
    return False


# ----------------------------------------------------------------------------
# One run per output folder
# ----------------------------------------------------------------------------

HELD_LOCKS = []     # (path, lock) of the locks this process holds; cli.run releases them when main returns


def _lock(folder, flag):
    """Hold an exclusive lock on `folder` for the rest of the run, so that a
    second run started on the same folder stops at once with one line,
    instead of both writing it. The lock is a sibling file `.FOLDER.lock`
    (the folder itself is replaced by write_folder, so it cannot carry it)
    holding the PID, locked through `filelock` (installed with
    huggingface_hub): an flock on Linux and macOS, a byte lock (msvcrt) on
    Windows. On every platform the operating system releases it when the run
    dies, however it dies, and a lock file left by a dead run is taken over
    by the next. On Windows the holder's PID cannot be read while it holds
    the file, and the message says "unknown". While the lock is held, SIGTERM stops the run as Ctrl-C does (a
    Terminated, a KeyboardInterrupt), so that write_folder puts the old folder
    back. Returns the lock, (path, FileLock)."""
    from filelock import FileLock, Timeout
    folder = Path(folder).resolve()      # one lock for one folder, however it is named (a link to it, ..)
    folder.parent.mkdir(parents=True, exist_ok=True)
    path = folder.parent / f".{folder.name}.lock"

    def write_pid(fd):                   # filelock calls this once the lock is ours, before anyone reads it
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:                  # a full disk: no empty lock file left behind (we hold it: no one uses it)
            path.unlink(missing_ok=True)
            raise

    lock = FileLock(path, timeout=0, on_acquired=write_pid, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        try:
            holder = path.read_text(encoding="ascii", errors="replace").strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise MiniBertError(f"{flag} {folder}: another run (PID {holder}) is writing this folder; wait for it "
                            f"to end, or choose another folder") from None
    except OSError as e:
        hint = "free some space there, or choose another folder" if e.errno in DISK_FULL else "choose another folder"
        raise MiniBertError(f"{flag} {folder}: cannot write its lock file {path} ({e.strerror}); {hint}") from None
    HELD_LOCKS.append((path, lock))
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    return path, lock


def _terminate(signum, frame):
    raise Terminated()


def _release(lock):
    """Remove, then unlock, one lock (removing first, so that no other run
    can lock a file that is about to disappear)."""
    path, file_lock = lock
    try:
        os.unlink(path)
    except OSError:                      # Windows: a locked file cannot be removed; filelock removes it on release
        pass
    file_lock.release()
    if not HELD_LOCKS and signal.getsignal(signal.SIGTERM) is _terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def release_locks():
    """Release every lock this process holds (cli.run and cli.script_main, as main returns)."""
    while HELD_LOCKS:
        _release(HELD_LOCKS.pop())


# ==============================================================================
# Folder I/O for what fine-tuning and distillation write: a model folder
# written as one unit, and a small JSON record in it (the weights beside it
# are checkpoints/safetensors.py's save_weights).
#
# A model folder is written as one unit (write_folder): every file goes into a
# hidden sibling folder, which is then renamed into place, so a killed run
# leaves either the old model or the new one, never one file of each.
# What a kill leaves behind is recognisable by its name and put right by the
# next run (recover_folder). Every single file is also written atomically (a
# temporary file renamed into place). Reading checks before it trusts: a
# missing file or a missing field ends in one MiniBertError line naming the
# file.
# ==============================================================================


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
