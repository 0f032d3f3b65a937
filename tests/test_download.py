"""The name-based downloader, against a local HTTP server (no internet).

The server runs in a thread on 127.0.0.1 and serves archives the tests build.
It logs each request's path and Range header, and can be told to honour
Range, ignore it, answer 404, or hang up half-way through a response. Like
Google's servers it sends an ETag and honours If-Range (answering with the
whole file when the ETag given is not the current one).
"""

import dataclasses
import hashlib
import io
import json
import re
import socket
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from minibert.support import hub
from minibert.support.hub import (
    BUNDLED_MODEL_NAME,
    download_model,
    known_model_names,
    model_url,
    resolve_model_dir,
    unpack_archive,
)
from minibert.support.errors import MiniBertError

BERT_NAME = "bert-uncased-L-2-H-128"
BERT_PATH = "/bert_models/2020_02_20/uncased_L-2_H-128_A-2.zip"
ALBERT_NAME = "albert-base-v2"
ALBERT_PATH = "/albert_models/albert_base_v2.tar.gz"

# Incompressible filler so that the archives are big enough to resume part-way.
CKPT_BYTES = hashlib.sha256(b"seed").digest() * 4096  # 128 KiB
BERT_FILES = {
    "uncased_L-2_H-128_A-2/bert_config.json": b'{"hidden_size": 128, "num_hidden_layers": 2}',
    "uncased_L-2_H-128_A-2/vocab.txt": b"[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n",
    "uncased_L-2_H-128_A-2/bert_model.ckpt.data-00000-of-00001": CKPT_BYTES,
}
ALBERT_FILES = {
    "albert_base/albert_config.json": b'{"hidden_size": 768, "embedding_size": 128}',
    "albert_base/30k-clean.model": CKPT_BYTES[:5000],
    "albert_base/model.ckpt-best.index": b"index",
}


def make_zip(files, extra=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        top = next(iter(files)).split("/")[0]
        zf.writestr(top + "/", b"")  # a directory entry, as Google's zips have
        for name, data in [*files.items(), *extra]:
            zf.writestr(name, data)
    return buf.getvalue()


def make_tar_gz(files, extra=()):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in [*files.items(), *extra]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


BERT_ZIP = make_zip(BERT_FILES)
ALBERT_TAR = make_tar_gz(ALBERT_FILES)


def etag(body):
    return '"' + hashlib.sha256(body).hexdigest()[:16] + '"'


class FakeServer:
    """What the handler serves and what it saw."""

    def __init__(self):
        self.files = {BERT_PATH: BERT_ZIP, ALBERT_PATH: ALBERT_TAR}
        self.mode = "range"     # "range" | "ignore-range" | "404" | "hang-up" | "gate"
        self.honour_if_range = True
        self.gate = threading.Event()  # mode "gate": send 3000 bytes, wait for this, send the rest
        self.requests = []      # (path, Range header or None, status sent)
        self.if_ranges = []     # the If-Range header of each request, or None
        self.url = None


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            range_header = self.headers.get("Range")
            body = state.files.get(self.path)
            if body is None or state.mode == "404":
                state.requests.append((self.path, range_header, 404))
                self.send_error(404, "Not Found")
                return
            if_range = self.headers.get("If-Range")
            state.if_ranges.append(if_range)
            status, start = 200, 0
            same_version = if_range is None or if_range == etag(body) or not state.honour_if_range
            if range_header and state.mode in ("range", "hang-up") and same_version:
                start = int(re.fullmatch(r"bytes=(\d+)-", range_header).group(1))
                status = 206
            state.requests.append((self.path, range_header, status))
            self.send_response(status)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.send_header("Content-Length", str(len(body) - start))
            self.send_header("ETag", etag(body))
            self.end_headers()
            if state.mode in ("hang-up", "gate"):
                self.wfile.write(body[start:start + 3000])
                if state.mode == "hang-up":
                    return  # close the connection half-way
                self.wfile.flush()
                state.gate.wait(timeout=30)
                self.wfile.write(body[start + 3000:])
                return
            self.wfile.write(body[start:])

        def log_message(self, *args):
            pass

    return Handler


@pytest.fixture
def server():
    state = FakeServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    state.gate.set()  # never leave a handler waiting
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.fixture
def cache(tmp_path, monkeypatch, server):
    folder = tmp_path / "cache"
    monkeypatch.setenv("MINIBERT_CACHE", str(folder))
    monkeypatch.setenv("MINIBERT_DOWNLOAD_URL_PREFIX", server.url)
    return folder


def assert_unpacked(folder, files):
    for name, data in files.items():
        assert (folder.parent / name).read_bytes() == data


def leftovers(cache):
    """Everything in the cache folder, as relative paths."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))


# What the cache holds after a failed download: the lock file stays (see cache_lock).
EMPTY_CACHE = [f"{BERT_NAME}.lock", "downloads"]


# ---------------------------------------------------------------------------
# Happy paths
# ---------------------------------------------------------------------------

def test_download_zip_then_cache_hit(server, cache):
    folder = resolve_model_dir(BERT_NAME)
    assert folder == cache / BERT_NAME / "uncased_L-2_H-128_A-2"
    assert (folder / "bert_config.json").is_file()
    assert_unpacked(folder, BERT_FILES)
    assert server.requests == [(BERT_PATH, None, 200)]
    assert not list((cache / "downloads").iterdir())  # archive deleted after unpacking

    # A second call finds the cache and does not ask the server.
    assert resolve_model_dir(BERT_NAME) == folder
    assert download_model(BERT_NAME) == folder
    assert len(server.requests) == 1


def test_download_tar_gz(server, cache):
    folder = download_model(ALBERT_NAME, progress=False)
    assert folder == cache / ALBERT_NAME / "albert_base"
    assert_unpacked(folder, ALBERT_FILES)
    assert server.requests == [(ALBERT_PATH, None, 200)]


def test_explicit_cache_dir_and_prefix(server, tmp_path, monkeypatch):
    monkeypatch.delenv("MINIBERT_CACHE", raising=False)
    monkeypatch.delenv("MINIBERT_DOWNLOAD_URL_PREFIX", raising=False)
    folder = download_model(BERT_NAME, cache_dir=tmp_path / "c", url_prefix=server.url + "/")
    assert folder == tmp_path / "c" / BERT_NAME / "uncased_L-2_H-128_A-2"


# ---------------------------------------------------------------------------
# Resuming
# ---------------------------------------------------------------------------

def part_file(cache, archive="uncased_L-2_H-128_A-2.zip"):
    return cache / "downloads" / f"{archive}.part"


def test_part_without_its_record_is_downloaded_from_zero(server, cache):
    # Nothing says which version of the file these bytes belong to: not resumed.
    part = part_file(cache)
    part.parent.mkdir(parents=True)
    part.write_bytes(b"garbage that must not end up in the archive" * 20)
    folder = resolve_model_dir(BERT_NAME)
    assert server.requests == [(BERT_PATH, None, 200)]
    assert_unpacked(folder, BERT_FILES)
    assert not part.exists()


def test_server_ignoring_range_restarts_from_zero(server, cache):
    server.mode = "hang-up"
    with pytest.raises(MiniBertError, match="resume"):
        resolve_model_dir(BERT_NAME)
    server.mode = "ignore-range"
    folder = resolve_model_dir(BERT_NAME)
    assert server.requests == [(BERT_PATH, None, 200), (BERT_PATH, "bytes=3000-", 200)]
    assert_unpacked(folder, BERT_FILES)


def test_interrupted_download_resumes_next_time(server, cache):
    server.mode = "hang-up"
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME)
    message = str(info.value)
    assert server.url + BERT_PATH in message and "resume" in message
    part = part_file(cache)
    have = part.stat().st_size
    assert have == 3000
    assert not (cache / BERT_NAME).exists()
    record = json.loads(part.with_name(part.name + ".json").read_text())
    assert record == {"url": server.url + BERT_PATH, "version": etag(BERT_ZIP),
                      "size": len(BERT_ZIP)}

    server.mode = "range"
    folder = resolve_model_dir(BERT_NAME)
    assert server.requests[-1] == (BERT_PATH, f"bytes={have}-", 206)
    assert server.if_ranges[-1] == etag(BERT_ZIP)  # "only if it is still that version"
    assert_unpacked(folder, BERT_FILES)
    assert not list((cache / "downloads").iterdir())


# ---------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------

def with_expected(monkeypatch, name, **changes):
    model = dataclasses.replace(hub.KNOWN_MODELS[name], **changes)
    monkeypatch.setitem(hub.KNOWN_MODELS, name, model)


def test_checksum_mismatch_leaves_nothing_that_looks_complete(server, cache, monkeypatch):
    with_expected(monkeypatch, BERT_NAME, sha256="0" * 64)
    with pytest.raises(MiniBertError, match="sha256") as info:
        resolve_model_dir(BERT_NAME)
    assert server.url + BERT_PATH in str(info.value)
    assert leftovers(cache) == EMPTY_CACHE

    with_expected(monkeypatch, BERT_NAME, size=len(BERT_ZIP) + 1)
    with pytest.raises(MiniBertError, match="expected"):
        resolve_model_dir(BERT_NAME)
    assert leftovers(cache) == EMPTY_CACHE

    with_expected(monkeypatch, BERT_NAME, size=len(BERT_ZIP),
                  sha256=hashlib.sha256(BERT_ZIP).hexdigest())
    assert_unpacked(resolve_model_dir(BERT_NAME), BERT_FILES)


def test_404_names_the_url_and_the_cache(server, cache):
    server.mode = "404"
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME)
    message = str(info.value)
    assert server.url + BERT_PATH in message
    assert "404" in message
    assert str(cache) in message and "by hand" in message
    assert "\n" not in message
    assert leftovers(cache) == EMPTY_CACHE


def test_connection_refused(cache, monkeypatch):
    with socket.socket() as s:  # find a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MINIBERT_DOWNLOAD_URL_PREFIX", f"http://127.0.0.1:{port}")
    with pytest.raises(MiniBertError, match=re.escape(f"http://127.0.0.1:{port}{BERT_PATH}")):
        resolve_model_dir(BERT_NAME)


def test_zip_member_escaping_the_folder_is_refused(server, cache):
    server.files[BERT_PATH] = make_zip(BERT_FILES, extra=[("../evil", b"pwned")])
    with pytest.raises(MiniBertError, match="refusing to unpack member '../evil'"):
        resolve_model_dir(BERT_NAME)
    assert not (cache / "evil").exists() and not (cache.parent / "evil").exists()
    assert not (cache / BERT_NAME).exists()
    assert not [p for p in leftovers(cache) if "unpacking" in p]


@pytest.mark.parametrize("bad_name", ["../evil", "/tmp/evil", "a/../../evil", "C:/evil"])
def test_tar_member_escaping_the_folder_is_refused(tmp_path, bad_name):
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(make_tar_gz(ALBERT_FILES, extra=[(bad_name, b"pwned")]))
    with pytest.raises(MiniBertError, match="refusing"):
        unpack_archive(archive, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.tar.gz"]


def test_tar_links_are_skipped(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        info = tarfile.TarInfo("albert_base/albert_config.json")
        info.size = 2
        tf.addfile(info, io.BytesIO(b"{}"))
        link = tarfile.TarInfo("albert_base/passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        tf.addfile(link)
    archive = tmp_path / "x.tar.gz"
    archive.write_bytes(buf.getvalue())
    unpack_archive(archive, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out" / "albert_base").iterdir()) == [
        "albert_config.json"]


def test_corrupt_archive_is_deleted(server, cache):
    server.files[BERT_PATH] = b"PK\x03\x04 not really a zip" * 10
    with pytest.raises(MiniBertError, match="corrupt archive"):
        resolve_model_dir(BERT_NAME)
    assert leftovers(cache) == EMPTY_CACHE


def test_cached_folder_without_config(server, cache):
    (cache / BERT_NAME / "something").mkdir(parents=True)
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME)
    assert str(info.value) == (
        f"{cache / BERT_NAME}: cached model folder has no config.json / bert_config.json / "
        f"albert_config.json; to download {BERT_NAME} again, pass force_download=True or "
        f"delete {cache / BERT_NAME}")
    assert server.requests == []
    folder = resolve_model_dir(BERT_NAME, force_download=True)
    assert_unpacked(folder, BERT_FILES)
    assert not (cache / BERT_NAME / "something").exists()


# ---------------------------------------------------------------------------
# Names and paths
# ---------------------------------------------------------------------------

def test_registry_urls():
    names = known_model_names()
    assert names[0] == BUNDLED_MODEL_NAME
    assert len(names) == 1 + 3 + 24 + 4 + 4          # bundled, BERT, small BERTs, ALBERT, DeBERTa
    assert names[-4:] == ["microsoft/deberta-base", "microsoft/deberta-v3-xsmall", "microsoft/deberta-v3-small",
                          "microsoft/deberta-v3-base"]
    assert len(set(names)) == len(names)
    google = "https://storage.googleapis.com"
    expected = {
        "bert-base-uncased": "/bert_models/2018_10_18/uncased_L-12_H-768_A-12.zip",
        "bert-base-cased": "/bert_models/2018_10_18/cased_L-12_H-768_A-12.zip",
        "bert-large-uncased": "/bert_models/2018_10_18/uncased_L-24_H-1024_A-16.zip",
        "bert-uncased-L-2-H-128": "/bert_models/2020_02_20/uncased_L-2_H-128_A-2.zip",
        "bert-uncased-L-12-H-768": "/bert_models/2020_02_20/uncased_L-12_H-768_A-12.zip",
        "bert-uncased-L-4-H-512": "/bert_models/2020_02_20/uncased_L-4_H-512_A-8.zip",
        "albert-base-v2": "/albert_models/albert_base_v2.tar.gz",
        "albert-xxlarge-v2": "/albert_models/albert_xxlarge_v2.tar.gz",
    }
    for name, path in expected.items():
        assert model_url(hub.KNOWN_MODELS[name]) == google + path
        assert model_url(hub.KNOWN_MODELS[name], "http://mirror/x/") == "http://mirror/x" + path


def test_resolve_paths(tmp_path, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model_dir(folder) == folder
    assert resolve_model_dir(str(folder)) == folder
    assert resolve_model_dir(folder / "config.json") == folder


def test_resolve_bundled(tmp_path, monkeypatch):
    monkeypatch.setattr(hub, "BUNDLED_MODEL_DIR", tmp_path / "pretrained" / "minibert-gutenberg")
    with pytest.raises(MiniBertError, match="bundled model is missing"):
        resolve_model_dir(None)
    (tmp_path / "pretrained" / "minibert-gutenberg").mkdir(parents=True)
    assert resolve_model_dir(None) == hub.BUNDLED_MODEL_DIR
    assert resolve_model_dir(BUNDLED_MODEL_NAME) == hub.BUNDLED_MODEL_DIR


def test_resolve_unknown_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir("bert-huge-uncased")
    message = str(info.value)
    assert "'bert-huge-uncased' is neither" in message
    assert "bert-base-uncased" in message and "albert-{base,large,xlarge,xxlarge}-v2" in message
    with pytest.raises(MiniBertError, match="empty"):
        resolve_model_dir("")
