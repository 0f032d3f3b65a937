"""Our safetensors reader/writer against the reference `safetensors` package.

The `safetensors` package is a test-only dependency: here it is the oracle.
"""

import json
import os
import random
import re
import struct
import zipfile

import pytest
import torch
import torch.nn as nn

safetensors_torch = pytest.importorskip("safetensors.torch")
from safetensors import safe_open  # noqa: E402

from minibert.checkpoints import load_pretrained  # noqa: E402
from minibert.checkpoints.safetensors import (  # noqa: E402
    DTYPES,
    load_safetensors,
    load_torch_bin,
    load_weights,
    read_safetensors_metadata,
    save_safetensors,
    save_weights,
)
from minibert.support import MiniBertError  # noqa: E402
from minibert.support.files import atomic_write, read_json_object  # noqa: E402
from tiny_models import save_tiny_model  # noqa: E402


def same_bytes(a, b):
    """Equal dtype, shape and bits (NaN-safe, works for float8 and bool)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    a, b = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def sample_tensors():
    """One tensor of every dtype we support, plus 0-d, empty and odd-sized ones."""
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, (dtype, _) in DTYPES.items():
        x = torch.randn(3, 5, generator=g) * 20
        if dtype == torch.bool:
            x = x > 0
        elif dtype in (torch.uint16, torch.uint32, torch.uint64):
            x = x.abs().to(torch.int64).to(dtype)
        else:
            x = x.to(dtype)
        tensors[f"t.{name.lower()}"] = x
    tensors["scalar"] = torch.tensor(3.25)
    tensors["scalar_bf16"] = torch.tensor(-1.5, dtype=torch.bfloat16)
    tensors["empty"] = torch.zeros(0, 4)
    tensors["empty_i64"] = torch.zeros(2, 0, dtype=torch.int64)
    tensors["odd"] = torch.arange(7, dtype=torch.int8)
    tensors["embeddings.word_embeddings.weight"] = torch.randn(11, 6, generator=g)
    tensors["ünïcode"] = torch.ones(1, dtype=torch.float64)
    return tensors


def write_raw(path, header, data=b"", header_length=None):
    """A hand-made safetensors file: header (dict or raw bytes) + data."""
    if isinstance(header, dict):
        header = json.dumps(header).encode()
    n = len(header) if header_length is None else header_length
    path.write_bytes(struct.pack("<Q", n) + header + data)
    return path


# ---------------------------------------------------------------------------
# Round trips against the reference implementation
# ---------------------------------------------------------------------------

def test_our_writer_reference_reader(tmp_path):
    tensors = sample_tensors()
    path = tmp_path / "ours.safetensors"
    save_safetensors(tensors, path, metadata={"format": "pt", "note": "ünï"})
    loaded = safetensors_torch.load_file(path)
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert same_bytes(loaded[name], tensor), name
    with safe_open(path, framework="pt") as f:
        assert f.metadata() == {"format": "pt", "note": "ünï"}


def test_reference_writer_our_reader(tmp_path):
    tensors = sample_tensors()
    path = tmp_path / "ref.safetensors"
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})
    loaded = load_safetensors(path)
    assert set(loaded) == set(tensors)
    for name, tensor in tensors.items():
        assert same_bytes(loaded[name], tensor), name
    assert loaded["t.bf16"].dtype == torch.bfloat16  # stored dtype kept; caller upcasts
    assert read_safetensors_metadata(path) == {"format": "pt"}


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}, {}])
def test_byte_identical_to_reference_writer(tmp_path, metadata):
    tensors = sample_tensors()
    ours, ref = tmp_path / "ours.safetensors", tmp_path / "ref.safetensors"
    save_safetensors(tensors, ours, metadata=metadata)
    safetensors_torch.save_file(tensors, ref, metadata=metadata)
    assert ours.read_bytes() == ref.read_bytes()


def test_empty_dict_round_trip(tmp_path):
    path = tmp_path / "empty.safetensors"
    save_safetensors({}, path)
    assert path.read_bytes() == b"\x08" + b"\x00" * 7 + b"{}      "
    assert load_safetensors(path) == {}
    assert read_safetensors_metadata(path) == {}


def test_loaded_tensors_are_writable_and_detached_from_file(tmp_path):
    path = tmp_path / "w.safetensors"
    save_safetensors({"a": torch.arange(4.0), "b": torch.ones(2, dtype=torch.bfloat16)}, path)
    loaded = load_safetensors(path)
    loaded["a"] += 1  # would warn/fail on a read-only numpy buffer
    loaded["b"][0] = 5
    os.remove(path)  # nothing keeps the file open or mapped
    assert loaded["a"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_non_contiguous_and_grad_tensors(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    param = torch.nn.Parameter(torch.randn(2, 2))
    path = tmp_path / "nc.safetensors"
    save_safetensors({"t": base.t(), "p": param}, path)
    loaded = safetensors_torch.load_file(path)
    assert torch.equal(loaded["t"], base.t())
    assert torch.equal(loaded["p"], param.detach())


def test_refuses_shared_memory(tmp_path):
    w = torch.randn(4, 3)
    path = tmp_path / "tied.safetensors"
    with pytest.raises(MiniBertError, match="'decoder.weight' share memory"):
        save_safetensors({"embeddings.weight": w, "decoder.weight": w}, path)
    with pytest.raises(MiniBertError, match="share memory"):
        save_safetensors({"a": w, "b": w[1]}, path)
    assert not path.exists()
    save_safetensors({"a": w, "b": w.clone()}, path)  # deduplicated by the caller: fine


def test_refuses_bad_arguments(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(MiniBertError, match="dtype torch.complex64"):
        save_safetensors({"c": torch.zeros(2, dtype=torch.complex64)}, path)
    with pytest.raises(MiniBertError, match="not a tensor"):
        save_safetensors({"a": [1, 2]}, path)
    with pytest.raises(MiniBertError, match="metadata"):
        save_safetensors({}, path, metadata={"a": 1})
    with pytest.raises(MiniBertError, match="__metadata__"):
        save_safetensors({"__metadata__": torch.zeros(1)}, path)
    with pytest.raises(MiniBertError, match="cannot write"):
        save_safetensors({}, tmp_path / "no" / "such" / "folder.safetensors")


def test_atomic_write_keeps_old_file_on_error(tmp_path):
    path = tmp_path / "ckpt.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_write(path) as f:
            f.write(b"half of the new")
            raise RuntimeError("crash")
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["ckpt.bin"]  # no temporary left behind
    with atomic_write(path) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new"
    with atomic_write(tmp_path / "t.json", "w") as f:
        f.write("ünï")
    assert (tmp_path / "t.json").read_text(encoding="utf-8") == "ünï"
    assert sorted(os.listdir(tmp_path)) == ["ckpt.bin", "t.json"]


# ---------------------------------------------------------------------------
# Bad files: each must raise MiniBertError naming the file, on one line
# ---------------------------------------------------------------------------

F32_2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


def bad_files(tmp_path):
    """(what it tests, path, expected words in the message)."""
    good = tmp_path / "good.safetensors"
    save_safetensors({"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)}, good)
    blob = good.read_bytes()
    cases = []

    def case(label, words, header=None, data=b"", raw=None, header_length=None):
        path = tmp_path / f"bad-{label}.safetensors"
        if raw is not None:
            path.write_bytes(raw)
        else:
            write_raw(path, header, data, header_length)
        cases.append((label, path, words))

    case("empty-file", "too short", raw=b"")
    case("truncated-length", "too short", raw=blob[:5])
    case("truncated-header", "runs past the end", raw=blob[:20])
    case("truncated-data", "run past the end", raw=blob[:-3])
    case("header-too-large", "limit", raw=struct.pack("<Q", 2**40) + b"{}")
    case("header-length-past-end", "runs past the end", header=b"{}", header_length=1000)
    case("bad-json", "not valid JSON", header=b"{not json")
    case("bad-utf8", "UTF-8", header=b'{"\xff": 1}')
    case("not-brace", "starting with", header=b"[]")
    case("not-object", "starting with", header=b" {}")
    case("offsets-out-of-range", "run past the end",
         header={"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1000]}}, data=b"\0" * 8)
    case("offsets-reversed", "end before",
         header={"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, data=b"\0" * 8)
    case("overlap", "overlaps",
         header={"a": F32_2, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
         data=b"\0" * 12)
    case("hole", "hole",
         header={"a": F32_2, "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]}},
         data=b"\0" * 20)
    case("trailing-bytes", "trailing", header={"a": F32_2}, data=b"\0" * 12)
    case("wrong-dtype", "unsupported dtype 'F33'",
         header={"a": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}}, data=b"\0" * 8)
    case("duplicate-key", "twice",
         header=b'{"a":' + json.dumps(F32_2).encode() + b',"a":' + json.dumps(F32_2).encode()
         + b"}", data=b"\0" * 8)
    case("size-mismatch", "needs 12 bytes",
         header={"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, data=b"\0" * 8)
    case("negative-dim", "shape",
         header={"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, data=b"\0" * 8)
    case("bool-dim", "shape",
         header={"a": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, data=b"\0" * 4)
    case("huge-empty-shape", "too large",
         header={"a": {"dtype": "F32", "shape": [0, 2**62, 2**62], "data_offsets": [0, 0]}})
    case("missing-field", "missing field 'shape'",
         header={"a": {"dtype": "F32", "data_offsets": [0, 8]}}, data=b"\0" * 8)
    case("entry-not-object", "expected an object", header={"a": [1, 2]})
    case("metadata-not-strings", "__metadata__",
         header={"__metadata__": {"k": 1}, "a": F32_2}, data=b"\0" * 8)
    case("header-is-list-in-braces", "not valid JSON", header=b"{[1, 2]}")
    return cases


def test_bad_files_raise_minibert_error(tmp_path):
    for label, path, words in bad_files(tmp_path):
        with pytest.raises(MiniBertError) as info:
            load_safetensors(path)
        message = str(info.value)
        assert str(path) in message, (label, message)
        assert words in message, (label, message)
        assert "\n" not in message, (label, message)


def test_missing_file(tmp_path):
    with pytest.raises(MiniBertError, match=re.escape(str(tmp_path / "nope.safetensors"))):
        load_safetensors(tmp_path / "nope.safetensors")


def test_unusual_but_valid_files(tmp_path):
    # Offsets listed out of order, tensors not sorted, and header padding: all fine.
    header = {"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
              "__metadata__": None,
              "a": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}
    text = json.dumps(header).encode() + b"   "
    path = write_raw(tmp_path / "odd.safetensors", text, struct.pack("<2f", 1.0, 2.0))
    loaded = load_safetensors(path)
    assert list(loaded) == ["b", "a"]
    assert loaded["a"].shape == () and loaded["a"].item() == 1.0
    assert loaded["b"].tolist() == [2.0]
    # Bool bytes other than 0/1 read as True.
    header = {"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]}}
    path = write_raw(tmp_path / "bool.safetensors", header, b"\x00\x01\x07")
    assert load_safetensors(path)["m"].tolist() == [False, True, True]


# ---------------------------------------------------------------------------
# Fuzzing: mutated files give tensors or MiniBertError, nothing else
# ---------------------------------------------------------------------------

def mutate(blob, rng):
    n = int.from_bytes(blob[:8], "little")
    kind = rng.randrange(7)
    data = bytearray(blob)
    if kind == 0:  # flip a few bytes anywhere
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:  # truncate
        del data[rng.randrange(len(data)):]
    elif kind == 2:  # append junk
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == 3:  # nudge the header length
        data[:8] = max(0, n + rng.randint(-9, 9)).to_bytes(8, "little")
    elif kind == 4:  # change one digit inside the header
        digits = [i for i in range(8, 8 + n) if chr(data[i]).isdigit()]
        data[rng.choice(digits)] = ord(str(rng.randrange(10)))
    else:  # rewrite one field of the parsed header with a plausible wrong value
        header = json.loads(blob[8:8 + n])
        name = rng.choice([k for k in header if k != "__metadata__"])
        field = rng.choice(["dtype", "shape", "data_offsets"])
        header[name][field] = rng.choice([
            "F32", "BF16", "I64", "BOOL", "X", 3, -1, None, [], [0], [1, 2], [2**64, 1],
            [-4, 4], [0, 2**70], "shape", {"a": 1}, [1.5, 2], [True, 4], [0, 0],
        ])
        text = json.dumps(header).encode()
        data = bytearray(len(text).to_bytes(8, "little") + text + blob[8 + n:])
    return bytes(data)


def test_fuzz_mutated_files(tmp_path):
    g = torch.Generator().manual_seed(1)
    seeds = []
    for i, tensors in enumerate([
        {"a": torch.randn(2, 3, generator=g), "b": torch.arange(5, dtype=torch.int64),
         "c": torch.randn(4, generator=g).to(torch.bfloat16), "m": torch.tensor([True, False])},
        {"s": torch.tensor(2.0, dtype=torch.float16), "e": torch.zeros(0, 3),
         "u": torch.arange(9, dtype=torch.uint8).reshape(3, 3)},
    ]):
        path = tmp_path / f"seed{i}.safetensors"
        save_safetensors(tensors, path, metadata={"format": "pt"})
        seeds.append(path.read_bytes())

    rng = random.Random(1234)
    path = tmp_path / "fuzz.safetensors"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(2000):
        path.write_bytes(mutate(rng.choice(seeds), rng))
        try:
            ours = load_safetensors(path)
        except MiniBertError as e:
            assert str(path) in str(e)
            outcomes["error"] += 1
            continue
        outcomes["ok"] += 1
        # Whatever we accept, the reference accepts too, with the same bits.
        reference = safetensors_torch.load_file(path)
        assert set(reference) == set(ours)
        for name, tensor in ours.items():
            expected = reference[name]
            if expected.dtype == torch.bool:
                expected = expected.view(torch.uint8) != 0
            assert same_bytes(tensor, expected), name
    assert outcomes["ok"] > 50 and outcomes["error"] > 500, outcomes


# ---------------------------------------------------------------------------
# PyTorch .bin
# ---------------------------------------------------------------------------

def test_torch_bin_round_trip(tmp_path):
    state = {"a": torch.randn(3, 4), "b": torch.arange(3), "c": torch.ones(2, dtype=torch.bfloat16)}
    path = tmp_path / "pytorch_model.bin"
    torch.save(state, path)
    loaded = load_torch_bin(path)
    assert list(loaded) == list(state)
    for name in state:
        assert same_bytes(loaded[name], state[name])

    for wrapper in ("state_dict", "model"):
        wrapped = tmp_path / f"{wrapper}.pt"
        torch.save({wrapper: state, "epoch": 3, "optimizer": {"lr": 0.1}}, wrapped)
        assert list(load_torch_bin(wrapped)) == list(state)


class NotAllowed:
    pass


def test_torch_bin_bad_files(tmp_path):
    good = tmp_path / "good.bin"
    torch.save({"a": torch.randn(100)}, good)
    blob = good.read_bytes()

    cases = {
        "garbage.bin": b"this is not a checkpoint at all",
        "truncated.bin": blob[: len(blob) // 2],
        "empty.bin": b"",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    torch.save({"a": NotAllowed()}, tmp_path / "pickled-class.bin")  # weights_only refuses it
    torch.save({"a": torch.zeros(1), "step": 3}, tmp_path / "not-a-tensor.bin")
    torch.save([torch.zeros(1)], tmp_path / "list.bin")

    for name in [*cases, "pickled-class.bin", "not-a-tensor.bin", "list.bin", "missing.bin"]:
        path = tmp_path / name
        with pytest.raises(MiniBertError) as info:
            load_torch_bin(path)
        assert str(path) in str(info.value), name
        assert "\n" not in str(info.value), name


# ---------------------------------------------------------------------------
# Regressions found by fuzzing (tests/test_fuzz.py) and fault injection
# ---------------------------------------------------------------------------

def one_line_error(load, *words):
    """The MiniBertError `load()` raises: one line, containing every word."""
    with pytest.raises(MiniBertError) as info:
        load()
    message = str(info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, (word, message)
    return message


def test_config_json_nested_too_deeply(tmp_path):
    # json recurses once per [ and raised RecursionError; an over-long integer
    # raised ValueError from Python's limit on integer digits.
    folder = tmp_path / "model"
    save_tiny_model(folder)
    config = folder / "config.json"
    config.write_text('{"vocab_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line_error(lambda: load_pretrained(folder), str(config), "nested too deeply")
    config.write_text('{"vocab_size": ' + "1" * 5000 + "}")
    one_line_error(lambda: read_json_object(config), str(config), "more digits")


def test_header_with_a_5000_digit_integer(tmp_path):
    header = b'{"a":{"dtype":"F32","shape":[' + b"1" * 5000 + b'],"data_offsets":[0,4]}}'
    path = write_raw(tmp_path / "digits.safetensors", header, b"\0" * 4)
    one_line_error(lambda: load_safetensors(path), str(path), "more digits")


def folder_with_weight_as(tmp_path, dtype, file_name):
    """A tiny model folder whose query weight of layer 0 is stored as `dtype`
    (same shape), in `file_name`. Returns (folder, tensor name)."""
    folder = tmp_path / "model"
    save_tiny_model(folder)
    tensors = load_safetensors(folder / "model.safetensors")
    name = "bert.encoder.layer.0.attention.self.query.weight"
    tensors[name] = tensors[name].to(dtype)
    (folder / "model.safetensors").unlink()
    if file_name == "model.safetensors":
        save_safetensors(tensors, folder / file_name)
    else:
        torch.save(tensors, folder / file_name)
    return folder, name


@pytest.mark.parametrize("dtype, file_name", [
    (torch.int32, "model.safetensors"), (torch.uint32, "model.safetensors"), (torch.bool, "model.safetensors"),
    (torch.int64, "pytorch_model.bin"), (torch.complex64, "pytorch_model.bin"),
])
def test_integer_and_complex_weights_are_refused(tmp_path, dtype, file_name):
    # copy_ turned these into float weights without a word.
    folder, name = folder_with_weight_as(tmp_path, dtype, file_name)
    dtype_name = str(dtype).removeprefix("torch.")
    one_line_error(lambda: load_pretrained(folder), str(folder / file_name), repr(name), f"dtype {dtype_name};")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_float_weights_load(tmp_path, dtype):
    folder, name = folder_with_weight_as(tmp_path, dtype, "model.safetensors")
    stored = load_safetensors(folder / "model.safetensors")[name]
    loaded = load_pretrained(folder).encoder.layers[0].attention.query.weight
    assert loaded.dtype == torch.float32 and torch.equal(loaded, stored.float())


def pytorch_bin_and_member(tmp_path, tensor):
    """torch.save({"w": tensor}) and the zip member holding w's bytes:
    (path, member name, (start, end) of its data in the file)."""
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": tensor}, path)
    blob = path.read_bytes()
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
    # local file header: 30 fixed bytes, then the name and the extra field
    name_length, extra_length = struct.unpack_from("<HH", blob, info.header_offset + 26)
    start = info.header_offset + 30 + name_length + extra_length
    return path, info.filename, (start, start + info.compress_size)


def test_torch_bin_flipped_data_byte_is_caught(tmp_path):
    tensor = torch.arange(64.0)
    path, member, (start, end) = pytorch_bin_and_member(tmp_path, tensor)
    blob = bytearray(path.read_bytes())
    blob[(start + end) // 2] ^= 0x10
    path.write_bytes(blob)
    # torch.load itself does not look at the CRC: it gives a different tensor.
    assert not torch.equal(torch.load(path, weights_only=True)["w"], tensor)
    one_line_error(lambda: load_torch_bin(path), str(path), repr(member), "CRC")


def test_torch_bin_meta_and_sparse_tensors(tmp_path):
    # These loaded, then failed with NotImplementedError / RuntimeError on copy.
    path = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.empty(4, 3, device="meta")}, path)
    one_line_error(lambda: load_torch_bin(path), str(path), "'w'", "meta tensor")
    torch.save({"w": torch.eye(3).to_sparse()}, path)
    one_line_error(lambda: load_torch_bin(path), str(path), "'w'", "torch.sparse_coo", "dense")


class RunsCode:
    def __reduce__(self):
        return (os.system, ("true",))


def test_torch_bin_refused_global_is_named(tmp_path):
    # torch's message was cut at 200 characters, before the global's name, and
    # began with its advice to turn weights_only off.
    path = tmp_path / "pytorch_model.bin"
    for obj, global_name in [(NotAllowed(), f"{__name__}.NotAllowed"), (RunsCode(), ".system")]:
        torch.save({"w": obj}, path)
        message = one_line_error(lambda: load_torch_bin(path), str(path), global_name, "weights_only=True refuses")
        assert "weights_only=False" not in message and "allowlist" not in message.lower(), message


def test_torch_bin_without_checksums(tmp_path):
    # Older PyTorch wrote a bare pickle, with no CRC anywhere: read as it is.
    tensor = torch.arange(6.0)
    legacy = tmp_path / "legacy.bin"
    torch.save({"w": tensor}, legacy, _use_new_zipfile_serialization=False)
    assert torch.equal(load_torch_bin(legacy)["w"], tensor)
    # Neither a zip nor a pickle: refused before torch.load sees it.
    (tmp_path / "text.bin").write_bytes(b"this is not a checkpoint at all")
    one_line_error(lambda: load_torch_bin(tmp_path / "text.bin"), "not a readable PyTorch checkpoint")
    # A zip written with its CRCs switched off has nothing to check.
    config = pytest.importorskip("torch.utils.serialization").config
    config.save.compute_crc32 = False
    try:
        torch.save({"w": tensor}, tmp_path / "no-crc.bin")
    finally:
        config.save.compute_crc32 = True
    assert torch.equal(load_torch_bin(tmp_path / "no-crc.bin")["w"], tensor)


# ---------------------------------------------------------------------------
# A module's weights: save_weights, load_weights
# ---------------------------------------------------------------------------

def test_weights_round_trip_exactly(tmp_path):
    torch.manual_seed(0)
    saved = nn.Linear(4, 3)
    save_weights(saved, tmp_path / "w.safetensors")
    loaded = load_weights(nn.Linear(4, 3), tmp_path / "w.safetensors", "a 4 -> 3 layer")
    assert torch.equal(loaded.weight, saved.weight) and torch.equal(loaded.bias, saved.bias)
    assert [p.name for p in tmp_path.iterdir()] == ["w.safetensors"]          # no temporary file left


def test_weights_of_another_shape_name_the_file_what_and_the_tensor(tmp_path):
    save_weights(nn.Linear(4, 3), tmp_path / "w.safetensors")
    with pytest.raises(MiniBertError) as error:
        load_weights(nn.Linear(4, 2), tmp_path / "w.safetensors", "the sst2 head with 2 labels")
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'w.safetensors'}: does not fit the sst2 head with 2 labels (size mismatch "
                              f"for weight")


def test_integer_weights_are_refused_not_cast(tmp_path):
    save_safetensors({"weight": torch.ones(3, 4, dtype=torch.int64), "bias": torch.zeros(3)}, tmp_path / "w.safetensors")
    with pytest.raises(MiniBertError, match=r"w.safetensors: tensor 'weight' has dtype int64; expected a floating"):
        load_weights(nn.Linear(4, 3), tmp_path / "w.safetensors", "a 4 -> 3 layer")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the process's mapped size from /proc")
def test_weights_larger_than_the_address_space_limit_leaves_are_one_line_before_allocating(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "model.safetensors"
    count = 2**28                                                     # 1 GiB of float32, as a sparse file
    header = json.dumps({"w": {"dtype": "F32", "shape": [count], "data_offsets": [0, 4 * count]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * count)
    program = (
        "import resource, sys\n"
        "from minibert.checkpoints.safetensors import load_safetensors\n"
        "from minibert.support import MiniBertError\n"
        "mapped = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize:')) * 1024\n"
        "resource.setrlimit(resource.RLIMIT_AS, (mapped + 2**30, resource.RLIM_INFINITY))\n"   # 1 GiB more
        "try:\n"
        f"    load_safetensors({str(path)!r})\n"
        "except MiniBertError as e:\n"
        "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert re.fullmatch(rf"{re.escape(str(path))}: loading it needs about 3\.0 GB of address space, and this "
                        r"process's limit \(ulimit -v\) leaves 1\.0 GB; raise the limit\n", done.stdout), \
        (done.stdout, done.stderr[-2000:])
