"""Google's archives under injected faults: corrupt archives, bad cached
folders, and a zip bomb.

Uses the local HTTP server and cache of test_hub.py (no internet).
"""

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from minibert.checkpoints import load_pretrained
from minibert.support import hub
from minibert.support import MiniBertError
from minibert.support.hub import ByteBudget, copy_member, resolve_model_dir, unpack_archive
from minibert.tokenization import load_tokenizer
from test_hub import (  # noqa: F401, F811 (server and cache are the shared fixtures)
    ALBERT_FILES, ALBERT_NAME, ALBERT_PATH, ALBERT_TAR, BERT_FILES, BERT_FOLDER, BERT_NAME, BERT_PATH,
    BERT_ZIP, CKPT_BYTES, assert_unpacked, cache, leftovers, make_zip, server)


REPO = Path(__file__).resolve().parent.parent
TINY_BERT = REPO / "tests" / "fixtures" / "tf_bert_tiny"


def refuse_to_unpack(monkeypatch):
    """Make any attempt to unpack fail the test: the checks must come first."""
    def unpack(*args):
        pytest.fail("unpacking started before the archive was checked")
    monkeypatch.setattr(hub, "unpack_zip", unpack)
    monkeypatch.setattr(hub, "unpack_tar", unpack)


# ---------------------------------------------------------------------------
# 1. Archives are read to their end and checked before unpacking
# ---------------------------------------------------------------------------

def flip_gzip_crc(data):
    bad = bytearray(data)
    bad[-8] ^= 0xFF  # the gzip trailer is CRC-32 (4 bytes) then length (4 bytes)
    return bytes(bad)


def flip_zip_member_byte(data):
    bad = bytearray(data)
    bad[data.index(CKPT_BYTES[:64]) + 100] ^= 0x01  # inside the stored checkpoint bytes
    return bytes(bad)


@pytest.mark.parametrize("name, path, good, files, corrupt", [
    (ALBERT_NAME, ALBERT_PATH, ALBERT_TAR, ALBERT_FILES, flip_gzip_crc),
    (BERT_NAME, BERT_PATH, BERT_ZIP, BERT_FILES, flip_zip_member_byte),
], ids=["tar.gz-crc", "zip-crc"])
def test_corrupt_archive_is_refused_before_unpacking(server, cache, monkeypatch,
                                                     name, path, good, files, corrupt):
    bad = corrupt(good)
    if path.endswith(".tar.gz"):  # tarfile alone never notices: it stops before the trailer
        with tarfile.open(fileobj=io.BytesIO(bad)) as tf:
            assert tf.extractfile("albert_base/albert_config.json").read() == \
                ALBERT_FILES["albert_base/albert_config.json"]
    server.files[path] = bad
    with monkeypatch.context() as patch:
        refuse_to_unpack(patch)
        with pytest.raises(MiniBertError, match="corrupt archive") as info:
            resolve_model_dir(name)
    message = str(info.value)
    assert ": corrupt archive (" in message and "CRC" in message and "\n" not in message
    assert message.endswith(f"(downloaded from {server.url}{path}; nothing was kept)")
    assert leftovers(cache) == []                     # nothing cached, the archive deleted

    server.files[path] = good
    assert_unpacked(resolve_model_dir(name), files)
    assert [status for _, status in server.requests] == [200, 200]


# ---------------------------------------------------------------------------
# 2. A cached download that does not load says where it is and how to refresh it
# ---------------------------------------------------------------------------

def tiny_bert_zip(truncate_checkpoint=False):
    """The tiny TF BERT fixture as Google packs it, optionally with a cut-off checkpoint."""
    files = {}
    for file in sorted(TINY_BERT.iterdir()):
        if file.name == "expected_arrays.npz":
            continue
        data = file.read_bytes()
        if truncate_checkpoint and ".data-" in file.name:
            data = data[:1000]
        files[f"uncased_L-2_H-128_A-2/{file.name}"] = data
    return make_zip(files)


def test_bad_cached_checkpoint_names_the_folder_and_force_download_refreshes(server, cache):
    server.files[BERT_PATH] = tiny_bert_zip(truncate_checkpoint=True)
    target = cache / BERT_FOLDER
    with pytest.raises(MiniBertError) as info:
        load_pretrained(BERT_NAME)
    message = str(info.value)
    assert "bert_model.ckpt.data-00000-of-00001" in message and "truncated" in message
    assert message.endswith(f"(the cached download of {BERT_NAME} in {target} is bad; to "
                            f"download {BERT_NAME} again, use force_download=True or "
                            f"delete {target})")
    assert "\n" not in message

    server.files[BERT_PATH] = tiny_bert_zip()
    with pytest.raises(MiniBertError, match="force_download=True"):
        load_pretrained(BERT_NAME)  # the bad folder is still what the cache holds
    assert len(server.requests) == 1

    model = load_pretrained(BERT_NAME, force_download=True)
    assert len(server.requests) == 2
    assert model.source_dir == target / "uncased_L-2_H-128_A-2"
    reference = load_pretrained(TINY_BERT).state_dict()
    loaded = model.state_dict()
    assert loaded.keys() == reference.keys()
    assert all((loaded[key] == reference[key]).all() for key in reference)
    assert [p for p in leftovers(cache) if not p.startswith(BERT_FOLDER)] == []  # the old folder is gone


def test_bad_cached_vocabulary_names_the_folder_and_force_download_refreshes(server, cache):
    vocab = "uncased_L-2_H-128_A-2/vocab.txt"
    server.files[BERT_PATH] = make_zip({**BERT_FILES, vocab: b"[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n"})
    with pytest.raises(MiniBertError) as info:
        load_tokenizer(BERT_NAME)
    message = str(info.value)
    assert message.startswith(f"{cache / BERT_FOLDER / vocab}: the vocabulary has no [UNK] token")
    assert f"the cached download of {BERT_NAME} in {cache / BERT_FOLDER} is bad" in message
    assert "force_download=True" in message

    server.files[BERT_PATH] = BERT_ZIP
    tokenizer = load_tokenizer(BERT_NAME, force_download=True)
    assert tokenizer.tokenize("The") == ["the"]
    assert len(server.requests) == 2


def test_errors_outside_the_cache_are_not_blamed_on_it(tmp_path, cache):
    (tmp_path / "mine").mkdir()
    with pytest.raises(MiniBertError) as info:
        load_tokenizer(tmp_path / "mine")
    assert "cached download" not in str(info.value)


# ---------------------------------------------------------------------------
# 3. A zip bomb is refused
# ---------------------------------------------------------------------------

def test_zip_bomb_is_refused(server, cache, monkeypatch, tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("uncased_L-2_H-128_A-2/bert_config.json", b"{}")
        zf.writestr("uncased_L-2_H-128_A-2/zeros", bytes(3_000_000))
    bomb = buf.getvalue()
    assert len(bomb) < 10_000
    archive = tmp_path / "bomb.zip"
    archive.write_bytes(bomb)
    # The default limit: 20 times the archive's size plus 100 MiB.
    assert hub.max_unpacked_bytes(archive) == 20 * len(bomb) + 100 * 2**20

    server.files[BERT_PATH] = bomb
    monkeypatch.setenv("MINIBERT_MAX_UNPACKED_BYTES", "1000000")
    with monkeypatch.context() as patch:
        refuse_to_unpack(patch)  # the declared sizes are enough to refuse it
        with pytest.raises(MiniBertError) as info:
            resolve_model_dir(BERT_NAME)
    message = str(info.value)
    assert message.endswith(
        "uncased_L-2_H-128_A-2.zip: refusing to unpack 3000002 bytes, more than the limit of 1000000; if you "
        "trust this archive, set MINIBERT_MAX_UNPACKED_BYTES to a larger number of bytes (downloaded from "
        f"{server.url}{BERT_PATH}; nothing was kept)")
    assert leftovers(cache) == []

    monkeypatch.setenv("MINIBERT_MAX_UNPACKED_BYTES", "3000002")
    folder = resolve_model_dir(BERT_NAME)  # trusted now, it is downloaded again and unpacks
    assert (folder / "zeros").stat().st_size == 3_000_000
    assert len(server.requests) == 2

    monkeypatch.setenv("MINIBERT_MAX_UNPACKED_BYTES", "lots")
    with pytest.raises(MiniBertError, match="MINIBERT_MAX_UNPACKED_BYTES='lots': expected a whole"):
        unpack_archive(archive, tmp_path / "out")


def test_bytes_written_are_counted_against_the_limit(tmp_path):
    # Whatever the archive declared, unpacking stops once the limit is passed.
    budget = ByteBudget(tmp_path / "x.zip", limit=2000)
    copy_member(io.BytesIO(b"a" * 1500), tmp_path / "first", budget)
    with pytest.raises(MiniBertError, match=r"x.zip: refusing to unpack at least 2500 bytes, "
                                            r"more than the limit of 2000"):
        copy_member(io.BytesIO(b"b" * 1000), tmp_path / "second", budget)
    assert budget.used == 2500
