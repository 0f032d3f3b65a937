"""Read and write `.safetensors` files, and read PyTorch `.bin` state dicts.

The safetensors format (https://github.com/huggingface/safetensors) is simple
enough to implement in a page, which is why minibert does so instead of
depending on the `safetensors` package (the tests use that package as an
oracle). A file is three parts:

    bytes 0..8        N, the header length, an unsigned 64-bit little-endian int
    bytes 8..8+N      a UTF-8 JSON object (the header), maybe right-padded with spaces
    bytes 8+N..end    the data section: every tensor's raw bytes, back to back

The header maps each tensor name to

    {"dtype": "F32", "shape": [768, 3072], "data_offsets": [BEGIN, END]}

where BEGIN and END (exclusive) count bytes from the start of the data
section, plus an optional "__metadata__" entry holding a string->string map.
Tensors are stored C-contiguous (row-major), little-endian.

The reader trusts nothing: the ranges must tile the data section exactly -
no overlaps, no gaps, nothing left over - and each range must be exactly as
long as the shape and dtype say. Anything else raises MiniBertError naming
the file and the tensor.

The writer produces the same bytes as the reference writer: tensors sorted by
dtype (widest alignment first, in the reference library's dtype order), then
by name; compact JSON; the header padded with spaces to a multiple of 8 bytes
so that every tensor in the data section starts 8-byte aligned.

Tied weights (e.g. BERT's MLM decoder sharing the word embeddings) cannot be
stored twice: the writer refuses two names that share memory, and the caller
keeps one name and re-ties after loading.

minibert assumes a little-endian machine (x86, ARM) when writing.

save_weights and load_weights store one module's state_dict this way (a
distilled student's weights), with one-line errors for weights that do not fit.
"""

import json
import mmap
import os
import re
import zipfile
from pathlib import Path

import numpy as np
import torch

from minibert.support import MiniBertError
from minibert.support.files import atomic_write
from minibert.support.runtime import check_can_allocate

MAX_HEADER_BYTES = 100_000_000  # the reference reader's limit
METADATA_KEY = "__metadata__"

# dtype name in the header -> (torch dtype, how the bytes are stored as numpy sees them).
# numpy has no bfloat16 or float8: those are read as raw unsigned integers of the
# same width and reinterpreted ("viewed") as the torch dtype, bit for bit.
DTYPES = {
    "BOOL": (torch.bool, "u1"),
    "U8": (torch.uint8, "u1"),
    "I8": (torch.int8, "i1"),
    "F8_E5M2": (torch.float8_e5m2, "u1"),
    "F8_E4M3": (torch.float8_e4m3fn, "u1"),
    "I16": (torch.int16, "<i2"),
    "U16": (torch.uint16, "<u2"),
    "F16": (torch.float16, "<f2"),
    "BF16": (torch.bfloat16, "<u2"),
    "I32": (torch.int32, "<i4"),
    "U32": (torch.uint32, "<u4"),
    "F32": (torch.float32, "<f4"),
    "F64": (torch.float64, "<f8"),
    "I64": (torch.int64, "<i8"),
    "U64": (torch.uint64, "<u8"),
}
DTYPE_NAMES = {torch_dtype: name for name, (torch_dtype, _) in DTYPES.items()}

# The reference writer sorts tensors by its dtype enum, largest first. The enum
# lists dtypes by increasing alignment; this is its order (restricted to the
# dtypes above). Note it is not purely by size: F64 < I64 < U64.
WRITE_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
               "I32", "U32", "F32", "F64", "I64", "U64"]
WRITE_RANK = {name: rank for rank, name in enumerate(WRITE_ORDER)}


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------

def json_object_without_duplicates(path):
    """An `object_pairs_hook` for json.loads that refuses repeated keys.

    Plain json.loads keeps the last of two equal keys silently; a header with
    the same tensor name twice is corrupt, so we say so.
    """
    def build(pairs):
        obj = {}
        for key, value in pairs:
            if key in obj:
                raise MiniBertError(f"{path}: header has the key {key!r} twice")
            obj[key] = value
        return obj
    return build


def is_count(value):
    """A JSON integer >= 0 (`True` is an int in Python, but not a count)."""
    return type(value) is int and value >= 0


def parse_tensor_entry(path, name, entry, data_size):
    """Check one header entry; return (dtype_name, shape, begin, end)."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise MiniBertError(f"{where}: expected an object with dtype, shape, data_offsets")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            raise MiniBertError(f"{where}: missing field {field!r}")

    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise MiniBertError(f"{where}: unsupported dtype {dtype!r} "
                            f"(expected one of {', '.join(DTYPES)})")

    shape = entry["shape"]
    if not (isinstance(shape, list) and all(is_count(d) for d in shape)):
        raise MiniBertError(f"{where}: shape must be a list of integers >= 0, got {shape!r}")

    offsets = entry["data_offsets"]
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_count(o) for o in offsets)):
        raise MiniBertError(f"{where}: data_offsets must be [BEGIN, END] "
                            f"with integers >= 0, got {offsets!r}")
    begin, end = offsets
    if begin > end:
        raise MiniBertError(f"{where}: data_offsets [{begin}, {end}] end before they begin")
    if end > data_size:
        raise MiniBertError(f"{where}: data_offsets [{begin}, {end}] run past the end of "
                            f"the data section ({data_size} bytes)")

    numel = 1
    for d in shape:
        numel *= d
    span = 1  # like numel but skipping zeros: torch must be able to index it
    for d in shape:
        span *= max(d, 1)
    if span >= 2**63:
        raise MiniBertError(f"{where}: shape {shape} is too large")
    itemsize = np.dtype(DTYPES[dtype][1]).itemsize
    if end - begin != numel * itemsize:
        raise MiniBertError(f"{where}: shape {shape} of {dtype} needs {numel * itemsize} bytes "
                            f"but data_offsets [{begin}, {end}] hold {end - begin}")
    return dtype, shape, begin, end


def read_header(f, path):
    """Read and validate the header of an open safetensors file.

    Returns (metadata, entries, data_start) where entries is a list of
    (name, dtype_name, shape, begin, end) in header order and data_start is
    the file offset of the data section (8 + N).
    """
    file_size = os.fstat(f.fileno()).st_size
    if file_size < 8:
        raise MiniBertError(f"{path}: too short for a safetensors file "
                            f"({file_size} bytes, the header length alone takes 8)")
    n = int.from_bytes(f.read(8), "little")
    if n > MAX_HEADER_BYTES:
        raise MiniBertError(f"{path}: header length {n} is over the "
                            f"{MAX_HEADER_BYTES}-byte limit (not a safetensors file?)")
    if 8 + n > file_size:
        raise MiniBertError(f"{path}: header length {n} runs past the end of the "
                            f"file ({file_size} bytes); truncated?")
    raw = f.read(n)
    if not raw.startswith(b"{"):
        raise MiniBertError(f"{path}: header must be a JSON object starting with '{{'")
    try:
        header = json.loads(raw.decode("utf-8"),
                            object_pairs_hook=json_object_without_duplicates(path))
    except UnicodeDecodeError as e:
        raise MiniBertError(f"{path}: header is not valid UTF-8 ({e.reason} "
                            f"at byte {8 + e.start})") from None
    except json.JSONDecodeError as e:
        raise MiniBertError(f"{path}: header is not valid JSON ({e.msg} "
                            f"at byte {8 + e.pos})") from None
    except ValueError:  # the one other ValueError json raises: Python's integer-digit limit
        raise MiniBertError(f"{path}: header holds an integer with more digits than Python "
                            f"converts; no shape or offset needs that many") from None
    except RecursionError:
        raise MiniBertError(f"{path}: header JSON is nested too deeply") from None
    if not isinstance(header, dict):
        raise MiniBertError(f"{path}: header must be a JSON object")

    metadata = header.pop(METADATA_KEY, None)
    if metadata is None:
        metadata = {}
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise MiniBertError(f"{path}: {METADATA_KEY} must map strings to strings")

    data_start = 8 + n
    data_size = file_size - data_start
    entries = [(name, *parse_tensor_entry(path, name, entry, data_size))
               for name, entry in header.items()]

    # The ranges, sorted, must tile [0, data_size) exactly.
    expected_begin = 0
    previous = None
    for name, _, _, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin < expected_begin:
            raise MiniBertError(f"{path}: tensor {name!r} at bytes [{begin}, {end}] "
                                f"overlaps tensor {previous!r}")
        if begin > expected_begin:
            raise MiniBertError(f"{path}: {begin - expected_begin} unindexed bytes (a hole) "
                                f"before tensor {name!r} at data offset {expected_begin}")
        expected_begin = end
        previous = name
    if expected_begin != data_size:
        raise MiniBertError(f"{path}: data section is {data_size} bytes but the tensors "
                            f"index only {expected_begin} (trailing bytes)")
    return metadata, entries, data_start


def open_for_reading(path):
    try:
        return open(path, "rb")
    except OSError as e:
        raise MiniBertError(f"{path}: cannot open ({e.strerror})") from None


def read_safetensors_metadata(path):
    """The `__metadata__` map of a safetensors file ({} if there is none)."""
    with open_for_reading(path) as f:
        metadata, _, _ = read_header(f, path)
    return metadata


def load_safetensors(path, names=None):
    """Read every tensor of a .safetensors file into a dict {name: torch.Tensor},
    or only those among `names` (a fine-tuned folder's head, say).

    Tensors come back on the CPU in the stored dtype (a bf16 file gives bf16
    tensors; the caller upcasts), writable, in the header's order.
    """
    with open_for_reading(path) as f:
        _, entries, data_start = read_header(f, path)
        if names is not None:
            wanted = set(names)
            entries = [entry for entry in entries if entry[0] in wanted]
        # What the header declares, before any of it is allocated: the file mapped, a copy of each
        # tensor, and the float32 model they fill.
        stored = sum(end - begin for _, _, _, begin, end in entries)
        float32 = sum(4 * int(np.prod(shape, dtype=np.int64)) for _, _, shape, _, _ in entries)
        check_can_allocate(str(path), os.fstat(f.fileno()).st_size + stored + float32, stored + float32)
        tensors = {}
        # The memory map lets numpy look at the file's bytes without reading
        # the whole file into one Python bytes object first.
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for name, dtype, shape, begin, end in entries:
                torch_dtype, stored_as = DTYPES[dtype]
                count = (end - begin) // np.dtype(stored_as).itemsize
                if count == 0:
                    tensors[name] = torch.empty(shape, dtype=torch_dtype)
                    continue
                view = np.frombuffer(mm, dtype=stored_as, count=count, offset=data_start + begin)
                # astype copies into native byte order: the copy is writable
                # and no longer points into the memory map (which we close).
                array = view.astype(view.dtype.newbyteorder("="))
                del view
                tensor = torch.from_numpy(array)
                if dtype == "BOOL":
                    tensor = tensor != 0  # any non-zero byte is True
                elif tensor.dtype != torch_dtype:
                    tensor = tensor.view(torch_dtype)  # same bits: uint16 -> bfloat16 etc.
                tensors[name] = tensor.reshape(shape)
    return tensors


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------

def save_safetensors(tensors, path, metadata=None):
    """Write {name: tensor} to `path` as safetensors, atomically.

    `metadata` is an optional {str: str} map stored as "__metadata__"
    (Hugging Face writes {"format": "pt"}). Tensors may live on any device
    and need not be contiguous; their bytes are written as they are, in
    their own dtype.
    """
    path = Path(path)
    if metadata is not None and not (
            isinstance(metadata, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise MiniBertError(f"{path}: metadata must be a dict of strings to strings")

    items = []
    owner_of_memory = {}  # (device, storage address) -> first tensor name using it
    for name, tensor in tensors.items():
        if not isinstance(name, str) or name == METADATA_KEY:
            raise MiniBertError(f"{path}: tensor names must be strings other than "
                                f"{METADATA_KEY!r}, got {name!r}")
        if not isinstance(tensor, torch.Tensor):
            raise MiniBertError(f"{path}: {name!r} is a {type(tensor).__name__}, not a tensor")
        if tensor.dtype not in DTYPE_NAMES:
            raise MiniBertError(f"{path}: tensor {name!r} has dtype {tensor.dtype}, which "
                                f"minibert does not write to safetensors")
        if tensor.numel() > 0:
            memory = (tensor.device, tensor.untyped_storage().data_ptr())
            if memory in owner_of_memory:
                raise MiniBertError(
                    f"{path}: tensors {owner_of_memory[memory]!r} and {name!r} share memory "
                    f"(tied weights?); safetensors stores each tensor once, so keep one "
                    f"name and drop the other before saving")
            owner_of_memory[memory] = name
        items.append((name, DTYPE_NAMES[tensor.dtype], tensor))

    items.sort(key=lambda item: (-WRITE_RANK[item[1]], item[0]))

    header = {}
    if metadata is not None:
        header[METADATA_KEY] = dict(metadata)
    offset = 0
    for name, dtype, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": dtype, "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header_bytes = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)  # pad so the data starts 8-aligned

    with atomic_write(path) as f:
        f.write(len(header_bytes).to_bytes(8, "little"))
        f.write(header_bytes)
        for _, _, tensor in items:
            f.write(tensor_bytes(tensor))


def tensor_bytes(tensor):
    """The tensor's elements as raw bytes (C order, this machine's byte order)."""
    tensor = tensor.detach().to("cpu").contiguous()
    # Reinterpreting as bytes works for every dtype, including bfloat16 and
    # bool, which numpy cannot represent or stores differently.
    return tensor.reshape(-1).view(torch.uint8).numpy()


# ---------------------------------------------------------------------------
# A module's weights: its state_dict as one file
# ---------------------------------------------------------------------------

def save_weights(module, path):
    """module.state_dict() -> a safetensors file (cpu, contiguous), atomically."""
    save_safetensors({name: tensor.detach().cpu().contiguous() for name, tensor in module.state_dict().items()},
                     path, metadata={"format": "pt"})


def load_weights(module, path, what):
    """Fill `module` from a safetensors file written by save_weights. A missing
    or extra key, or a shape that differs, is a MiniBertError naming the file
    and `what` the module is (e.g. "the sst2 head with 2 labels"), and so is
    an integer or boolean tensor, which load_state_dict would cast silently."""
    weights = load_safetensors(path)
    for name, value in weights.items():
        if not value.is_floating_point():
            raise MiniBertError(f"{path}: tensor {name!r} has dtype {str(value.dtype).removeprefix('torch.')}; "
                                f"expected a floating-point weight")
    try:
        module.load_state_dict(weights)
    except RuntimeError as e:
        lines = [line.strip() for line in str(e).splitlines()]   # torch: a title, then one line per problem
        raise MiniBertError(f"{path}: does not fit {what} ({lines[1] if len(lines) > 1 else lines[0]})") from None
    return module


# ---------------------------------------------------------------------------
# PyTorch .bin (pickle inside a zip)
# ---------------------------------------------------------------------------
#
# torch.save (PyTorch 1.6 and later) writes a zip archive: the pickled dict in
# `archive/data.pkl` and each tensor's bytes in its own member. Every member
# carries a CRC-32, but torch.load never checks them, so a flipped bit in the
# weights would load silently: we read the archive with `zipfile`, which does
# check them, before torch.load sees it. Older PyTorch wrote a bare pickle
# with no checksum anywhere; such a file is read as it is, like safetensors.

ZIP_MAGIC = b"PK\x03\x04"  # how torch.load itself tells a zip from a legacy pickle
PICKLE_MAGIC = b"\x80"      # a pickle (protocol 2 or later) starts with PROTO
ZIP_CHUNK_BYTES = 1 << 20


def load_torch_bin(path):
    """Read a PyTorch state dict (`pytorch_model.bin`, `*.pt`) into {name: tensor}.

    Checks the zip archive's CRC-32s, then uses torch.load with
    weights_only=True, which refuses to run arbitrary pickled code. A training
    checkpoint that wraps the weights under "state_dict" or "model" is
    unwrapped. Every value must be a dense tensor that holds data.
    """
    path = Path(path)
    if not path.is_file():
        raise MiniBertError(f"{path}: no such file")
    with open_for_reading(path) as f:
        start = f.read(len(ZIP_MAGIC))
    if start == ZIP_MAGIC:
        check_zip_checksums(path)
    elif not start.startswith(PICKLE_MAGIC):
        raise MiniBertError(f"{path}: not a readable PyTorch checkpoint (expected the zip "
                            f"archive torch.save writes, or an older PyTorch pickle)")
    obj = torch_load_weights_only(path)

    if isinstance(obj, dict):
        for wrapper in ("state_dict", "model"):
            if isinstance(obj.get(wrapper), dict):
                obj = obj[wrapper]
                break
    if not isinstance(obj, dict):
        raise MiniBertError(f"{path}: expected a state dict (name -> tensor), "
                            f"got a {type(obj).__name__}")
    for name, value in obj.items():
        check_dense_tensor(path, name, value)
    return dict(obj)


def check_zip_checksums(path):
    """Read every member of the zip archive at `path` to its end, which makes
    `zipfile` compare each member's CRC-32 with the one stored in the archive.

    An archive whose CRCs are all 0 was written with them switched off
    (torch.utils.serialization.config.save.compute_crc32 = False): there is
    nothing to check, as in a legacy file. One damaged CRC cannot look like that.
    """
    member = None
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if not any(m.CRC for m in members):
                return
            for member in members:
                with archive.open(member) as f:
                    while f.read(ZIP_CHUNK_BYTES):
                        pass
    # zipfile raises many types on a damaged archive (BadZipFile for a wrong
    # CRC, EOFError for missing bytes, zlib.error, struct.error, ...).
    except Exception as e:
        where = "zip archive" if member is None else f"zip member {member.filename!r}"
        raise MiniBertError(f"{path}: not a readable PyTorch checkpoint ({where} is damaged: "
                            f"{one_line(str(e)) or type(e).__name__})") from None


def torch_load_weights_only(path):
    """torch.load with weights_only=True, its errors turned into one-line MiniBertErrors."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch.load raises many types (RuntimeError, UnpicklingError, ...)
        raise torch_load_error(path, e) from None


def torch_load_error(path, error):
    """The MiniBertError for an exception torch.load raised."""
    message = str(error)
    if message.startswith("Weights only load failed"):
        # The safe unpickler refused something. torch's message goes on to
        # advise switching the safety off; a downloaded file never deserves that.
        refused = re.search(r"GLOBAL (\S+)", message)
        what = refused.group(1) if refused else "an object that is not a tensor or a plain container"
        return MiniBertError(f"{path}: not loaded: the pickle needs {what}, which loading with "
                             f"weights_only=True refuses (weights need only tensors and plain containers)")
    return MiniBertError(f"{path}: not a readable PyTorch checkpoint "
                         f"({type(error).__name__}: {one_line(message)})")


def one_line(message):
    """The first sentence of an error message (torch's go on for paragraphs)."""
    first_line = (message.strip().splitlines() or [""])[0]
    return first_line.split(". ")[0][:200]


def check_dense_tensor(path, name, value):
    """A state dict entry must be a tensor with its numbers in it: a sparse
    tensor or a meta tensor (a shape without data, from a model that was never
    materialized) cannot be copied into a parameter."""
    if not isinstance(name, str) or not isinstance(value, torch.Tensor):
        raise MiniBertError(f"{path}: entry {name!r} is a {type(value).__name__}, "
                            f"expected a tensor")
    if value.layout != torch.strided:
        raise MiniBertError(f"{path}: tensor {name!r} has layout {value.layout}; "
                            f"expected a dense (torch.strided) tensor")
    if value.is_meta:
        raise MiniBertError(f"{path}: tensor {name!r} is a meta tensor (a shape without "
                            f"values); expected a tensor saved with its values")
