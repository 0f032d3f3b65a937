"""Google's release archives (minibert/support/google_archives.py), against a
local HTTP server (no internet).

The server runs in a thread on 127.0.0.1 and serves archives the tests build.
It logs each request's path and status, and can be told to answer 404 or to
hang up half-way through a response.
"""

import hashlib
import io
import re
import socket
import tarfile
import zipfile
from http.server import BaseHTTPRequestHandler

import pytest

from minibert.support import google_archives
from minibert.support.errors import MiniBertError
from minibert.support.google_archives import archive_names, archive_url, download_archive, unpack_archive
from minibert.support.hub import resolve_model_dir
from helpers import local_server

BERT_NAME = "tf:bert-uncased-L-2-H-128"
BERT_FOLDER = "bert-uncased-L-2-H-128"      # its folder in the cache
BERT_PATH = "/bert_models/2020_02_20/uncased_L-2_H-128_A-2.zip"
ALBERT_NAME = "tf:albert-base-v2"
ALBERT_FOLDER = "albert-base-v2"
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


class FakeServer:
    """What the handler serves and what it saw."""

    def __init__(self):
        self.files = {BERT_PATH: BERT_ZIP, ALBERT_PATH: ALBERT_TAR}
        self.mode = "serve"     # "serve" | "404" | "hang-up"
        self.requests = []      # (path, status sent)
        self.url = None


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = state.files.get(self.path)
            if body is None or state.mode == "404":
                state.requests.append((self.path, 404))
                self.send_error(404, "Not Found")
                return
            state.requests.append((self.path, 200))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            # "hang-up": close the connection after 3000 bytes
            self.wfile.write(body[:3000] if state.mode == "hang-up" else body)

        def log_message(self, *args):
            """Quiet: the tests read `requests` instead of a log on stderr."""

    return Handler


@pytest.fixture
def server():
    state = FakeServer()
    with local_server(state, make_handler(state)):
        yield state


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
    """Everything in the cache folder, as relative paths ([] if there is none)."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*")) if cache.exists() else []


# ---------------------------------------------------------------------------
# Happy paths
# ---------------------------------------------------------------------------

def test_download_zip_then_cache_hit(server, cache):
    folder = resolve_model_dir(BERT_NAME)
    assert folder == cache / BERT_FOLDER / "uncased_L-2_H-128_A-2"
    assert (folder / "bert_config.json").is_file()
    assert_unpacked(folder, BERT_FILES)
    assert server.requests == [(BERT_PATH, 200)]
    assert [p for p in leftovers(cache) if not p.startswith(BERT_FOLDER)] == []  # the archive is gone

    # A second call finds the cache and does not ask the server.
    assert resolve_model_dir(BERT_NAME) == folder
    assert download_archive(BERT_NAME) == folder
    assert resolve_model_dir(BERT_NAME, local_files_only=True) == folder


def test_local_files_only_and_cache_dir_for_an_archive(server, cache, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME, cache_dir=elsewhere, local_files_only=True)
    assert str(info.value) == (f"model {BERT_NAME!r} was never downloaded into {elsewhere} and local_files_only=True; "
                               f"download it once with the network on, or give the path of a folder that holds it")
    assert server.requests == []
    folder = resolve_model_dir(BERT_NAME, cache_dir=elsewhere)
    assert folder == elsewhere / BERT_FOLDER / "uncased_L-2_H-128_A-2" and not cache.exists()
    assert len(server.requests) == 1


def test_download_tar_gz(server, cache):
    folder = download_archive(ALBERT_NAME, progress=False)
    assert folder == cache / ALBERT_FOLDER / "albert_base"
    assert_unpacked(folder, ALBERT_FILES)
    assert server.requests == [(ALBERT_PATH, 200)]


def test_explicit_cache_dir_and_prefix(server, tmp_path, monkeypatch):
    monkeypatch.delenv("MINIBERT_CACHE", raising=False)
    monkeypatch.delenv("MINIBERT_DOWNLOAD_URL_PREFIX", raising=False)
    folder = download_archive(BERT_NAME, cache_dir=tmp_path / "c", url_prefix=server.url + "/")
    assert folder == tmp_path / "c" / BERT_FOLDER / "uncased_L-2_H-128_A-2"


def test_a_download_finished_first_by_another_process_is_kept(server, cache, monkeypatch):
    # No lock: two processes may download the same archive at once. The one
    # that finishes second finds the folder in place and deletes its own copy.
    fetch = google_archives.fetch

    def fetch_while_another_process_finishes(url, dest, progress=True):
        (cache / BERT_FOLDER / "uncased_L-2_H-128_A-2").mkdir(parents=True)
        (cache / BERT_FOLDER / "uncased_L-2_H-128_A-2" / "bert_config.json").write_text("{}")
        return fetch(url, dest, progress=progress)

    monkeypatch.setattr(google_archives, "fetch", fetch_while_another_process_finishes)
    folder = resolve_model_dir(BERT_NAME)
    assert (folder / "bert_config.json").read_text() == "{}"          # theirs
    assert leftovers(cache) == [BERT_FOLDER, f"{BERT_FOLDER}/uncased_L-2_H-128_A-2",
                                f"{BERT_FOLDER}/uncased_L-2_H-128_A-2/bert_config.json"]


# ---------------------------------------------------------------------------
# Failures leave nothing behind
# ---------------------------------------------------------------------------

def test_a_cut_connection_leaves_nothing_and_the_next_call_starts_over(server, cache):
    server.mode = "hang-up"
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME)
    message = str(info.value)
    assert message.startswith(f"could not download {server.url}{BERT_PATH}: ")
    assert message.endswith("(run again to start over)") and "\n" not in message
    assert not cache.exists()                        # created for this attempt, so removed with it

    server.mode = "serve"
    assert_unpacked(resolve_model_dir(BERT_NAME), BERT_FILES)
    assert server.requests == [(BERT_PATH, 200), (BERT_PATH, 200)]


def test_404_names_the_url(server, cache):
    cache.mkdir()
    server.mode = "404"
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME)
    assert str(info.value) == f"could not download {server.url}{BERT_PATH}: HTTP 404 Not Found"
    assert cache.is_dir() and leftovers(cache) == []  # there before, so kept, and empty


def test_connection_refused(cache, monkeypatch):
    with socket.socket() as s:  # find a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MINIBERT_DOWNLOAD_URL_PREFIX", f"http://127.0.0.1:{port}")
    with pytest.raises(MiniBertError, match=re.escape(f"http://127.0.0.1:{port}{BERT_PATH}")):
        resolve_model_dir(BERT_NAME)
    assert leftovers(cache) == []


def test_zip_member_escaping_the_folder_is_refused(server, cache):
    server.files[BERT_PATH] = make_zip(BERT_FILES, extra=[("../evil", b"pwned")])
    with pytest.raises(MiniBertError, match="refusing to unpack member '../evil'"):
        resolve_model_dir(BERT_NAME)
    assert not (cache / "evil").exists() and not (cache.parent / "evil").exists()
    assert leftovers(cache) == []


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
    with pytest.raises(MiniBertError, match="corrupt archive") as info:
        resolve_model_dir(BERT_NAME)
    assert str(info.value).endswith(f"(downloaded from {server.url}{BERT_PATH}; nothing was kept)")
    assert leftovers(cache) == []


def test_cached_folder_without_config(server, cache):
    (cache / BERT_FOLDER / "something").mkdir(parents=True)
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir(BERT_NAME)
    assert str(info.value) == (
        f"{cache / BERT_FOLDER}: cached model folder has no config.json / bert_config.json / "
        f"albert_config.json; to download {BERT_NAME} again, use force_download=True or "
        f"delete {cache / BERT_FOLDER}")
    assert server.requests == []
    folder = resolve_model_dir(BERT_NAME, force_download=True)
    assert_unpacked(folder, BERT_FILES)
    assert not (cache / BERT_FOLDER / "something").exists()
    assert [p for p in leftovers(cache) if not p.startswith(BERT_FOLDER)] == []  # the old folder is gone


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------

def test_registry_urls():
    names = archive_names()
    assert len(names) == 3 + 24 + 4 == len(set(names))    # BERT, small BERTs, ALBERT
    assert all(name.startswith("tf:") for name in names)
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
        archive = google_archives.ARCHIVES[name]
        assert archive_url(archive) == google + path
        assert archive_url(archive, "http://mirror/x/") == "http://mirror/x" + path


def test_an_unknown_archive_name():
    with pytest.raises(MiniBertError, match=r"unknown archive name 'tf:bert-huge'; known names: tf:bert-base-uncased"):
        resolve_model_dir("tf:bert-huge")
