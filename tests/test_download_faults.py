"""The downloader under injected faults: corrupt archives, files replaced on
the server between a cut and a resume, bad cached folders, two processes at
once, a process killed while unpacking, and a zip bomb.

Uses the local HTTP server and cache of test_download.py (no internet).
"""

import io
import os
import random
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from minibert.support import hub
from minibert.checkpoints import load_pretrained
from minibert.support.errors import MiniBertError
from minibert.support.hub import ByteBudget, copy_member, resolve_model_dir, unpack_archive
from minibert.tokenization import load_tokenizer
from test_download import (  # noqa: F401, F811 (server and cache are the shared fixtures)
    ALBERT_FILES, ALBERT_NAME, ALBERT_PATH, ALBERT_TAR, BERT_FILES, BERT_NAME, BERT_PATH,
    BERT_ZIP, CKPT_BYTES, assert_unpacked, cache, etag, leftovers, make_tar_gz, make_zip, server)

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
    archive = cache / "downloads" / path.rsplit("/", 1)[-1]
    assert str(info.value).startswith(f"{archive}: corrupt archive (")
    assert "CRC" in str(info.value)
    assert leftovers(cache) == [f"{name}.lock", "downloads"]  # nothing cached, archive deleted

    server.files[path] = good
    assert_unpacked(resolve_model_dir(name), files)
    assert [status for _, _, status in server.requests] == [200, 200]


# ---------------------------------------------------------------------------
# 2. A resume never mixes two versions of a file
# ---------------------------------------------------------------------------

def albert_files(seed, config=b'{"hidden_size": 768, "embedding_size": 128}', extra=0):
    """ALBERT-like files with random, incompressible weights: the .tar.gz stays
    as big as they are (about 20 kB), so a cut after 3000 bytes is part-way."""
    rng = random.Random(seed)
    files = {"albert_base/albert_config.json": config,
             "albert_base/model.ckpt-best.data-00000-of-00001": rng.randbytes(20000)}
    if extra:
        files["albert_base/extra"] = rng.randbytes(extra)
    return files


OLD_FILES = albert_files(0)
NEW_FILES = albert_files(1, config=b'{"hidden_size": 768, "embedding_size": 256}')
LONGER_FILES = albert_files(2, extra=5000)
OLD_TAR, NEW_TAR, LONGER_TAR = (make_tar_gz(f) for f in (OLD_FILES, NEW_FILES, LONGER_FILES))


@pytest.mark.parametrize("honour_if_range, new_files, new_tar, statuses", [
    # The server sees the ETag changed and sends the whole new file (200).
    (True, NEW_FILES, NEW_TAR, [200, 200]),
    # It ignores If-Range, but Content-Range's total is not the saved size:
    # the .part is thrown away and the file fetched again from zero.
    (False, LONGER_FILES, LONGER_TAR, [200, 206, 200]),
], ids=["if-range", "content-range-total"])
def test_file_replaced_between_cut_and_resume(server, cache, honour_if_range, new_files,
                                              new_tar, statuses):
    server.files[ALBERT_PATH] = OLD_TAR
    server.mode = "hang-up"
    with pytest.raises(MiniBertError, match="resume"):
        resolve_model_dir(ALBERT_NAME)
    server.files[ALBERT_PATH] = new_tar
    server.mode, server.honour_if_range = "range", honour_if_range

    assert_unpacked(resolve_model_dir(ALBERT_NAME), new_files)
    assert [status for _, _, status in server.requests] == statuses
    assert server.requests[1][1] == "bytes=3000-"
    assert server.if_ranges[1] == etag(OLD_TAR)  # the version the cut download started with


def uncompressed_tar_gz(files):
    """A .tar.gz at compression level 0: its length depends only on the files' lengths."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=0) as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_replaced_file_of_the_same_size_is_never_unpacked_mixed(server, cache):
    # The worst case: the server ignores If-Range and the new file has the
    # same length, so the resume is accepted. The gzip CRC catches the mixture.
    old_tar = uncompressed_tar_gz(OLD_FILES)
    new_tar = uncompressed_tar_gz(NEW_FILES)
    assert len(new_tar) == len(old_tar)
    server.files[ALBERT_PATH] = old_tar
    server.mode = "hang-up"
    with pytest.raises(MiniBertError, match="resume"):
        resolve_model_dir(ALBERT_NAME)
    server.files[ALBERT_PATH] = new_tar
    server.mode, server.honour_if_range = "range", False
    with pytest.raises(MiniBertError, match="corrupt archive"):
        resolve_model_dir(ALBERT_NAME)
    assert leftovers(cache) == [f"{ALBERT_NAME}.lock", "downloads"]

    assert_unpacked(resolve_model_dir(ALBERT_NAME), NEW_FILES)
    assert [status for _, _, status in server.requests] == [200, 206, 200]


# ---------------------------------------------------------------------------
# 3. A cached download that does not load says where it is and how to refresh it
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
    target = cache / BERT_NAME
    with pytest.raises(MiniBertError) as info:
        load_pretrained(BERT_NAME)
    message = str(info.value)
    assert "bert_model.ckpt.data-00000-of-00001" in message and "truncated" in message
    assert message.endswith(f"(the cached download of {BERT_NAME} in {target} is bad; to "
                            f"download {BERT_NAME} again, pass force_download=True or "
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
    assert leftovers(cache)[:2] == [BERT_NAME, f"{BERT_NAME}.lock"]
    assert not [p for p in leftovers(cache) if p.startswith(".")]  # the old folder is gone


def test_bad_cached_vocabulary_names_the_folder_and_force_download_refreshes(server, cache):
    vocab = "uncased_L-2_H-128_A-2/vocab.txt"
    server.files[BERT_PATH] = make_zip({**BERT_FILES, vocab: b"[PAD]\n[CLS]\n[SEP]\n[MASK]\nthe\n"})
    with pytest.raises(MiniBertError) as info:
        load_tokenizer(BERT_NAME)
    message = str(info.value)
    assert message.startswith(f"{cache / BERT_NAME / vocab}: the vocabulary has no [UNK] token")
    assert f"the cached download of {BERT_NAME} in {cache / BERT_NAME} is bad" in message
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
# 4. Two processes asking for the same name: one downloads, the other waits
# ---------------------------------------------------------------------------

def wait_until(condition, what, seconds=30):
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.mark.skipif(hub.fcntl is None, reason="the cache lock needs fcntl")
def test_two_processes_download_once(server, cache, tmp_path):
    server.mode = "gate"  # the first download stops after 3000 bytes until the gate opens
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "from minibert.support.hub import resolve_model_dir; print(resolve_model_dir(%r))" % BERT_NAME

    def start(log):
        return subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=log, text=True)

    with open(tmp_path / "first.log", "w") as first_log, \
            open(tmp_path / "second.log", "w") as second_log:
        first = start(first_log)
        try:
            wait_until(lambda: len(server.requests) == 1, "the first process's request")
            second = start(second_log)
            try:
                wait_until(lambda: "waiting for another process" in
                           (tmp_path / "second.log").read_text(), "the second process to wait")
                server.gate.set()
                outputs = [process.communicate(timeout=60) for process in (first, second)]
            finally:
                second.kill()
        finally:
            first.kill()

    folder = str(cache / BERT_NAME / "uncased_L-2_H-128_A-2")
    assert [first.returncode, second.returncode] == [0, 0], (tmp_path / "second.log").read_text()
    assert [out.strip() for out, _ in outputs] == [folder, folder]
    assert server.requests == [(BERT_PATH, None, 200)]  # the second found the finished folder
    assert_unpacked(Path(folder), BERT_FILES)


# ---------------------------------------------------------------------------
# 5. Leftovers of a killed process are removed; a zip bomb is refused
# ---------------------------------------------------------------------------

def test_leftovers_of_a_killed_process_are_removed(server, cache):
    # What `kill -9` during unpacking or force_download leaves behind.
    stale = cache / f".{BERT_NAME}.k1ll3d.unpacking" / "uncased_L-2_H-128_A-2"
    stale.mkdir(parents=True)
    (stale / "vocab.txt").write_bytes(b"half")
    (cache / f".{BERT_NAME}.1234.deleting").mkdir()
    other = cache / f".{ALBERT_NAME}.busy.unpacking"  # another name's lock covers it: kept
    other.mkdir()

    assert_unpacked(resolve_model_dir(BERT_NAME), BERT_FILES)
    assert sorted(p.name for p in cache.iterdir()) == [
        f".{ALBERT_NAME}.busy.unpacking", BERT_NAME, f"{BERT_NAME}.lock", "downloads"]


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
    assert str(info.value) == (
        f"{cache / 'downloads' / 'uncased_L-2_H-128_A-2.zip'}: refusing to unpack 3000002 "
        f"bytes, more than the limit of 1000000; if you trust this archive, set "
        f"MINIBERT_MAX_UNPACKED_BYTES to a larger number of bytes")
    assert not (cache / BERT_NAME).exists()

    monkeypatch.setenv("MINIBERT_MAX_UNPACKED_BYTES", "3000002")
    folder = resolve_model_dir(BERT_NAME)  # the archive was kept; trusted now, it unpacks
    assert (folder / "zeros").stat().st_size == 3_000_000

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
