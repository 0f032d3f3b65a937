"""Tests for minibert.checkpoints.tf_bundle, the TensorFlow checkpoint reader.

The fixtures under tests/fixtures/ were written by TensorFlow's own saver
(tests/fixtures/make_tf_checkpoints.py); `expected_arrays.npz` beside each
holds what TensorFlow read back, so these tests need no TensorFlow.
"""

import os
import random
import shutil
import struct
import time

import numpy as np
import pytest

from minibert.checkpoints import load_pretrained, tf_bundle
from minibert.checkpoints.tf_bundle import (crc32c, find_tf_checkpoint_prefix, list_tf_checkpoint,
                                            read_tf_checkpoint, unmask_crc)
from minibert.support import MiniBertError
from helpers import varint

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CASES = {  # folder -> prefix relative to it
    "tf_bert_tiny": "bert_model.ckpt",
    "tf_albert_tiny": "model.ckpt-best",
    "tfhub_albert_tiny": os.path.join("variables", "variables"),
    "tf_dtypes_tiny": "dtypes.ckpt",
}
BERT = os.path.join(FIXTURES, "tf_bert_tiny", "bert_model.ckpt")


# ---------------------------------------------------------------------------
# Genuine checkpoints read exactly as TensorFlow reads them
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("folder", sorted(CASES))
def test_reads_exactly_what_tensorflow_wrote(folder):
    prefix = find_tf_checkpoint_prefix(os.path.join(FIXTURES, folder))
    assert prefix == os.path.join(FIXTURES, folder, CASES[folder])
    got = read_tf_checkpoint(prefix)
    with np.load(os.path.join(FIXTURES, folder, "expected_arrays.npz")) as npz:
        expected = {name: npz[name] for name in npz.files}
    strings = {name for name, a in expected.items() if a.dtype.kind == "S"}
    assert set(got) == set(expected) - strings  # DT_STRING tensors are left out
    for name, array in got.items():
        assert array.dtype == expected[name].dtype, name
        assert array.shape == expected[name].shape, name
        np.testing.assert_array_equal(array, expected[name], err_msg=name)
        assert array.flags.writeable and array.flags.c_contiguous
    listing = list_tf_checkpoint(prefix)
    assert set(listing) == set(expected)
    for name, (dtype_name, shape) in listing.items():
        assert shape == expected[name].shape
        if name not in strings and dtype_name != "bfloat16":
            assert dtype_name == str(expected[name].dtype)


def test_bert_fixture_has_google_names_slots_and_global_step():
    listing = list_tf_checkpoint(BERT)
    assert listing["global_step"] == ("int64", ())
    assert listing["bert/embeddings/word_embeddings"] == ("float32", (99, 32))
    assert listing["bert/encoder/layer_1/intermediate/dense/kernel"] == ("float32", (32, 37))
    assert listing["cls/seq_relationship/output_weights"] == ("float32", (2, 32))
    weights = [n for n in listing if n != "global_step" and not n.endswith(("/adam_m", "/adam_v"))]
    for name in weights:
        assert listing[name + "/adam_m"] == listing[name + "/adam_v"] == listing[name]
    assert len(listing) == 3 * len(weights) + 1
    assert read_tf_checkpoint(BERT)["global_step"] == 1000


def test_albert_fixtures_names():
    albert = list_tf_checkpoint(os.path.join(FIXTURES, "tf_albert_tiny", "model.ckpt-best"))
    hub = list_tf_checkpoint(os.path.join(FIXTURES, "tfhub_albert_tiny", "variables", "variables"))
    block = "bert/encoder/transformer/group_0/inner_group_0/"
    assert albert[block + "ffn_1/intermediate/output/dense/kernel"] == ("float32", (37, 32))
    assert albert["cls/predictions/transform/dense/kernel"] == ("float32", (32, 16))
    assert albert["bert/encoder/embedding_hidden_mapping_in/kernel"] == ("float32", (16, 32))
    weights = {n: v for n, v in albert.items()
               if n != "global_step" and not n.endswith(("/adam_m", "/adam_v"))}
    assert hub == {"module/" + n: v for n, v in weights.items()}


def test_dtypes_fixture_has_two_shards_and_a_string():
    assert os.path.exists(os.path.join(FIXTURES, "tf_dtypes_tiny", "dtypes.ckpt.data-00001-of-00002"))
    assert list_tf_checkpoint(os.path.join(FIXTURES, "tf_dtypes_tiny", "dtypes.ckpt"))["string"] == \
        ("string", (2,))


def test_crc32c_known_values_and_fast_path():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    rng = np.random.default_rng(0)
    for n in (1023, 1024, 5000, 70001, 1 << 20):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == tf_bundle._crc_update(0xFFFFFFFF, data) ^ 0xFFFFFFFF, n


def test_crc32c_check_value_and_leveldb_masking():
    assert crc32c(b"123456789") == 0xE3069283                            # the standard CRC-32C check value
    crc = crc32c(b"hello")
    masked = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF      # LevelDB's mask: rotate right 15, add
    assert unmask_crc(masked) == crc


# ---------------------------------------------------------------------------
# Folders and prefixes
# ---------------------------------------------------------------------------

def copy_fixture(tmp_path, folder="tf_bert_tiny"):
    target = tmp_path / folder
    shutil.copytree(os.path.join(FIXTURES, folder), target)
    return target


def test_find_prefix_cases(tmp_path):
    bert = copy_fixture(tmp_path)
    assert find_tf_checkpoint_prefix(str(bert / "bert_model.ckpt")) == str(bert / "bert_model.ckpt")
    # a second checkpoint makes the folder ambiguous ...
    for name in ("bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001"):
        shutil.copy(bert / name, bert / name.replace("bert_model", "other"))
    with pytest.raises(MiniBertError, match="several checkpoints"):
        find_tf_checkpoint_prefix(str(bert))
    # ... until a `checkpoint` file names one, even with a training machine's absolute path
    (bert / "checkpoint").write_text('model_checkpoint_path: "/home/x/run/other.ckpt"\n')
    assert find_tf_checkpoint_prefix(str(bert)) == str(bert / "other.ckpt")
    (bert / "checkpoint").write_text('model_checkpoint_path: "gone.ckpt"\n')
    with pytest.raises(MiniBertError, match=r"checkpoint: names checkpoint 'gone.ckpt'"):
        find_tf_checkpoint_prefix(str(bert))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "lonely.index").write_bytes(b"")  # an index without shards does not count
    with pytest.raises(MiniBertError, match="no TensorFlow checkpoint"):
        find_tf_checkpoint_prefix(str(empty))
    with pytest.raises(MiniBertError, match="no such folder"):
        find_tf_checkpoint_prefix(str(tmp_path / "missing"))


# ---------------------------------------------------------------------------
# Bad input: each case names the file and the problem
# ---------------------------------------------------------------------------

def expect_error(prefix, phrase, file_name, **kwargs):
    with pytest.raises(MiniBertError) as info:
        read_tf_checkpoint(str(prefix), **kwargs)
    message = str(info.value)
    assert phrase in message and file_name in message and "\n" not in message, message
    return message


def block_layout(index):
    """[(offset, size)] of the data blocks and the index block of an index file's bytes."""
    footer = index[-48:-8]
    _, pos = tf_bundle._read_handle(footer, 0, "footer")
    index_handle, _ = tf_bundle._read_handle(footer, pos, "footer")
    index_block = index[index_handle[0]:index_handle[0] + index_handle[1]]
    handles = [tf_bundle._read_handle(v, 0, "x")[0]
               for _, v in tf_bundle._block_entries(index_block, "x", "x")]
    return handles + [index_handle]


def fix_crc(index, offset, size):
    """Recompute the trailer checksum of the block at (offset, size) in a bytearray."""
    masked = mask(crc32c(bytes(index[offset:offset + size + 1])))
    struct.pack_into("<I", index, offset + size + 1, masked)


def mask(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def test_truncated_index(tmp_path):
    index = copy_fixture(tmp_path) / "bert_model.ckpt.index"
    data = index.read_bytes()
    index.write_bytes(data[:len(data) // 2])
    expect_error(index.with_suffix(""), "not a TensorFlow checkpoint index", "bert_model.ckpt.index")
    index.write_bytes(data[:30])
    expect_error(index.with_suffix(""), "too short", "bert_model.ckpt.index")
    index.write_bytes(data[3000:])  # footer intact, blocks gone
    expect_error(index.with_suffix(""), "runs past the end", "bert_model.ckpt.index")


def test_wrong_magic(tmp_path):
    index = copy_fixture(tmp_path) / "bert_model.ckpt.index"
    data = bytearray(index.read_bytes())
    data[-1] ^= 0x40
    index.write_bytes(data)
    expect_error(index.with_suffix(""), "bad magic number", "bert_model.ckpt.index")


def test_flipped_byte_in_index_block(tmp_path):
    index = copy_fixture(tmp_path) / "bert_model.ckpt.index"
    data = bytearray(index.read_bytes())
    data[100] ^= 0x01
    index.write_bytes(data)
    expect_error(index.with_suffix(""), "checksum mismatch in data block", "bert_model.ckpt.index")


def test_snappy_block(tmp_path):
    index = copy_fixture(tmp_path) / "bert_model.ckpt.index"
    data = bytearray(index.read_bytes())
    offset, size = block_layout(data)[0]
    data[offset + size] = 1  # compression type byte: kSnappyCompression
    fix_crc(data, offset, size)
    index.write_bytes(data)
    expect_error(index.with_suffix(""), "Snappy-compressed block, not supported",
                 "bert_model.ckpt.index")


def test_truncated_and_missing_shard(tmp_path):
    folder = copy_fixture(tmp_path)
    shard = folder / "bert_model.ckpt.data-00000-of-00001"
    shard.write_bytes(shard.read_bytes()[:-1000])
    expect_error(folder / "bert_model.ckpt", "shard truncated", "bert_model.ckpt.data-00000-of-00001")
    shard.unlink()
    expect_error(folder / "bert_model.ckpt", "cannot open data shard",
                 "bert_model.ckpt.data-00000-of-00001")


def test_flipped_byte_in_tensor_data(tmp_path):
    folder = copy_fixture(tmp_path)
    shard = folder / "bert_model.ckpt.data-00000-of-00001"
    _, entries = tf_bundle._read_index(str(folder / "bert_model.ckpt"))
    name, entry = next((n, e) for n, e in entries.items() if n.endswith("query/kernel"))
    data = bytearray(shard.read_bytes())
    data[entry["offset"] + 17] ^= 0x80
    shard.write_bytes(data)
    message = expect_error(folder / "bert_model.ckpt", "checksum mismatch; the data shard is corrupt",
                           "bert_model.ckpt.data-00000-of-00001")
    assert repr(name) in message
    arrays = read_tf_checkpoint(str(folder / "bert_model.ckpt"), verify_data_crc=False)
    assert arrays[name].shape == (32, 32)


def test_partitioned_checkpoint_written_by_tensorflow():
    prefix = os.path.join(FIXTURES, "tf_partitioned_tiny", "part.ckpt")
    expect_error(prefix, "tensor 'partitioned' is a partitioned tensor", "part.ckpt.index")
    with pytest.raises(MiniBertError, match="partitioned tensor"):
        list_tf_checkpoint(prefix)


# A tiny test-only writer for crafted indexes (the format of docs/formats.md 4.2-4.3).

def write_block(out, entries, block_type=0):
    """Append a block (restart interval 1, so no key sharing) + trailer; return its handle."""
    body, restarts = bytearray(), []
    for key, value in entries:
        restarts.append(len(body))
        body += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    body += struct.pack(f"<{len(restarts) or 1}I", *(restarts or [0]))
    body += struct.pack("<I", len(restarts) or 1)
    handle = varint(len(out)) + varint(len(body))
    out += body + bytes([block_type])
    out += struct.pack("<I", mask(crc32c(body + bytes([block_type]))))
    return handle


def write_index(path, entries, header=None):
    header = header if header is not None else varint(0x08) + varint(1)  # num_shards = 1
    out = bytearray()
    data_handle = write_block(out, [(b"", header)] + entries)
    meta_handle = write_block(out, [])
    index_handle = write_block(out, [(b"\xff", data_handle)])
    footer = (meta_handle + index_handle).ljust(40, b"\0")
    out += footer + struct.pack("<Q", 0xDB4775248B80FB57)
    path.write_bytes(out)


def bundle_entry(dtype=1, dims=(), shard_id=0, offset=0, size=0, crc=0, slices=0):
    shape = b"".join(b"\x12" + varint(len(d)) + d for d in (b"\x08" + varint(n) for n in dims))
    return (b"\x08" + varint(dtype) + b"\x12" + varint(len(shape)) + shape
            + b"\x18" + varint(shard_id) + b"\x20" + varint(offset) + b"\x28" + varint(size)
            + b"\x35" + struct.pack("<I", crc) + b"\x3a\x00" * slices)


@pytest.mark.parametrize("entry, header, phrase", [
    (bundle_entry(dims=[2], size=8, slices=1), None, "partitioned tensor"),
    (bundle_entry(dtype=8, dims=[2], size=16), None, "unsupported dtype enum 8"),
    (bundle_entry(dims=[2], size=8), b"\x08\x01\x10\x01", "big-endian checkpoint"),
    (bundle_entry(dims=[2], size=8, shard_id=1), None, "in shard 1 but the header says 1"),
    (bundle_entry(dims=[3], size=8), None, "8 bytes stored but shape (3,)"),
    (bundle_entry(dims=[2], size=8, offset=4), None, "outside the 8-byte file"),
    (bundle_entry(dims=[0, 2**62, 2**62], size=0), None, "shape (0, 4611686018427387904, "),
    (b"\x08\x01\x12\x03\x12\x01\x08", None, "truncated varint"),
    (b"\x10\x01", None, "field 2 has wire type 0"),
])
def test_crafted_bad_entries(tmp_path, entry, header, phrase):
    prefix = tmp_path / "crafted.ckpt"
    write_index(tmp_path / "crafted.ckpt.index", [(b"w", entry)], header)
    (tmp_path / "crafted.ckpt.data-00000-of-00001").write_bytes(np.ones(2, "<f4").tobytes())
    message = expect_error(prefix, phrase, "crafted.ckpt")
    if "header" not in phrase and "big-endian" not in phrase:
        assert "'w'" in message


def test_crafted_good_entry_and_checks(tmp_path):
    prefix = tmp_path / "crafted.ckpt"
    value = np.arange(6, dtype="<f4").reshape(2, 3)
    entry = bundle_entry(dims=[2, 3], size=24, crc=mask(crc32c(value.tobytes())))
    write_index(tmp_path / "crafted.ckpt.index", [(b"w", entry)])
    (tmp_path / "crafted.ckpt.data-00000-of-00001").write_bytes(value.tobytes())
    np.testing.assert_array_equal(read_tf_checkpoint(str(prefix))["w"], value)
    write_index(tmp_path / "crafted.ckpt.index", [(b"w", entry)], header=b"")  # num_shards 0
    expect_error(prefix, "num_shards is 0", "crafted.ckpt.index")
    write_index(tmp_path / "crafted.ckpt.index", [(b"w", entry), (b"a", entry)])
    expect_error(prefix, "keys out of order", "crafted.ckpt.index")


# ---------------------------------------------------------------------------
# Fuzzing: any mutation gives either arrays or MiniBertError, quickly
# ---------------------------------------------------------------------------

def mutate(data, rng, blocks=None):
    data = bytearray(data)
    kind = rng.randrange(5 if blocks else 3)
    if kind == 0:  # flip a few bits anywhere
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate
        del data[rng.randrange(len(data)):]
    elif kind == 2:  # insert random bytes
        at = rng.randrange(len(data) + 1)
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    else:  # change bytes inside a block and fix its checksum, so the parser sees them
        offset, size = rng.choice(blocks)
        for _ in range(rng.randint(1, 3)):
            at = offset + rng.randrange(size)
            data[at] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        fix_crc(data, offset, size)
    return bytes(data)


def rewrite(path, data):
    """Replace a file's contents. Unlinking first avoids ext4 flushing a truncated
    file to disk (auto_da_alloc), which costs milliseconds per write."""
    path.unlink()
    path.write_bytes(data)


def fuzz_read(prefix, **kwargs):
    start = time.perf_counter()
    try:
        read_tf_checkpoint(str(prefix), **kwargs)
        outcome = "ok"
    except MiniBertError:
        outcome = "error"
    return outcome, time.perf_counter() - start


def test_fuzz_index_and_shard(tmp_path):
    folder = copy_fixture(tmp_path)
    prefix = folder / "bert_model.ckpt"
    index_path = folder / "bert_model.ckpt.index"
    shard_path = folder / "bert_model.ckpt.data-00000-of-00001"
    index, shard = index_path.read_bytes(), shard_path.read_bytes()
    blocks = block_layout(index)
    rng = random.Random(1234)
    outcomes, slowest = {"ok": 0, "error": 0}, 0.0
    for _ in range(2000):
        rewrite(index_path, mutate(index, rng, blocks))
        outcome, seconds = fuzz_read(prefix, verify_data_crc=False)
        outcomes[outcome] += 1
        slowest = max(slowest, seconds)
    rewrite(index_path, index)
    for i in range(200):  # with the data CRC every mutation is caught; without, few are
        rewrite(shard_path, mutate(shard, rng))
        outcome, seconds = fuzz_read(prefix, verify_data_crc=i % 2 == 0)
        outcomes[outcome] += 1
        slowest = max(slowest, seconds)
    assert outcomes["error"] > 1000 and outcomes["ok"] > 0, outcomes
    assert slowest < 1.0, slowest


# ---------------------------------------------------------------------------
# Regressions found by fuzzing (tests/test_fuzz.py)
# ---------------------------------------------------------------------------

def test_int32_weight_is_refused(tmp_path):
    # An index whose entry says DT_INT32 for a float weight (same byte size, so
    # the data checksum still matches) loaded as integers turned into floats.
    folder = copy_fixture(tmp_path)
    index = folder / "bert_model.ckpt.index"
    (_, header), *entries = tf_bundle._table_entries(index.read_bytes(), str(index))
    name = b"bert/encoder/layer_0/attention/self/query/kernel"
    for i, (key, value) in enumerate(entries):
        if key == name:
            assert value.startswith(b"\x08\x01")  # field 1 (dtype) = 1, DT_FLOAT
            entries[i] = (key, b"\x08\x03" + value[2:])  # DT_INT32
    write_index(index, entries, header)
    assert list_tf_checkpoint(str(folder / "bert_model.ckpt"))[name.decode()] == ("int32", (32, 32))
    with pytest.raises(MiniBertError) as info:
        load_pretrained(folder)
    message = str(info.value)
    assert str(index) in message and repr(name.decode()) in message and "dtype int32;" in message, message


# ----------------------------------------------------------------------------
# Exercises of assignment 3 (docs/coursework.md)
# ----------------------------------------------------------------------------


def test_exercise_tensorbundle_entry():
    # BundleEntryProto by hand (every number below 128, so each varint is one byte):
    # dtype 1 (DT_FLOAT); shape 2 = TensorShapeProto{dim {size: 2}, dim {size: 3}}; shard_id 1;
    # offset 64; size 24; crc32c (fixed32) 0x12345678; field 9, unknown to the reader, is skipped.
    shape = b"\x12\x02\x08\x02" + b"\x12\x02\x08\x03"
    raw = (b"\x08\x01" + b"\x12" + bytes([len(shape)]) + shape + b"\x18\x01" + b"\x20\x40" + b"\x28\x18"
           + b"\x35" + struct.pack("<I", 0x12345678) + b"\x48\x05")
    assert tf_bundle._parse_entry(raw, "bert/pooler/dense/bias", "model.ckpt.index") == {
        "dtype": 1, "shape": (2, 3), "shard_id": 1, "offset": 64, "size": 24, "crc32c": 0x12345678}
    # proto3 leaves out zero values: a float scalar at offset 0 of shard 0 is just its dtype
    assert tf_bundle._parse_entry(b"\x08\x01", "global_step", "x.index") == {
        "dtype": 1, "shape": (), "shard_id": 0, "offset": 0, "size": 0, "crc32c": 0}


def test_exercise_tensorbundle_entry_refuses_what_it_cannot_read():
    with pytest.raises(MiniBertError, match=r"x.index: tensor 'w' is a partitioned tensor"):
        tf_bundle._parse_entry(b"\x08\x01\x3a\x00", "w", "x.index")          # field 7: slices
    with pytest.raises(MiniBertError, match=r"tensor 'w' has unknown rank"):
        tf_bundle._parse_entry(b"\x08\x01\x12\x02\x18\x01", "w", "x.index")  # shape {unknown_rank: true}
    with pytest.raises(MiniBertError, match=r"unsupported dtype enum 99"):
        tf_bundle._parse_entry(b"\x08\x63", "w", "x.index")
    with pytest.raises(MiniBertError, match=r"field 6 has wire type 0"):
        tf_bundle._parse_entry(b"\x08\x01\x30\x05", "w", "x.index")          # crc32c must be fixed32


def test_exercise_masked_crc32c():
    def crc32c_bit_by_bit(data):                # the definition: one division step per bit
        crc = 0xFFFFFFFF
        for byte in data:
            crc ^= byte
            for _ in range(8):
                crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        return crc ^ 0xFFFFFFFF

    assert tf_bundle._crc_update(0xFFFFFFFF, b"123456789") ^ 0xFFFFFFFF == 0xE3069283   # the check value
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA and crc32c(b"\xff" * 32) == 0x62A8AB43       # RFC 3720 B.4
    data = bytes(range(256)) * 9 + b"tail"                                               # the chunked path
    assert crc32c(data) == crc32c_bit_by_bit(data)
    # LevelDB stores the CRC "masked": rotated right by 15 bits, plus 0xa282ead8
    masked = ((((0xE3069283 >> 15) | (0xE3069283 << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert unmask_crc(masked) == crc32c(b"123456789")
