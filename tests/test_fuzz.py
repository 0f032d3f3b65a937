"""Seeded mutation fuzzing of every file minibert reads.

Each reader gets CASES damaged copies of a good file: bytes flipped, cut off,
inserted or appended, and edits that only a parser notices (a JSON value
rewritten, an index block changed and its checksum fixed). Every case must end
in one of two ways:

  * a MiniBertError, on one line, naming the file (or another file of the
    model's folder: a damaged config.json can be what makes the weights
    file disagree); or
  * a successful load that gives what the original gives: the same model
    outputs on a fixed input (weights and configs), the same encodings of
    fixed sentences (tokenizers).

Where a change cannot be noticed, the load must instead give what the file
now says:

  * a flipped byte in safetensors tensor data (the format has no checksum):
    the model holds exactly the bytes the reference `safetensors` reader reads;
  * a config value that changes the model (layer_norm_eps, hidden_act, ...):
    the model's config holds the file's value, and the model runs;
  * a vocabulary entry changed: the tokenizer's vocabulary is the file's.

Where a format has a checksum over the data (a TensorFlow data shard, the
members of a .bin zip archive), a changed data byte must be caught.

`pytest -s tests/test_fuzz.py` prints how each reader's cases ended.
"""

import json
import random
import shutil
import struct
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest
import torch

from minibert.checkpoints import huggingface_state_dict, load_pretrained, tf_bundle
from minibert.support import MiniBertError
from minibert.tokenization import load_tokenizer
from test_tf_bundle import block_layout, fix_crc, rewrite
from tiny_models import SENTENCES, save_tiny_model

CASES = 200  # per reader
FIXTURES = Path(__file__).parent / "fixtures"
TEXTS = SENTENCES[:4] + ["The Cat SAT on the mat!", "a [MASK] ran in the park", "zebra ünïcode 猫 \t tab"]

# Raw JSON text to put in place of a config, header or tokenizer value: wrong
# types, out-of-range and non-finite numbers, a 5,000-digit integer (past
# Python's limit on integer digits) and 100,000 nested lists (past its recursion limit).
JSON_VALUES = ["0", "-1", "1", "2", "3", "33", "2.5", "1e-05", "1e400", "-1e400", "NaN", "Infinity",
               "true", "false", "null", '"gelu"', '"gelu_new"', '"relu"', '"x"', '""', "[]", "[0, 1]",
               "[1, 0]", "{}", '"bert"', '"albert"', "4294967297", "1" * 5000, "[" * 100_000 + "]" * 100_000]


# ---------------------------------------------------------------------------
# Mutations: each takes the original bytes and a random.Random
# ---------------------------------------------------------------------------

def flip(data, rng, start=0, end=None):
    """XOR 1-4 distinct bytes of data[start:end] with non-zero masks (each one changes)."""
    data = bytearray(data)
    span = range(start, len(data) if end is None else end)
    for at in rng.sample(span, min(len(span), rng.randint(1, 4))):
        data[at] ^= rng.randrange(1, 256)
    return bytes(data)


def random_bytes(rng, low=1, high=16):
    return bytes(rng.randrange(256) for _ in range(rng.randint(low, high)))


def truncate(data, rng, start=0):
    return data[:rng.randrange(start, len(data))]


def insert(data, rng, start=0):
    at = rng.randrange(start, len(data) + 1)
    return data[:at] + random_bytes(rng) + data[at:]


def append(data, rng):
    return data + random_bytes(rng)


def with_json_value(values, path, raw):
    """JSON text of `values` with the value at `path` (a list of keys) replaced by
    the raw JSON text `raw` (which json.dumps could not always write, e.g. a
    5,000-digit integer or 100,000 nested lists)."""
    values = json.loads(json.dumps(values))  # a deep copy
    target = values
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = "\0VALUE\0"
    return json.dumps(values, ensure_ascii=False).replace('"\\u0000VALUE\\u0000"', raw)


# ---------------------------------------------------------------------------
# Running cases
# ---------------------------------------------------------------------------

def fuzz(path, mutations, load, check_loaded, seed, cases=CASES):
    """Write `cases` mutated files to `path` and load each.

    mutations: {kind: rng -> (bytes, expect)}, expect being "error" (a checksum
    covers the change), "load" (nothing can notice it) or "either".
    check_loaded(result, data, where) checks a successful load.
    Returns a Counter of (kind, outcome) and prints a summary line.
    """
    original = path.read_bytes()
    rng = random.Random(seed)
    tally = Counter()
    started = time.perf_counter()
    for case in range(cases):
        kind = rng.choice(sorted(mutations))
        data, expect = mutations[kind](rng)
        rewrite(path, data)
        where = f"{path.name} case {case} ({kind})"
        try:
            result = load()
        except MiniBertError as e:
            message = str(e)
            assert str(path.parent) in message and "\n" not in message, f"{where}: {message!r}"
            assert expect != "load", f"{where}: refused a change nothing can notice: {message}"
            tally[kind, "error"] += 1
            continue
        except Exception as e:  # anything else is a bug in a reader
            raise AssertionError(f"{where}: {type(e).__name__}: {str(e)[:300]}") from e
        assert expect != "error", f"{where}: loaded, but a checksum covers the changed bytes"
        check_loaded(result, data, where)
        tally[kind, "loaded"] += 1
    rewrite(path, original)
    seconds = time.perf_counter() - started
    errors = sum(n for (_, outcome), n in tally.items() if outcome == "error")
    by_kind = ", ".join(f"{kind} {outcome} {n}" for (kind, outcome), n in sorted(tally.items()))
    print(f"\n{path.name}: {cases} cases in {seconds:.2f} s: {errors} MiniBertError, "
          f"{cases - errors} loaded ({by_kind})")
    return tally


def model_outputs(model):
    """Every output of `model` on a fixed padded batch of two rows."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, model.config.vocab_size, (2, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    return [*out.hidden_states, out.pooled_output, out.mlm_logits, out.pair_logits]


def same_outputs(a, b):
    """Bit-for-bit equal outputs (None where a model has no such head)."""
    return len(a) == len(b) and all((x is None) == (y is None) and (x is None or torch.equal(x, y))
                                    for x, y in zip(a, b))


def same_bits(a, b):
    """Equal dtype, shape and bytes (NaN-safe)."""
    def as_bytes(t):
        return t.contiguous().reshape(-1).view(torch.uint8)
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(as_bytes(a), as_bytes(b))


def check_same_outputs(reference):
    """A check_loaded for weights: the model's outputs are the original model's."""
    def check(model, data, where):
        assert same_outputs(model_outputs(model), reference), f"{where}: loaded with different outputs"
    return check


# ---------------------------------------------------------------------------
# Fixtures: one tiny model in each format
# ---------------------------------------------------------------------------

@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run fastest on one thread; with more, on a busy machine each
    forward pass waits for the other threads (milliseconds become tenths of seconds)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """config.json + model.safetensors + vocab.txt of a tiny 2-layer BERT."""
    folder = tmp_path_factory.mktemp("fuzz") / "hf"
    save_tiny_model(folder, num_hidden_layers=2)
    return folder


def copy_folder(source, target):
    shutil.copytree(source, target)
    return target


# ---------------------------------------------------------------------------
# TensorFlow checkpoint: index (SSTable, CRC per block) and data (CRC per tensor)
# ---------------------------------------------------------------------------

def edit_block(index, rng, blocks):
    """Change 1-3 bytes inside one index block and fix the block's checksum,
    so the parser (not the checksum) has to notice."""
    index = bytearray(index)
    offset, size = rng.choice(blocks)
    for _ in range(rng.randint(1, 3)):
        index[offset + rng.randrange(size)] = rng.choice([0, 1, 3, 0x7F, 0x80, 0xFF, rng.randrange(256)])
    fix_crc(index, offset, size)
    return bytes(index)


def test_fuzz_tf_index(tmp_path):
    folder = copy_folder(FIXTURES / "tf_bert_tiny", tmp_path / "tf")
    path = folder / "bert_model.ckpt.index"
    original = path.read_bytes()
    blocks = block_layout(original)
    mutations = {
        "flip": lambda rng: (flip(original, rng), "either"),
        "truncate": lambda rng: (truncate(original, rng), "either"),
        "insert": lambda rng: (insert(original, rng), "either"),
        "block edit": lambda rng: (edit_block(original, rng, blocks), "either"),
    }
    reference = model_outputs(load_pretrained(folder))
    tally = fuzz(path, mutations, lambda: load_pretrained(folder), check_same_outputs(reference), seed=1)
    assert tally["block edit", "error"] > 20


def test_fuzz_tf_data(tmp_path):
    folder = copy_folder(FIXTURES / "tf_bert_tiny", tmp_path / "tf")
    path = folder / "bert_model.ckpt.data-00000-of-00001"
    original = path.read_bytes()
    _, entries = tf_bundle._read_index(str(folder / "bert_model.ckpt"))
    ranges = [(e["offset"], e["offset"] + e["size"]) for e in entries.values() if e["size"]]

    def expect(data):
        """Every tensor's bytes are under its CRC-32C: any change to them must be caught."""
        return "error" if any(data[a:b] != original[a:b] for a, b in ranges) else "either"

    def flip_in_tensor(rng):
        start, end = rng.choice(ranges)
        return flip(original, rng, start, end)

    def expecting(make):
        """A mutation that says, from the bytes it made, whether they must fail."""
        def mutate(rng):
            data = make(rng)
            return data, expect(data)
        return mutate

    mutations = {
        "flip in a tensor": expecting(flip_in_tensor),
        "truncate": expecting(lambda rng: truncate(original, rng)),
        "insert": expecting(lambda rng: insert(original, rng)),
        "append": expecting(lambda rng: append(original, rng)),
    }
    reference = model_outputs(load_pretrained(folder))
    tally = fuzz(path, mutations, lambda: load_pretrained(folder), check_same_outputs(reference), seed=2)
    assert tally["flip in a tensor", "error"] > 20 and tally["append", "loaded"] > 0


# ---------------------------------------------------------------------------
# safetensors: header (JSON, checked field by field) and data (no checksum)
# ---------------------------------------------------------------------------

def safetensors_parts(blob):
    n = int.from_bytes(blob[:8], "little")
    return n, json.loads(blob[8:8 + n]), blob[8 + n:]


def test_fuzz_safetensors_header(tmp_path, hf_folder):
    folder = copy_folder(hf_folder, tmp_path / "hf")
    path = folder / "model.safetensors"
    original = path.read_bytes()
    n, header, data = safetensors_parts(original)
    names = [k for k in header if k != "__metadata__"]

    def with_header(text):
        text = text.encode()
        return len(text).to_bytes(8, "little") + text + data

    def rewrite_field(rng):
        raw = rng.choice(JSON_VALUES + ['"F32"', '"F16"', '"BF16"', '"I32"', '"U32"', '"F64"', '"BOOL"',
                                        "[32]", "[0, 0]", "[0, 4]", "[2, 16]", "[128, 0]"])
        field = [rng.choice(names), rng.choice(["dtype", "shape", "data_offsets"])]
        return with_header(with_json_value(header, field, raw))

    def change_digit(rng):
        blob = bytearray(original)
        digits = [i for i in range(8, 8 + n) if chr(blob[i]).isdigit()]
        blob[rng.choice(digits)] = ord(str(rng.randrange(10)))
        return bytes(blob)

    def nudge_length(rng):
        return max(0, n + rng.randint(-9, 9)).to_bytes(8, "little") + original[8:]

    mutations = {
        "flip in header": lambda rng: (flip(original, rng, 0, 8 + n), "either"),
        "digit": lambda rng: (change_digit(rng), "either"),
        "field": lambda rng: (rewrite_field(rng), "either"),
        "metadata": lambda rng: (with_header(with_json_value(header, ["__metadata__"], rng.choice(JSON_VALUES))),
                                 "either"),
        "header length": lambda rng: (nudge_length(rng), "either"),
        "truncate in header": lambda rng: (original[:rng.randrange(8 + n)], "either"),
    }
    reference = model_outputs(load_pretrained(folder))
    tally = fuzz(path, mutations, lambda: load_pretrained(folder), check_same_outputs(reference), seed=3)
    assert sum(n for (_, outcome), n in tally.items() if outcome == "error") > CASES // 2


def test_fuzz_safetensors_data(tmp_path, hf_folder):
    safetensors_torch = pytest.importorskip("safetensors.torch")
    folder = copy_folder(hf_folder, tmp_path / "hf")
    path = folder / "model.safetensors"
    original = path.read_bytes()
    data_start = 8 + int.from_bytes(original[:8], "little")

    def holds_the_file_bytes(model, data, where):
        """No checksum: the model must hold exactly what the reference reader reads."""
        expected = safetensors_torch.load_file(path)
        ours = huggingface_state_dict(model)
        assert set(ours) == set(expected), where
        for name, tensor in ours.items():
            assert same_bits(tensor, expected[name]), f"{where}: {name}"

    mutations = {
        # Flipped data bytes load (there is nothing to catch them with); any
        # change in length breaks the exact tiling of the data section.
        "flip in data": lambda rng: (flip(original, rng, data_start), "load"),
        "truncate data": lambda rng: (truncate(original, rng, data_start), "error"),
        "insert in data": lambda rng: (insert(original, rng, data_start), "error"),
        "append": lambda rng: (append(original, rng), "error"),
    }
    fuzz(path, mutations, lambda: load_pretrained(folder), holds_the_file_bytes, seed=4)


# ---------------------------------------------------------------------------
# pytorch_model.bin: a zip archive with a CRC-32 per member
# ---------------------------------------------------------------------------

def zip_member_data(path):
    """[(start, end)] byte ranges of every member's data in the zip at `path`."""
    blob = path.read_bytes()
    ranges = []
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            # Local file header: 30 fixed bytes, then the name and the extra field.
            name_length, extra_length = struct.unpack_from("<HH", blob, info.header_offset + 26)
            start = info.header_offset + 30 + name_length + extra_length
            ranges.append((start, start + info.compress_size))
    return [r for r in ranges if r[0] < r[1]]


def test_fuzz_torch_bin(tmp_path, hf_folder):
    folder = tmp_path / "bin"
    folder.mkdir()
    shutil.copy(hf_folder / "config.json", folder / "config.json")
    torch.save(huggingface_state_dict(load_pretrained(hf_folder)), folder / "pytorch_model.bin")
    path = folder / "pytorch_model.bin"
    original = path.read_bytes()
    ranges = zip_member_data(path)

    def flip_in_member(rng):
        start, end = rng.choice(ranges)
        return flip(original, rng, start, end), "error"

    def flip_anywhere(rng):
        data = flip(original, rng)
        in_data = any(data[a:b] != original[a:b] for a, b in ranges)
        return data, "error" if in_data else "either"

    mutations = {
        "flip in member data": flip_in_member,
        "flip anywhere": flip_anywhere,
        "truncate": lambda rng: (truncate(original, rng), "either"),
        "insert": lambda rng: (insert(original, rng), "either"),
        "append": lambda rng: (append(original, rng), "either"),
    }
    reference = model_outputs(load_pretrained(folder))
    tally = fuzz(path, mutations, lambda: load_pretrained(folder), check_same_outputs(reference), seed=5)
    assert tally["flip in member data", "error"] > 20


# ---------------------------------------------------------------------------
# config.json
# ---------------------------------------------------------------------------

IGNORED_IN_EVAL = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")


def test_fuzz_config_json(tmp_path, hf_folder):
    folder = copy_folder(hf_folder, tmp_path / "hf")
    path = folder / "config.json"
    original = path.read_bytes()
    values = json.loads(original)
    keys = sorted(values) + ["layer_order", "embedding_size", "num_hidden_groups", "layer_norm_eps", "pad_token_id"]
    reference_model = load_pretrained(folder)
    reference = model_outputs(reference_model)
    reference_state = reference_model.state_dict()
    reference_config = reference_model.config.to_dict()

    def says_what_the_file_says(model, data, where):
        """Same weights; a config value that differs from the original's is the
        file's; the model runs; and with no such value, the outputs are the same."""
        state = model.state_dict()
        assert all(same_bits(state[k], reference_state[k]) for k in reference_state), where
        file_values = json.loads(data)
        config = model.config.to_dict()
        changed = {k for k in config if config[k] != reference_config[k] and k not in IGNORED_IN_EVAL}
        for key in changed & set(file_values):
            assert config[key] == file_values[key], f"{where}: {key} is {config[key]!r}, not the file's"
        outputs = model_outputs(model)
        if not changed:
            assert same_outputs(outputs, reference), f"{where}: loaded with different outputs"

    def delete_key(rng):
        smaller = dict(values)
        del smaller[rng.choice(sorted(values))]
        return json.dumps(smaller).encode()

    mutations = {
        "flip": lambda rng: (flip(original, rng), "either"),
        "truncate": lambda rng: (truncate(original, rng), "either"),
        "insert": lambda rng: (insert(original, rng), "either"),
        "value": lambda rng: (with_json_value(values, [rng.choice(keys)], rng.choice(JSON_VALUES)).encode(), "either"),
        "delete key": lambda rng: (delete_key(rng), "either"),
    }
    fuzz(path, mutations, lambda: load_pretrained(folder), says_what_the_file_says, seed=6)


# ---------------------------------------------------------------------------
# Tokenizer files: vocab.txt and tokenizer.json
# ---------------------------------------------------------------------------

def encodings(tokenizer):
    return [tokenizer.encode(text).ids for text in TEXTS]


def check_tokenizer(reference, file_says):
    """A loaded tokenizer holds the file's vocabulary (ids 0..V-1, once each) and
    casing, and encodes as the original does when both are the original's.
    file_says(data) -> (vocabulary, do_lower_case or None where the file is silent)."""
    reference_vocab, reference_encodings = reference.backend.get_vocab(), encodings(reference)

    def check(tokenizer, data, where):
        vocab, lower = file_says(data)
        assert tokenizer.backend.get_vocab() == vocab, f"{where}: the tokenizer's vocabulary is not the file's"
        # A model's embedding matrix has one row per id 0..V-1: an id twice or
        # past the end would crash it or merge two tokens.
        assert sorted(vocab.values()) == list(range(len(vocab))), f"{where}: ids are not 0..{len(vocab) - 1}"
        assert lower is None or tokenizer.do_lower_case == lower, f"{where}: casing is not the file's"
        ids = encodings(tokenizer)
        if vocab == reference_vocab and tokenizer.do_lower_case == reference.do_lower_case:
            assert ids == reference_encodings, f"{where}: the same vocabulary encodes differently"
        else:  # a different vocabulary: the ids must still be its own
            assert all(0 <= i < len(vocab) for row in ids for i in row), f"{where}: an id outside the vocabulary"
    return check


def test_fuzz_vocab_txt(tmp_path, hf_folder):
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    shutil.copy(hf_folder / "vocab.txt", folder / "vocab.txt")
    (folder / "tokenizer_config.json").write_text('{"do_lower_case": true}\n')
    path = folder / "vocab.txt"
    original = path.read_bytes()
    lines = original.decode().split("\n")[:-1]
    reference = load_tokenizer(folder)

    def vocab_in_file(data):
        """vocab.txt's rule (Google's load_vocab): token = the stripped line, id =
        line number. The file is read as text, so "\r\n" and a lone "\r" end a
        line too (as in transformers' load_vocab)."""
        tokens = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n").split("\n")
        if tokens[-1] == "":
            tokens.pop()
        return {token.strip(): i for i, token in enumerate(tokens)}, True  # tokenizer_config.json says so

    def edit_lines(rng):
        edited = list(lines)
        i, j = rng.randrange(len(edited)), rng.randrange(len(edited))
        edit = rng.randrange(5)
        if edit == 0:
            edited.insert(j, edited[i])  # a token twice
        elif edit == 1:
            del edited[i]
        elif edit == 2:
            edited[i], edited[j] = edited[j], edited[i]
        elif edit == 3:
            edited[i] = rng.choice([" ", "\t", "\r", "\u00a0", "\u3000"]) + edited[i] + rng.choice(["", " ", "\r"])
        else:
            edited.insert(i, rng.choice(["", " ", "[UNK]", "the", "##a", "\ufeff", "\x00"]))
        return ("\n".join(edited) + "\n").encode()

    mutations = {
        "flip": lambda rng: (flip(original, rng), "either"),
        "truncate": lambda rng: (truncate(original, rng), "either"),
        "insert": lambda rng: (insert(original, rng), "either"),
        "line edit": lambda rng: (edit_lines(rng), "either"),
    }
    fuzz(path, mutations, lambda: load_tokenizer(folder), check_tokenizer(reference, vocab_in_file), seed=7)


def test_fuzz_tokenizer_json(tmp_path, hf_folder):
    folder = tmp_path / "tokenizer"
    load_tokenizer(hf_folder).save(folder)
    for name in ("vocab.txt", "tokenizer_config.json"):  # tokenizer.json alone
        (folder / name).unlink()
    path = folder / "tokenizer.json"
    original = path.read_bytes()
    spec = json.loads(original)
    tokens = sorted(spec["model"]["vocab"])
    reference = load_tokenizer(folder)

    def vocab_in_file(data):
        spec = json.loads(data)
        normalizer = spec.get("normalizer")
        lowercase = normalizer.get("lowercase") if isinstance(normalizer, dict) else None
        return spec["model"]["vocab"], lowercase if isinstance(lowercase, bool) else None

    def edit(rng):
        where = rng.choice([["model", "vocab", rng.choice(tokens)], ["model", "vocab", rng.choice(tokens)],
                            ["model", "type"], ["model", "unk_token"], ["model"], ["normalizer", "lowercase"],
                            ["normalizer"], ["pre_tokenizer"], ["added_tokens"]])
        return with_json_value(spec, where, rng.choice(JSON_VALUES + ['"WordPiece"', '"BPE"'])).encode()

    mutations = {
        "flip": lambda rng: (flip(original, rng), "either"),
        "truncate": lambda rng: (truncate(original, rng), "either"),
        "insert": lambda rng: (insert(original, rng), "either"),
        "json edit": lambda rng: (edit(rng), "either"),
    }
    fuzz(path, mutations, lambda: load_tokenizer(folder), check_tokenizer(reference, vocab_in_file), seed=8)
