"""Folder I/O for what fine-tuning and distillation write: a module's weights
as safetensors and a small JSON record beside them.

Every file is written atomically (a temporary file renamed into place), so a
killed run never leaves half a file; a record is written last, so a folder
with its record is complete. Reading checks before it trusts: a missing
file, a missing field or weights that do not fit end in one MiniBertError
line naming the file.
"""

from pathlib import Path

from minibert.checkpoints.safetensors import load_safetensors, save_safetensors
from minibert.support.errors import MiniBertError
from minibert.support.fileio import read_json_object, write_json


def save_weights(module, path):
    """module.state_dict() -> a safetensors file (cpu, contiguous), atomically."""
    save_safetensors({name: tensor.detach().cpu().contiguous() for name, tensor in module.state_dict().items()},
                     path, metadata={"format": "pt"})


def load_weights(module, path, what):
    """Fill `module` from a safetensors file written by save_weights. A missing
    or extra key, or a shape that differs, is a MiniBertError naming the file
    and `what` the module is (e.g. "the sst2 head with 2 labels")."""
    weights = load_safetensors(path)
    try:
        module.load_state_dict(weights)
    except RuntimeError as e:
        lines = [line.strip() for line in str(e).splitlines()]   # torch: a title, then one line per problem
        raise MiniBertError(f"{path}: does not fit {what} ({lines[1] if len(lines) > 1 else lines[0]})") from None
    return module


def write_record(folder, filename, record):
    """The JSON record `folder/filename`, written atomically."""
    write_json(Path(folder) / filename, record)


def read_record(folder, filename, required=(), missing_hint=""):
    """The JSON object of `folder/filename`. A missing file is a MiniBertError
    ("not a ... folder" is what `missing_hint` adds), and so is a missing
    `required` field."""
    path = Path(folder) / filename
    if not path.is_file():
        raise MiniBertError(f"{folder}: no {filename}" + (f" ({missing_hint})" if missing_hint else ""))
    record = read_json_object(path)
    for key in required:
        if key not in record:
            raise MiniBertError(f"{path}: field '{key}' is missing")
    return record
