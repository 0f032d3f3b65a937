"""Read a TensorFlow checkpoint (the "TensorBundle V2" format) without TensorFlow.

Google's BERT and ALBERT releases are TensorFlow 1 checkpoints. A checkpoint
with prefix `model.ckpt` is two kinds of file (docs/formats.md section 4.1):

    model.ckpt.index                  which tensors exist, and where their bytes are
    model.ckpt.data-00000-of-00001    the raw tensor bytes, one shard (or more)

The `.index` file is an SSTable, the sorted key -> value table of LevelDB
(google/leveldb doc/table_format.md; TF's copy is tensorflow/core/lib/io/).
Its keys are tensor names and its values are `BundleEntryProto` protobuf
messages (tensorflow/core/protobuf/tensor_bundle.proto) saying dtype, shape,
shard, byte offset, byte size and a checksum. This module reads it bottom-up:

    [data block 0] ... [data block N-1] [metaindex block] [index block] [footer]
      footer       -> where the index block is
      index block  -> where each data block is
      data blocks  -> (tensor name, BundleEntryProto) pairs
      entries      -> bytes in a .data-* shard -> numpy arrays

Nothing is trusted before it is checked: the magic number, every offset and
length, and the CRC-32C checksum that protects each block and each tensor.
"""

import functools
import math
import os
import re
import struct

import numpy as np

from minibert.support.protobuf import iter_fields, read_varint, to_signed64
from minibert.support import MiniBertError

# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), as "masked" by LevelDB (docs/formats.md 4.2 and 4.4)
# ---------------------------------------------------------------------------

_CRC_POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reversed


def _make_crc_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _make_crc_table()
_CRC_TABLE_NP = np.array(_CRC_TABLE, dtype=np.uint32)


def _crc_update(state, data):
    """The textbook byte-at-a-time CRC loop. Correct, but ~7 MB/s in CPython.

    `state` is the 32-bit register (crc32c starts it at 0xFFFFFFFF and
    inverts the result); table[i] is the register that 8 steps of division
    by the bit-reversed polynomial leave from the byte i."""
    # exercise: masked-crc32c
    table = _CRC_TABLE
    for byte in data:
        index = (state ^ byte) & 0xFF         # the register's low byte meets the next data byte
        state = table[index] ^ (state >> 8)   # eight division steps at once
    return state
    # end exercise


@functools.lru_cache(maxsize=None)
def _skip_zeros_tables(n):
    """Four 256-entry tables that move a CRC register forward over n zero bytes.

    Feeding zeros is linear (XOR-only) in the 32-bit register, so it is enough
    to know where each single set bit ends up: a register is the XOR of the
    images of its bits, looked up here one register byte at a time.
    """
    images = [_crc_update(1 << bit, bytes(n)) for bit in range(32)]
    tables = []
    for k in range(4):
        table = [0] * 256
        for value in range(256):
            for bit in range(8):
                if value >> bit & 1:
                    table[value] ^= images[8 * k + bit]
        tables.append(table)
    return tables


def crc32c(data):
    """CRC-32C of a bytes-like object (the value TensorFlow's crc32c::Value gives).

    The plain loop above would need a minute for the 440 MB of a BERT-base
    shard, so inputs are cut into equal chunks whose CRCs numpy computes side
    by side: one table lookup per byte *position*, for all chunks at once.
    The chunk CRCs are then chained: the register after "..., chunk i" is
    (the register before it, moved over len(chunk) zero bytes) XOR (the CRC
    of chunk i started from 0). About 0.1 s per 10 MB.
    """
    data = np.frombuffer(data, dtype=np.uint8)
    # ~sqrt(n)/4-byte chunks balance numpy steps (one per byte of a chunk)
    # against Python steps (one per chunk); at least 16, at most 1024 bytes.
    chunk = min(1024, max(16, 1 << (math.isqrt(len(data)) // 4).bit_length()))
    head = len(data) if len(data) < 1024 else len(data) % chunk
    state = _crc_update(0xFFFFFFFF, data[:head].tobytes())
    rows = data[head:].reshape(-1, chunk)
    t0, t1, t2, t3 = _skip_zeros_tables(chunk)
    for start in range(0, len(rows), 16384):  # at most 16 MiB at a time
        columns = np.ascontiguousarray(rows[start:start + 16384].T)
        partial = np.zeros(columns.shape[1], dtype=np.uint32)
        for column in columns:  # byte j of every chunk
            partial = _CRC_TABLE_NP[(partial ^ column) & 0xFF] ^ (partial >> 8)
        for chunk_crc in partial.tolist():
            state = (t0[state & 0xFF] ^ t1[(state >> 8) & 0xFF]
                     ^ t2[(state >> 16) & 0xFF] ^ t3[state >> 24] ^ chunk_crc)
    return state ^ 0xFFFFFFFF


def unmask_crc(masked):
    """LevelDB stores rotate(crc, 17) + 0xa282ead8 ("masked", util/crc32c.h)."""
    rotated = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


# ---------------------------------------------------------------------------
# The SSTable: footer, blocks, entries (docs/formats.md 4.2)
# ---------------------------------------------------------------------------

_TABLE_MAGIC = 0xDB4775248B80FB57  # leveldb table/format.h kTableMagicNumber
_FOOTER_SIZE = 48  # two BlockHandles padded to 40 bytes, then the 8-byte magic


def _read_handle(buf, pos, what):
    """A BlockHandle is two varints: offset and size of the block contents."""
    offset, pos = read_varint(buf, pos, what)
    size, pos = read_varint(buf, pos, what)
    return (offset, size), pos


def _read_block(index, handle, path, what):
    """Return the contents of one block after checking its 5-byte trailer.

    Trailer = compression type (1 byte) + masked CRC-32C of contents+type
    (leveldb table/format.cc ReadBlock; TF table_builder.cc WriteRawBlock).
    """
    offset, size = handle
    if offset + size + 5 > len(index):
        raise MiniBertError(f"{path}: {what} (size {size}) runs past the end of the "
                            f"file ({len(index)} bytes); file truncated or corrupt")
    contents = index[offset:offset + size]
    block_type = index[offset + size]
    (stored_crc,) = struct.unpack_from("<I", index, offset + size + 1)
    if unmask_crc(stored_crc) != crc32c(index[offset:offset + size + 1]):
        raise MiniBertError(f"{path}: checksum mismatch in {what}; the index file is corrupt")
    if block_type == 1:
        raise MiniBertError(f"{path}: {what} is a Snappy-compressed block, not supported "
                            f"(TensorFlow writes checkpoint indexes uncompressed)")
    if block_type != 0:
        raise MiniBertError(f"{path}: {what} has unknown compression type {block_type}")
    return contents


def _block_entries(block, path, what):
    """Yield (key, value) pairs of one block (leveldb table/block_builder.cc).

    A block is a run of entries, then the restart array (uint32 offsets of
    entries whose key is stored whole), then its length. Each entry stores
    only the part of its key that differs from the previous key:
    varint shared, varint unshared, varint value_length, key suffix, value.
    """
    what = f"{path}: {what}"
    if len(block) < 4:
        raise MiniBertError(f"{what} is {len(block)} bytes, too short for a block")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    entries_end = len(block) - 4 - 4 * num_restarts
    if num_restarts < 1 or entries_end < 0:
        raise MiniBertError(f"{what}: bad restart count {num_restarts}")
    restarts = struct.unpack_from(f"<{num_restarts}I", block, entries_end)
    if restarts[0] != 0 or list(restarts) != sorted(set(restarts)) or restarts[-1] > entries_end:
        raise MiniBertError(f"{what}: restart offsets are not ascending inside the block")
    restarts = set(restarts)
    entries = memoryview(block)[:entries_end]
    pos, key = 0, b""
    while pos < entries_end:
        at_restart = pos in restarts
        shared, pos = read_varint(entries, pos, what)
        unshared, pos = read_varint(entries, pos, what)
        value_length, pos = read_varint(entries, pos, what)
        if shared > len(key) or (at_restart and shared != 0):
            raise MiniBertError(f"{what}: entry shares {shared} bytes with a {len(key)}-byte key")
        end = pos + unshared + value_length
        if end > entries_end:
            raise MiniBertError(f"{what}: entry at byte {pos} overruns the block")
        key = key[:shared] + bytes(entries[pos:pos + unshared])
        yield key, bytes(entries[pos + unshared:end])
        pos = end


def _table_entries(index, path):
    """Yield every (key, value) of the SSTable in `index` (the file's bytes), in order."""
    if len(index) < _FOOTER_SIZE:
        raise MiniBertError(f"{path}: {len(index)} bytes, too short to be a checkpoint index")
    footer = index[-_FOOTER_SIZE:]
    (magic,) = struct.unpack_from("<Q", footer, 40)
    if magic != _TABLE_MAGIC:
        raise MiniBertError(f"{path}: bad magic number {magic:#018x} (expected "
                            f"{_TABLE_MAGIC:#018x}); not a TensorFlow checkpoint index")
    _metaindex_handle, pos = _read_handle(footer[:40], 0, f"{path}: footer")
    index_handle, _ = _read_handle(footer[:40], pos, f"{path}: footer")
    what = f"index block at offset {index_handle[0]}"
    index_block = _read_block(index, index_handle, path, what)
    previous = None
    for _separator, handle_bytes in _block_entries(index_block, path, what):
        handle, _ = _read_handle(handle_bytes, 0, f"{path}: index block entry")
        block = _read_block(index, handle, path, f"data block at offset {handle[0]}")
        for key, value in _block_entries(block, path, f"data block at offset {handle[0]}"):
            if previous is not None and key <= previous:
                raise MiniBertError(f"{path}: keys out of order near {key[:80]!r}")
            previous = key
            yield key, value


# ---------------------------------------------------------------------------
# The protobuf values (docs/formats.md 4.3)
# ---------------------------------------------------------------------------

# DataType enum (tensorflow/core/framework/types.proto) -> (name, on-disk numpy dtype)
_DTYPES = {1: ("float32", "<f4"), 2: ("float64", "<f8"), 3: ("int32", "<i4"),
           4: ("uint8", "u1"), 5: ("int16", "<i2"), 6: ("int8", "i1"), 9: ("int64", "<i8"),
           10: ("bool", "u1"), 14: ("bfloat16", "<u2"), 19: ("float16", "<f2")}
_DT_STRING = 7


def _fields(raw, expected_wire_types, what):
    """Decode a message into {field: value}, checking wire types (last value wins).

    A repeated field (wire type 2 listed in a tuple) collects a list instead.
    """
    out = {}
    for number, wire_type, value in iter_fields(raw, what):
        expected = expected_wire_types.get(number)
        if expected is None:
            continue  # a field this reader does not need
        repeated = isinstance(expected, tuple)
        if wire_type != (expected[0] if repeated else expected):
            raise MiniBertError(f"{what}: field {number} has wire type {wire_type}")
        if repeated:
            out.setdefault(number, []).append(value)
        else:
            out[number] = value
    return out


def _parse_header(raw, path):
    """BundleHeaderProto: num_shards = 1, endianness = 2 (0 little, 1 big), version = 3."""
    what = f"{path}: header entry"
    fields = _fields(raw, {1: 0, 2: 0, 3: 2}, what)
    num_shards = to_signed64(fields.get(1, 0))
    if num_shards < 1:
        raise MiniBertError(f"{what}: num_shards is {num_shards}")
    if fields.get(2, 0) == 1:
        raise MiniBertError(f"{path}: big-endian checkpoint, not supported")
    if fields.get(2, 0) != 0:
        raise MiniBertError(f"{what}: unknown endianness {fields[2]}")
    # VersionDef: producer = 1, min_consumer = 2. Our reader is version 1 (kTensorBundleVersion).
    min_consumer = to_signed64(_fields(fields.get(3, b""), {1: 0, 2: 0}, what).get(2, 0))
    if min_consumer > 1:
        raise MiniBertError(f"{what}: needs a reader of bundle version {min_consumer}")
    return num_shards


def _parse_entry(raw, name, path):
    """BundleEntryProto: dtype 1, shape 2, shard_id 3, offset 4, size 5, crc32c 6, slices 7.

    proto3 omits zero values, so every field defaults to 0.
    """
    # exercise: tensorbundle-entry
    what = f"{path}: tensor {name!r}"
    fields = _fields(raw, {1: 0, 2: 2, 3: 0, 4: 0, 5: 0, 6: 5, 7: (2,)}, what)
    if fields.get(7):
        raise MiniBertError(f"{what} is a partitioned tensor (saved in slices), not supported")
    # TensorShapeProto: repeated Dim dim = 2 (Dim: int64 size = 1), bool unknown_rank = 3
    shape_fields = _fields(fields.get(2, b""), {2: (2,), 3: 0}, what)
    if shape_fields.get(3, 0):
        raise MiniBertError(f"{what} has unknown rank")
    shape = tuple(to_signed64(_fields(dim, {1: 0}, what).get(1, 0))
                  for dim in shape_fields.get(2, []))
    if any(size < 0 for size in shape):
        raise MiniBertError(f"{what} has unknown or negative dimension in shape {shape}")
    dtype = fields.get(1, 0)
    if dtype not in _DTYPES and dtype != _DT_STRING:
        raise MiniBertError(f"{what} has unsupported dtype enum {dtype} "
                            f"(tensorflow/core/framework/types.proto)")
    return {"dtype": dtype, "shape": shape, "shard_id": to_signed64(fields.get(3, 0)),
            "offset": to_signed64(fields.get(4, 0)), "size": to_signed64(fields.get(5, 0)),
            "crc32c": fields.get(6, 0)}
    # end exercise


def _read_index(prefix):
    """Parse PREFIX.index into (num_shards, {tensor name: entry dict})."""
    path = prefix + ".index"
    try:
        with open(path, "rb") as f:
            index = f.read()
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read checkpoint index ({e.strerror})") from None
    num_shards, entries, slice_keys = None, {}, 0
    for key, value in _table_entries(index, path):
        if num_shards is None:
            if key != b"":  # kHeaderEntryKey: the header is always the first entry
                raise MiniBertError(f"{path}: header entry missing (first key {key[:80]!r})")
            num_shards = _parse_header(value, path)
            continue
        if key.startswith(b"\0"):  # one slice of a partitioned tensor (EncodeTensorNameSlice);
            slice_keys += 1        # the whole tensor's entry follows and says it is partitioned
            continue
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise MiniBertError(f"{path}: tensor name {key[:80]!r} is not UTF-8") from None
        entries[name] = _parse_entry(value, name, path)
    if num_shards is None:
        raise MiniBertError(f"{path}: empty index, no header entry")
    if slice_keys:
        raise MiniBertError(f"{path}: {slice_keys} tensor slice entries but no partitioned tensor")
    return num_shards, entries


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

def list_tf_checkpoint(prefix):
    """{name: (dtype_name, shape)} for every tensor, reading only PREFIX.index.

    dtype_name is the on-disk type ("float32", "bfloat16", "string", ...).
    """
    _, entries = _read_index(os.fspath(prefix))
    return {name: ("string" if e["dtype"] == _DT_STRING else _DTYPES[e["dtype"]][0], e["shape"])
            for name, e in entries.items()}


def _read_tensor(f, shard_path, name, entry, verify_data_crc):
    """Read one tensor's bytes from an open shard, check them, make the array."""
    what = f"{shard_path}: tensor {name!r}"
    dtype_name, disk_dtype = _DTYPES[entry["dtype"]]
    offset, size, shape = entry["offset"], entry["size"], entry["shape"]
    itemsize = np.dtype(disk_dtype).itemsize
    needed = int(np.prod(shape, dtype=object)) * itemsize
    if size != needed:
        raise MiniBertError(f"{what}: {size} bytes stored but shape {shape} of {dtype_name} "
                            f"needs {needed}")
    # numpy multiplies the non-zero dimensions (and the item size) even for an
    # empty array, and refuses a shape like (0, 2**62, 2**62) whose product overflows.
    if int(np.prod([max(d, 1) for d in shape], dtype=object)) * itemsize >= 2**63:
        raise MiniBertError(f"{what}: shape {shape} is too large")
    file_size = os.fstat(f.fileno()).st_size
    if offset < 0 or offset + size > file_size:
        raise MiniBertError(f"{what}: bytes [{offset}, {offset + size}) lie outside the "
                            f"{file_size}-byte file; shard truncated?")
    data = bytearray(size)  # a bytearray, so the array made from it is writable
    f.seek(offset)
    if f.readinto(data) != size:
        raise MiniBertError(f"{what}: short read; shard truncated?")
    if verify_data_crc and unmask_crc(entry["crc32c"]) != crc32c(data):
        raise MiniBertError(f"{what}: checksum mismatch; the data shard is corrupt")
    array = np.frombuffer(data, dtype=disk_dtype).reshape(shape)
    if dtype_name == "bfloat16":  # bfloat16 is the top 16 bits of a float32
        array = (array.astype(np.uint32) << 16).view(np.float32)
    elif dtype_name == "bool":
        array = array != 0
    return array.astype(array.dtype.newbyteorder("="), copy=False)  # '<f4' -> native


def read_tf_checkpoint(prefix, verify_data_crc=True):
    """Read every tensor of the checkpoint at `prefix` into {name: numpy array}.

    Arrays are writable, C-ordered, in the on-disk dtype, except bfloat16,
    which becomes float32 (numpy has no bfloat16; the conversion is exact).
    DT_STRING tensors (e.g. TF2's object graph) are not weights and are left
    out. Optimizer slots and `global_step` are returned like any tensor.
    `verify_data_crc=False` skips the per-tensor checksum (index blocks are
    always checked); it saves ~8 s per GB.
    """
    prefix = os.fspath(prefix)
    num_shards, entries = _read_index(prefix)
    shards, arrays = {}, {}
    try:
        for name, entry in entries.items():
            if entry["dtype"] == _DT_STRING:
                continue
            if not 0 <= entry["shard_id"] < num_shards:
                raise MiniBertError(f"{prefix}.index: tensor {name!r} is in shard "
                                    f"{entry['shard_id']} but the header says "
                                    f"{num_shards} shard(s)")
            # naming.cc DataFilename: PREFIX.data-%05d-of-%05d
            shard_path = f"{prefix}.data-{entry['shard_id']:05d}-of-{num_shards:05d}"
            if shard_path not in shards:
                try:
                    shards[shard_path] = open(shard_path, "rb")
                except OSError as e:
                    raise MiniBertError(f"{shard_path}: cannot open data shard for tensor "
                                        f"{name!r} ({e.strerror})") from None
            arrays[name] = _read_tensor(shards[shard_path], shard_path, name, entry,
                                        verify_data_crc)
    finally:
        for f in shards.values():
            f.close()
    return arrays


def _from_checkpoint_file(folder):
    """The prefix named by a `checkpoint` text file, or None if there is none.

    The file is a text-format CheckpointState: `model_checkpoint_path: "..."`.
    Training machines often write absolute paths; if that path does not exist
    here, the same base name inside `folder` is tried.
    """
    state_path = os.path.join(folder, "checkpoint")
    if not os.path.isfile(state_path):
        return None
    with open(state_path, encoding="utf-8", errors="replace") as f:
        match = re.search(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', f.read(), re.M)
    if not match:
        raise MiniBertError(f"{state_path}: no model_checkpoint_path line")
    named = re.sub(r"\\(.)", r"\1", match.group(1))
    for candidate in (os.path.join(folder, named),
                      os.path.join(folder, re.split(r"[\\/]", named)[-1])):
        if os.path.isfile(candidate + ".index"):
            return candidate
    raise MiniBertError(f"{state_path}: names checkpoint '{named}' but {named}.index is not "
                        f"in {folder}")


def find_tf_checkpoint_prefix(folder):
    """The checkpoint prefix to read in `folder` (a prefix itself is returned as is).

    In order: the prefix a `checkpoint` file names; the single `X.index` with a
    `X.data-*` shard beside it; a TF-Hub SavedModel's `variables/variables`.
    """
    folder = os.fspath(folder)
    if os.path.isfile(folder + ".index"):
        return folder
    if not os.path.isdir(folder):
        raise MiniBertError(f"{folder}: no such folder or checkpoint prefix")
    named = _from_checkpoint_file(folder)
    if named is not None:
        return named
    files = set(os.listdir(folder))
    prefixes = sorted(name[:-len(".index")] for name in files if name.endswith(".index")
                      and any(f.startswith(name[:-len(".index")] + ".data-") for f in files))
    if len(prefixes) > 1:
        raise MiniBertError(f"{folder}: several checkpoints ({', '.join(prefixes)}); pass the "
                            f"prefix, or add a `checkpoint` file naming one")
    if prefixes:
        return os.path.join(folder, prefixes[0])
    hub_prefix = os.path.join(folder, "variables", "variables")
    if os.path.isfile(hub_prefix + ".index"):
        return hub_prefix
    raise MiniBertError(f"{folder}: no TensorFlow checkpoint (X.index with X.data-* shards, "
                        f"or variables/variables.index)")
