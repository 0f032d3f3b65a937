"""Support for the scripts' --output: a run never writes over a model or the
data it reads.

duplicate.py writes a model folder that must be new or empty unless --force
(check_output_folder, which also knows a resumable run's checkpoint: the
guard for train_mlm.py's folder too). finetune.py and distill.py write
a model folder (training) or a predictions file. Before any slow work they
check that this place

  - is not a file or folder the run reads (--model, --teacher, --train, --eval,
    --predict, ...), nor lies inside one of them, nor holds one (a folder
    written over, --force included, would replace or remove it);
  - lies nowhere in the minibert package, whose bundled model every script
    falls back on;
  - is not a model folder of any kind (pretrained, fine-tuned, student), nor
    lies inside one: writing there would replace the model's files;
  - unless it is this same run's own folder and --resume continues it.

A model folder is recognised by its files (MODEL_FILES), not by its name.
"""

import os
from pathlib import Path

from minibert.support.errors import MiniBertError
from minibert.support.fileio import file_sha256, refuse_special

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
RECORDS = {"task.json": "a fine-tuned model", "student.json": "a distilled student"}


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
    kind = next((RECORDS[name] for name in RECORDS if name in files), "a pretrained model")
    return f"{kind} ({', '.join(files[:3])}{', ...' if len(files) > 3 else ''})"


def enclosing_model_folder(path):
    """The nearest folder above `path` that is a model folder, or None."""
    for parent in Path(path).resolve().parents:
        if model_files(parent):
            return parent
    return None


# The minibert package's folder (this file is minibert/support/outputs.py).
PACKAGE = Path(__file__).resolve().parent.parent
# Inputs a run also writes (a cache it fills): they may lie inside its output folder.
WRITTEN_INPUTS = ("--cache-dir",)


def check_outside_package(flag, output):
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


def check_apart_from_inputs(flag, output, inputs, owned=None):
    """`output` is none of the paths the run reads, lies inside none of
    them and holds none of them (a folder written as one unit would drop or
    replace what it held), and lies nowhere in the package. inputs: {flag:
    path, a list of paths, or None}; paths that do not exist (a hub name,
    the bundled model) are skipped. owned: {flag: folder} the run itself
    writes (its --output), checked even before they exist."""
    check_outside_package(flag, output)
    target = Path(output).resolve()
    for input_flag, path in (owned or {}).items():
        if path is not None and (target == Path(path).resolve() or Path(path).resolve() in target.parents):
            raise MiniBertError(f"{flag} {output}: lies inside the {input_flag} folder {path} this run writes "
                                f"its model into; choose a place apart from it")
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
        if target in source.parents and input_flag not in WRITTEN_INPUTS:
            raise MiniBertError(f"{flag} {output}: holds the {input_flag} {path} this run reads; choose a folder "
                                f"apart from it (--force does not allow this)")


def check_not_in_model_folder(flag, output):
    """`output` lies inside no model folder."""
    holder = enclosing_model_folder(output)
    if holder is not None:
        raise MiniBertError(f"{flag} {output}: lies inside the model folder {holder}, which holds "
                            f"{describe(holder, model_files(holder))}; choose a place outside it")


def check_cache_folder(flag, folder, inputs, output=None):
    """A folder a run keeps a cache in (train_mlm.py's token cache, distill.py's
    teacher logits): not a path the run reads nor inside one, and no model
    folder nor inside one (the cache would add its files to that model's),
    unless it lies inside the run's own `output`."""
    if folder is None:
        return
    check_apart_from_inputs(flag, folder, inputs)
    if output is not None and Path(folder).resolve().is_relative_to(Path(output).resolve()):
        return
    files = model_files(folder)
    if files:
        raise MiniBertError(f"{flag} {folder}: holds {describe(folder, files)}; keep the cache in a folder "
                            f"of its own")
    check_not_in_model_folder(flag, folder)


def check_output_folder(output, force=False, *, flag="--output", source=None, resume=None, ignore=None):
    """The folder a run writes a model into (duplicate.py; train_mlm.py's too): it
    must be missing or empty, or force (--force) allows any folder. Never the
    folder of the model the run copies (`source`: a folder or a file in one),
    one inside it or one holding it, even with force: writing there would
    overwrite that model or nest one model folder in the other.

    resume: None for a run that cannot resume; True or False for one that can,
    whose folder may then hold its checkpoint only with resume. ignore(name):
    True for the names that do not count as contents (a token cache, the
    temporary files of an unfinished write). Returns the output as a Path."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise MiniBertError(f"{flag} {output}: exists and is not a folder")
    check_outside_package(flag, output)
    if source is not None and Path(source).exists():
        source_dir = Path(source).resolve()
        source_dir = source_dir if source_dir.is_dir() else source_dir.parent
        target = output.resolve()
        where = ("is" if target == source_dir else "is inside" if source_dir in target.parents
                 else "holds" if target in source_dir.parents else None)
        if where is not None:
            raise MiniBertError(f"{flag} {output}: {where} the folder of the model being copied ({source_dir}); "
                                f"choose a folder apart from it (--force does not allow this)")
    if force or not output.is_dir():
        return output
    if resume is not None and (output / CHECKPOINT).is_file():
        if resume:
            return output
        raise MiniBertError(f"{flag} {output}: holds the checkpoint of an earlier run; pass --resume to continue "
                            f"it, or --force to start over in this folder")
    others = sorted(p.name for p in output.iterdir() if ignore is None or not ignore(p.name))
    if others and resume is None:
        raise MiniBertError(f"{flag} {output}: folder exists and is not empty; pass --force to write into it")
    if others:
        raise MiniBertError(f"{flag} {output}: folder is not empty ({', '.join(others[:3])}"
                            f"{', ...' if len(others) > 3 else ''}) and holds no checkpoint to --resume; "
                            f"choose a new folder, or pass --force to write into it")
    return output


def check_training_output(output, record_file, inputs, resume=False, flag="--output"):
    """The folder a training run writes its model into (finetune.py: record_file
    "task.json"; distill.py: "student.json"). It may be missing or hold no
    model; it may hold this kind of run's own files (its record, its
    checkpoint) only with --resume. Returns the output as a Path."""
    output = Path(output)
    check_apart_from_inputs(flag, output, inputs)
    check_not_in_model_folder(flag, output)
    files = model_files(output)
    others = [name for name in RECORDS if name != record_file and name in files]
    own = record_file in files or (output / CHECKPOINT).is_file()
    if others or (files and record_file not in files):
        raise MiniBertError(f"{flag} {output}: holds {describe(output, files)}; a run never writes over a model: "
                            f"choose another folder")
    if own and not resume:
        what = (f"already holds {RECORDS[record_file]}" if record_file in files
                else f"holds the {CHECKPOINT} of an earlier run")
        raise MiniBertError(f"{flag} {output}: {what}; choose another folder (or --resume to continue its run)")
    return output


def check_output_file(output, inputs, flag="--output", owned=None):
    """A file a run writes (predictions, --json, --plot): a regular file or
    a new name (never a link, FIFO or device, which the rename would
    replace), not a file it reads, nor inside one of its input folders, the
    folders it writes (owned) or any model folder. Returns it as a Path."""
    output = Path(output)
    try:
        refuse_special(output)
    except MiniBertError as e:
        raise MiniBertError(f"{flag} {e}") from None
    check_apart_from_inputs(flag, output, inputs, owned)
    check_not_in_model_folder(flag, output)
    if flag == "--plot":
        from minibert.support.plots import check_plot_format
        check_plot_format(output)
    return output


def check_output_files(args, inputs, owned=None, flags=("--json", "--plot")):
    """check_output_file for each of these flags the command line gave, and
    no two of them one file."""
    given = {flag: getattr(args, flag.lstrip("-").replace("-", "_"), None) for flag in flags}
    for flag, value in given.items():
        if value:
            check_output_file(value, inputs, flag, owned)
    check_distinct_outputs(given)


def check_distinct_outputs(outputs):
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
    named as the user gave it and hashed through its copy (inputs.read_once).
    A folder (train_mlm.py's prepared token cache) is its files: their
    names, sizes and hashes."""
    from minibert.support.inputs import as_given, copy_for
    if path is None:
        return None
    real = Path(copy_for(path))
    if real.is_dir():
        from minibert.support.fingerprints import fingerprint
        files = sorted(p for p in real.rglob("*") if p.is_file())
        size = sum(p.stat().st_size for p in files)
        digest = fingerprint([[str(p.relative_to(real)), file_sha256(p)] for p in files])
        return f"{as_given(str(path))} (a folder of {len(files)} files, {size} bytes, sha256 {digest[:16]})"
    return f"{as_given(str(path))} ({real.stat().st_size} bytes, sha256 {file_sha256(real)[:16]})"


def resume_from_checkpoint(output):
    """--resume with a checkpoint to continue. A run killed before its first
    checkpoint has none (its folder may already hold the first best epoch),
    nor has a finished run, which removes it (unless --keep-checkpoint): it
    starts again from step 0, and says so."""
    if (Path(output) / CHECKPOINT).is_file():
        return True
    if os.environ.get("RANK", "0") != "0":      # torchrun starts several processes: one line is enough
        return False
    print(f"--resume: {output} holds no {CHECKPOINT} (the run stopped before its first one, or finished and "
          f"removed it); starting from step 0")
    return False
