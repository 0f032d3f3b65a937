"""Names -> folders (minibert/support/hub.py): hub ids through huggingface_hub
and its cache, against a local stand-in for the Hugging Face hub (no internet).

The stand-in (FakeHub) runs in a thread on 127.0.0.1 and answers the
requests snapshot_download makes: the revision's commit
(/api/models/<repo>/revision/<rev>), the commit's file list
(/api/models/<repo>/tree/<commit>) and each file (HEAD and GET
/<repo>/resolve/<commit>/<file>). huggingface_hub reads HF_HOME, HF_ENDPOINT,
HF_TOKEN and HF_HUB_OFFLINE once, when it is imported, so every download
runs in a fresh Python process with those variables set, as a user's would.
"""

import hashlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import zipfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import torch

from helpers import local_server
from minibert.checkpoints import load_pretrained
from minibert.checkpoints.safetensors import load_safetensors
from minibert.support import hub
from minibert.support import MiniBertError
from minibert.support.hub import (SHORT_NAMES, archive_names, archive_url, download_archive, resolve_model_dir,
                                  unpack_archive)
from tiny_models import save_tiny_model


REPO = Path(__file__).resolve().parent.parent
REPO_ID = "someone/tiny-bert"


# ---------------------------------------------------------------------------
# The stand-in hub
# ---------------------------------------------------------------------------

class FakeHub:
    """What the server holds and what it was asked."""

    def __init__(self):
        self.repos = {}          # repo id -> {revision name: (commit, {file name: bytes})}
        self.private = {}        # repo id -> the token it needs
        self.gated = set()       # repo ids whose terms the user has not accepted
        self.requests = []       # (method, path without the query, Authorization header)
        self.broken = None       # an HTTP status to answer every request with (a hub that is down)
        self.url = None

    def add(self, repo_id, files, revision="main"):
        """Serve `files` as `repo_id` at `revision`; return the commit's hash."""
        commit = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
        self.repos.setdefault(repo_id, {})[revision] = (commit, dict(files))
        return commit

    def lookup(self, repo_id, revision):
        """(commit, files), or an error code for the X-Error-Code header."""
        if repo_id not in self.repos:
            return "RepoNotFound"
        for name, (commit, files) in self.repos[repo_id].items():
            if revision in (name, commit):
                return commit, files
        return "RevisionNotFound"

    def fetched(self, repo_id):
        """The files of `repo_id` whose bytes were sent (GET), in any order."""
        prefix = f"/{repo_id}/resolve/"
        return sorted(path.rsplit("/", 1)[-1] for method, path, _ in self.requests
                      if method == "GET" and path.startswith(prefix))


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"   # keep-alive, as huggingface_hub's client expects

        def send(self, status, body=b"", headers=(), with_body=True):
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def answer(self, with_body):
            path = unquote(urlsplit(self.path).path)
            state.requests.append((self.command, path, self.headers.get("Authorization")))
            api = path.startswith("/api/models/")
            if api:  # /api/models/<owner>/<name>[/revision/<rev> | /tree/<rev>[/<folder>]]
                parts = path[len("/api/models/"):].split("/", 4)
                owner, name, kind, revision, folder = [*parts, *["revision", "main", ""][len(parts) - 2:]]
            else:    # /<owner>/<name>/resolve/<rev>/<file>
                owner, name, _, revision, file_name = path[1:].split("/", 4)
            repo_id = f"{owner}/{name}"
            if state.broken:
                return self.send(state.broken, b"down for maintenance", (), with_body)
            if repo_id in state.gated:
                return self.send(403, b'{"error": "gated"}', [("X-Error-Code", "GatedRepo")], with_body)
            if repo_id in state.private and self.headers.get("Authorization") != f"Bearer {state.private[repo_id]}":
                return self.send(401, b'{"error": "Invalid credentials"}', [("X-Error-Code", "RepoNotFound")],
                                 with_body)
            found = state.lookup(repo_id, revision)
            if isinstance(found, str):
                return self.send(404, b'{"error": "not found"}', [("X-Error-Code", found)], with_body)
            commit, files = found
            if api and kind == "revision":
                body = {"id": repo_id, "sha": commit, "private": repo_id in state.private, "downloads": 0,
                        "likes": 0, "tags": [], "siblings": [{"rfilename": f} for f in files]}
            elif api:
                body = [{"type": "file", "path": f, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                        for f, data in files.items() if f.startswith(f"{folder}/" if folder else "")]
                if folder and not body:  # transformers asks for folders a repository may not have
                    return self.send(404, b'{"error": "no such folder"}', [("X-Error-Code", "EntryNotFound")],
                                     with_body)
            elif file_name not in files:
                return self.send(404, b"", [("X-Error-Code", "EntryNotFound"), ("X-Repo-Commit", commit)],
                                 with_body)
            else:
                data = files[file_name]
                return self.send(200, data, [("X-Repo-Commit", commit),
                                             ("ETag", f'"{hashlib.sha1(data).hexdigest()}"')], with_body)
            self.send(200, json.dumps(body).encode(), [("Content-Type", "application/json")], with_body)

        def do_GET(self):
            self.answer(with_body=True)

        def do_HEAD(self):
            self.answer(with_body=False)

        def log_message(self, *args):
            """Quiet: the tests read `requests` instead of a log on stderr."""

    return Handler


@pytest.fixture
def fake_hub():
    state = FakeHub()
    with local_server(state, make_handler(state)):
        yield state


@pytest.fixture
def hf_home(tmp_path):
    return tmp_path / "hf-home"


@pytest.fixture
def env(fake_hub, hf_home, tmp_path):
    """The variables of a user pointed at the stand-in hub, with an empty cache."""
    values = {key: value for key, value in os.environ.items()
              if not key.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_")) and key != "MINIBERT_CACHE"}
    values.update(HF_HOME=str(hf_home), HF_ENDPOINT=fake_hub.url, HF_HUB_DISABLE_TELEMETRY="1",
                  MINIBERT_CACHE=str(tmp_path / "minibert-cache"), PYTHONPATH=str(REPO))
    return values


def run_minibert(code, env, **changes):
    """Run `code` in a fresh Python with `env` (+ `changes`): (exit code,
    stdout lines, stderr). A MiniBertError is printed as "error: ..." and
    exits 1, as the scripts do."""
    program = ("import sys\nfrom minibert.support import MiniBertError\n"
               "from minibert.support.hub import resolve_model_dir\n"
               "try:\n" + "".join(f"    {line}\n" for line in code.strip().splitlines()) +
               "except MiniBertError as e:\n    print(f'error: {e}')\n    sys.exit(1)\n")
    done = subprocess.run([sys.executable, "-c", program], env={**env, **changes}, capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout.splitlines(), done.stderr


def resolve(name, env, **changes):
    """resolve_model_dir(name) in a fresh process: the folder, or the error line."""
    code, lines, _ = run_minibert(f"print(resolve_model_dir({name!r}))", env, **changes)
    assert len(lines) == 1, lines
    return Path(lines[0]) if code == 0 else lines[0]


def model_files(folder):
    """A tiny BERT as save_pretrained writes it: {file name: bytes}."""
    save_tiny_model(folder)
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def snapshot(hf_home, repo_id, commit):
    return hf_home / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / commit


def same_weights(a, b):
    a, b = a.state_dict(), b.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


# ---------------------------------------------------------------------------
# Downloading a hub id, and finding it again
# ---------------------------------------------------------------------------

def test_a_hub_id_fetches_only_config_tokenizer_and_one_weights_file(fake_hub, env, hf_home, tmp_path):
    files = model_files(tmp_path / "original")
    assert {"config.json", "model.safetensors", "vocab.txt"} <= set(files)
    extra = {"pytorch_model.bin": b"a second copy of the weights", "tf_model.h5": b"TensorFlow's copy",
             "README.md": b"# tiny-bert\n"}
    commit = fake_hub.add(REPO_ID, {**files, **extra})

    code, lines, _ = run_minibert(
        f"import minibert\nmodel = minibert.load_pretrained({REPO_ID!r})\nprint(model.source_dir)\n"
        f"print(minibert.load_tokenizer({REPO_ID!r}).tokenize('the cat sat'))", env)
    assert code == 0
    folder = snapshot(hf_home, REPO_ID, commit)
    assert lines == [str(folder), "['the', 'cat', 'sat']"]
    assert fake_hub.fetched(REPO_ID) == sorted(files)           # neither the .bin nor tf_model.h5 nor README
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)
    assert same_weights(load_pretrained(folder), load_pretrained(tmp_path / "original"))
    assert not (tmp_path / "minibert-cache").exists()           # minibert's own cache is not involved


def test_the_second_time_the_cache_answers_and_offline_nothing_is_asked(fake_hub, env, hf_home, tmp_path):
    commit = fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    folder = resolve(REPO_ID, env)
    assert folder == snapshot(hf_home, REPO_ID, commit)
    asked = len(fake_hub.requests)

    assert resolve(REPO_ID, env) == folder                      # online: one question, which commit is main
    assert [(m, p) for m, p, _ in fake_hub.requests[asked:]] == [("GET", f"/api/models/{REPO_ID}/revision/main")]
    asked = len(fake_hub.requests)
    assert resolve(REPO_ID, env, HF_HUB_OFFLINE="1") == folder  # offline: none
    assert len(fake_hub.requests) == asked


def test_a_repository_with_only_pytorch_model_bin_gets_that(fake_hub, env, hf_home, tmp_path):
    files = model_files(tmp_path / "original")
    torch.save(load_safetensors(tmp_path / "original" / "model.safetensors"), tmp_path / "pytorch_model.bin")
    files = {name: data for name, data in files.items() if name != "model.safetensors"}
    files["pytorch_model.bin"] = (tmp_path / "pytorch_model.bin").read_bytes()
    commit = fake_hub.add(REPO_ID, files)
    folder = resolve(REPO_ID, env)
    assert folder == snapshot(hf_home, REPO_ID, commit)
    assert fake_hub.fetched(REPO_ID) == sorted(files)
    assert same_weights(load_pretrained(folder), load_pretrained(tmp_path / "original"))


def test_a_tokenizer_alone_downloads_no_weights(fake_hub, env, tmp_path):
    fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    code, lines, _ = run_minibert(f"from minibert.tokenization import load_tokenizer\n"
                                  f"print(load_tokenizer({REPO_ID!r}).tokenize('the dog ran'))", env)
    assert (code, lines) == (0, ["['the', 'dog', 'ran']"])
    assert fake_hub.fetched(REPO_ID) == ["config.json", "vocab.txt"]


def test_a_repository_without_weights_or_config_is_one_line(fake_hub, env, tmp_path):
    files = model_files(tmp_path / "original")
    fake_hub.add(REPO_ID, {name: data for name, data in files.items() if name != "model.safetensors"})
    assert resolve(REPO_ID, env) == (f"error: {REPO_ID}: the repository has neither model.safetensors nor "
                                     f"pytorch_model.bin; minibert reads one unsharded checkpoint in either format")
    fake_hub.add("someone/no-config", {"vocab.txt": files["vocab.txt"]})
    assert resolve("someone/no-config", env).startswith("error: someone/no-config: the repository has no config.json;")


# ---------------------------------------------------------------------------
# Revisions
# ---------------------------------------------------------------------------

def test_revisions_by_name_at_revision_and_commit(fake_hub, env, hf_home, tmp_path):
    files = model_files(tmp_path / "original")
    main = fake_hub.add(REPO_ID, files)
    config = json.loads(files["config.json"])
    tagged = {**files, "config.json": json.dumps({**config, "layer_norm_eps": 1e-5}).encode()}
    v1 = fake_hub.add(REPO_ID, tagged, revision="v1")

    assert resolve(f"{REPO_ID}@v1", env) == snapshot(hf_home, REPO_ID, v1)
    assert json.loads((snapshot(hf_home, REPO_ID, v1) / "config.json").read_text())["layer_norm_eps"] == 1e-5
    assert resolve(f"{REPO_ID}@{main}", env) == snapshot(hf_home, REPO_ID, main)
    code, lines, _ = run_minibert(f"print(resolve_model_dir({REPO_ID!r}, revision='v1'))", env, HF_HUB_OFFLINE="1")
    assert (code, lines) == (0, [str(snapshot(hf_home, REPO_ID, v1))])   # the cache remembers what v1 is

    assert resolve(f"{REPO_ID}@v9", env) == (f"error: {REPO_ID} has no revision 'v9' on the Hugging Face hub "
                                             f"({fake_hub.url}); expected a branch, a tag or a commit hash")
    code, lines, _ = run_minibert(f"resolve_model_dir({REPO_ID + '@v1'!r}, revision='main')", env)
    assert (code, lines) == (1, [f"error: model '{REPO_ID}@v1' names revision 'v1' but revision='main' was "
                                 f"given; give one of them"])


def test_a_revision_for_a_path_is_refused(tmp_path):
    with pytest.raises(MiniBertError, match="revision= applies to Hugging Face hub ids only"):
        resolve_model_dir(tmp_path, revision="v1")


# ---------------------------------------------------------------------------
# The cache users already have, offline
# ---------------------------------------------------------------------------

def prepare_cache(hf_home, repo_id, files, commit="0123456789abcdef0123456789abcdef01234567"):
    """A Hugging Face cache as transformers leaves it: blobs, the snapshot's
    links to them, refs/main; no file list (only snapshot_download writes one)."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    folder = repo / "snapshots" / commit
    folder.mkdir(parents=True)
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (folder / name).symlink_to(os.path.relpath(blob, folder))
    return folder


def test_a_short_name_finds_the_model_transformers_downloaded(fake_hub, env, hf_home, tmp_path):
    files = model_files(tmp_path / "original")
    folder = prepare_cache(hf_home, "google-bert/bert-base-uncased", files)
    assert SHORT_NAMES["bert-base-uncased"] == "google-bert/bert-base-uncased"
    code, lines, _ = run_minibert("import minibert\nprint(minibert.load_pretrained('bert-base-uncased').source_dir)",
                                  env, HF_HUB_OFFLINE="1")
    assert (code, lines) == (0, [str(folder)])
    assert fake_hub.requests == []


def test_what_transformers_downloaded_loads_offline(transformers, fake_hub, env, hf_home, tmp_path):
    # transformers fetches file by file (hf_hub_download), writing no file list beside the snapshot.
    commit = fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    done = subprocess.run([sys.executable, "-c", f"import transformers as t\n"
                           f"t.AutoModelForMaskedLM.from_pretrained({REPO_ID!r})\n"
                           f"t.AutoTokenizer.from_pretrained({REPO_ID!r})"],
                          env={**env, "TRANSFORMERS_VERBOSITY": "error"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    asked = len(fake_hub.requests)
    code, lines, _ = run_minibert(f"import minibert\nprint(minibert.load_pretrained({REPO_ID!r}).source_dir)\n"
                                  f"print(minibert.load_tokenizer({REPO_ID!r}).tokenize('the cat sat'))",
                                  env, HF_HUB_OFFLINE="1")
    assert (code, lines) == (0, [str(snapshot(hf_home, REPO_ID, commit)), "['the', 'cat', 'sat']"])
    assert len(fake_hub.requests) == asked                      # the cache answered
    assert same_weights(load_pretrained(lines[0]), load_pretrained(tmp_path / "original"))


def test_offline_and_not_in_the_cache_says_so_and_asks_nothing(fake_hub, env, hf_home, tmp_path):
    fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    assert resolve(REPO_ID, env, HF_HUB_OFFLINE="1") == (
        f"error: model '{REPO_ID}' is neither an existing file or folder nor in the Hugging Face cache "
        f"({hf_home / 'hub'}), and HF_HUB_OFFLINE is set; download it once with the network on (unset "
        f"HF_HUB_OFFLINE), or give the path of a folder that holds it")
    files = model_files(tmp_path / "config-only")
    prepare_cache(hf_home, REPO_ID, {"config.json": files["config.json"], "vocab.txt": files["vocab.txt"]})
    assert resolve(REPO_ID, env, HF_HUB_OFFLINE="1").startswith(
        f"error: {REPO_ID}: the Hugging Face cache has its config but no model.safetensors or pytorch_model.bin")
    assert fake_hub.requests == []


# ---------------------------------------------------------------------------
# Failures: each one line, naming the id and what to do
# ---------------------------------------------------------------------------

def test_an_unknown_repository(fake_hub, env):
    assert resolve("nobody/nothing", env) == (
        f"error: model 'nobody/nothing' is neither an existing file or folder nor a model on the Hugging Face hub "
        f"({fake_hub.url}); if it is a private model, set HF_TOKEN (or run `hf auth login`)")


def test_a_private_repository_needs_hf_token(fake_hub, env, hf_home, tmp_path):
    commit = fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    fake_hub.private[REPO_ID] = "hf_secret"
    assert "set HF_TOKEN" in resolve(REPO_ID, env)
    assert resolve(REPO_ID, env, HF_TOKEN="hf_secret") == snapshot(hf_home, REPO_ID, commit)
    assert fake_hub.requests[-1][2] == "Bearer hf_secret"


def test_a_gated_repository_says_how_to_get_in(fake_hub, env, tmp_path):
    fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    fake_hub.gated.add(REPO_ID)
    assert resolve(REPO_ID, env) == (f"error: {REPO_ID} is a gated model: accept its terms at "
                                     f"{fake_hub.url}/{REPO_ID}, then set HF_TOKEN (or run `hf auth login`)")


def test_an_unreachable_hub(env, hf_home):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    message = resolve(REPO_ID, env, HF_ENDPOINT=f"http://127.0.0.1:{port}")
    assert message.startswith(f"error: {REPO_ID}: could not reach the Hugging Face hub at http://127.0.0.1:{port} (")
    assert message.endswith(f"and it is not in the cache ({hf_home / 'hub'}); check the network or HF_ENDPOINT, "
                            f"or give the path of a folder that holds it")


def test_a_hub_that_answers_with_an_error(fake_hub, env, hf_home, tmp_path):
    commit = fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    fake_hub.broken = 503
    assert resolve(REPO_ID, env) == (
        f"error: {REPO_ID}: the Hugging Face hub at {fake_hub.url} answered HTTP 503 (Service Unavailable) and it is "
        f"not in the cache ({hf_home / 'hub'}); check the network or HF_ENDPOINT, or give the path of a folder "
        f"that holds it")
    fake_hub.broken = None
    folder = resolve(REPO_ID, env)
    fake_hub.broken = 503
    assert resolve(REPO_ID, env) == folder == snapshot(hf_home, REPO_ID, commit)  # cached: the cache answers


def test_names_that_are_neither_paths_nor_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MiniBertError) as info:
        resolve_model_dir("bert-huge-uncased")
    assert str(info.value).startswith("model 'bert-huge-uncased' is neither an existing file or folder nor a known "
                                      "name or hub id; expected minibert-gutenberg, bert-{base,large}-{uncased,cased}, ")
    with pytest.raises(MiniBertError, match="empty"):
        resolve_model_dir("")
    assert hub.HUB_ID.fullmatch("./runs/x") is None and hub.HUB_ID.fullmatch("a/b/c") is None


def test_a_mistyped_local_folder_is_no_such_folder_not_a_hub_request(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "quick-sst2").mkdir(parents=True)
    for typed, why in (("runs/quick-sst2x", "runs/ is a folder here"), ("./runs/quick-sst2x", "it starts with ./"),
                       ("/no/such/model", "it starts with /"), ("runs/quick/sst2", "a hub id has one /")):
        with pytest.raises(MiniBertError) as info:
            resolve_model_dir(typed)
        assert str(info.value) == f"model {typed}: no such file or folder (read as a path: {why}; a hub id is " \
                                  f"owner/name)"
    assert hub.reads_as_path("google-bert/bert-base-uncased") is None         # no google-bert/ here: a hub id
    assert hub.reads_as_path("owner/name@refs/pr/1") is None                  # a revision may hold slashes


def test_a_bad_cached_copy_names_the_cache_and_force_download_replaces_it(fake_hub, env, hf_home, tmp_path):
    files = model_files(tmp_path / "original")
    commit = fake_hub.add(REPO_ID, files)
    folder = resolve(REPO_ID, env)
    config = folder / "config.json"                              # a link to the file's blob in the cache
    config.resolve().write_text(json.dumps({**json.loads(files["config.json"]), "hidden_size": 48}))
    code, lines, _ = run_minibert(f"import minibert\nminibert.load_pretrained({REPO_ID!r})", env)
    assert code == 1 and len(lines) == 1
    assert lines[0].endswith(f"(the Hugging Face cache's copy of {REPO_ID} in {folder} is bad; to download it "
                             f"again, use force_download=True, or remove it with `hf cache rm model/{REPO_ID}`)")
    code, lines, _ = run_minibert(f"import minibert\n"
                                  f"print(minibert.load_pretrained({REPO_ID!r}, force_download=True).source_dir)", env)
    assert (code, lines) == (0, [str(snapshot(hf_home, REPO_ID, commit))])
    assert json.loads(config.read_bytes()) == json.loads(files["config.json"])


def test_short_names_map_to_the_repositories_of_the_same_weights():
    # The 15 legacy BERT names and 8 ALBERT names the hub redirects, and the 24 small BERTs.
    assert len(SHORT_NAMES) == 15 + 24 + 8
    assert SHORT_NAMES["bert-base-cased"] == "google-bert/bert-base-cased"
    assert SHORT_NAMES["bert-large-cased"] == "google-bert/bert-large-cased"
    assert SHORT_NAMES["bert-base-multilingual-cased"] == "google-bert/bert-base-multilingual-cased"
    assert SHORT_NAMES["bert-base-chinese"] == "google-bert/bert-base-chinese"
    assert SHORT_NAMES["bert-large-uncased-whole-word-masking-finetuned-squad"] == \
        "google-bert/bert-large-uncased-whole-word-masking-finetuned-squad"
    assert SHORT_NAMES["bert-uncased-L-4-H-512"] == "google/bert_uncased_L-4_H-512_A-8"
    assert SHORT_NAMES["albert-base-v1"] == "albert/albert-base-v1"
    assert SHORT_NAMES["albert-xxlarge-v2"] == "albert/albert-xxlarge-v2"
    names = hub.known_model_names()
    assert names[0] == "minibert-gutenberg" and "tf:bert-base-uncased" in names and len(names) == 1 + 47 + 31


@pytest.mark.parametrize("name, repo_id", [("bert-large-cased", "google-bert/bert-large-cased"),
                                           ("bert-base-chinese", "google-bert/bert-base-chinese"),
                                           ("albert-base-v1", "albert/albert-base-v1")])
def test_a_legacy_name_is_fetched_from_the_repository_it_moved_to(name, repo_id, fake_hub, env, hf_home, tmp_path):
    commit = fake_hub.add(repo_id, model_files(tmp_path / "original"))
    assert resolve(name, env) == snapshot(hf_home, repo_id, commit)
    assert {path.split("/resolve/")[0] for _, path, _ in fake_hub.requests if "/resolve/" in path} == {f"/{repo_id}"}


# ---------------------------------------------------------------------------
# huggingface_hub's keyword arguments: cache_dir, token, local_files_only
# ---------------------------------------------------------------------------

def test_cache_dir_and_token_are_passed_to_the_hub(fake_hub, env, hf_home, tmp_path):
    commit = fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    fake_hub.private[REPO_ID] = "hf_secret"
    cache = tmp_path / "my-cache"
    code, lines, _ = run_minibert(
        f"import minibert\n"
        f"model = minibert.load_pretrained({REPO_ID!r}, cache_dir={str(cache)!r}, token='hf_secret')\n"
        f"print(model.source_dir)\n"
        f"print(minibert.load_tokenizer({REPO_ID!r}, cache_dir={str(cache)!r}, token='hf_secret').tokenize('the cat'))",
        env)
    folder = cache / f"models--{REPO_ID.replace('/', '--')}" / "snapshots" / commit
    assert (code, lines) == (0, [str(folder), "['the', 'cat']"])
    assert not (hf_home / "hub").exists()                        # nothing in the default cache
    assert {authorization for _, _, authorization in fake_hub.requests} == {"Bearer hf_secret"}


def test_local_files_only_reads_the_cache_and_asks_nothing(fake_hub, env, hf_home, tmp_path):
    commit = fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    assert resolve(REPO_ID, env) == snapshot(hf_home, REPO_ID, commit)
    asked = len(fake_hub.requests)
    code, lines, _ = run_minibert(f"print(resolve_model_dir({REPO_ID!r}, local_files_only=True))\n"
                                  f"resolve_model_dir('someone/elsewhere', local_files_only=True)", env)
    assert code == 1 and lines == [
        str(snapshot(hf_home, REPO_ID, commit)),
        f"error: model 'someone/elsewhere' is neither an existing file or folder nor in the Hugging Face cache "
        f"({hf_home / 'hub'}), and local_files_only=True; download it once with the network on, or give the path "
        f"of a folder that holds it"]
    assert len(fake_hub.requests) == asked


def test_a_tokenizer_never_downloaded_or_never_there_is_named_as_such_not_as_a_bad_copy(fake_hub, env, hf_home, tmp_path):
    # What transformers' AutoModel leaves: the config and the weights, no tokenizer file.
    files = model_files(tmp_path / "original")
    folder = prepare_cache(hf_home, REPO_ID, {name: files[name] for name in ("config.json", "model.safetensors")})
    code, lines, _ = run_minibert(f"import minibert\nminibert.load_tokenizer({REPO_ID!r})", env, HF_HUB_OFFLINE="1")
    assert (code, lines) == (1, [
        f"error: {REPO_ID}: the Hugging Face cache ({folder}) has its config but no tokenizer file (vocab.txt, "
        f"tokenizer.json, spiece.model, spm.model, vocab.json): it was never downloaded, and HF_HUB_OFFLINE is set; "
        f"download it once with the network on (unset HF_HUB_OFFLINE), or give the path of a folder that holds it"])
    assert fake_hub.requests == []
    fake_hub.add(REPO_ID, {name: files[name] for name in ("config.json", "model.safetensors")})
    code, lines, _ = run_minibert(f"import minibert\nminibert.load_tokenizer({REPO_ID!r})", env)
    assert (code, lines) == (1, [f"error: {REPO_ID}: the repository has no tokenizer file (vocab.txt, tokenizer.json, "
                                 f"spiece.model, spm.model, vocab.json); give the path of a folder that holds the "
                                 f"model's tokenizer"])                 # online: not a bad copy either


def test_quiet_silences_the_hubs_progress_bars(fake_hub, env, tmp_path):
    fake_hub.add(REPO_ID, model_files(tmp_path / "original"))
    fake_hub.add("someone/other", model_files(tmp_path / "other"))
    parse = ("from minibert.support.cli import ArgumentParser\nparser = ArgumentParser()\n"
             "parser.add_argument('--quiet', action='store_true')\n")
    _, _, loud = run_minibert(parse + f"parser.parse_args([])\nresolve_model_dir({REPO_ID!r})", env)
    _, _, quiet = run_minibert(parse + "parser.parse_args(['--quiet'])\nresolve_model_dir('someone/other')", env)
    assert "Fetching" in loud and quiet == ""


def test_paths_and_the_bundled_model(tmp_path, monkeypatch):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model_dir(folder) == folder
    assert resolve_model_dir(str(folder)) == folder
    assert resolve_model_dir(folder / "config.json") == folder
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bert-base-uncased").mkdir()                     # a local folder wins over the short name
    assert resolve_model_dir("bert-base-uncased") == Path("bert-base-uncased")

    monkeypatch.setattr(hub, "BUNDLED_MODEL_DIR", tmp_path / "pretrained" / "minibert-gutenberg")
    with pytest.raises(MiniBertError, match="bundled model is missing"):
        resolve_model_dir(None)
    (tmp_path / "pretrained" / "minibert-gutenberg").mkdir(parents=True)
    assert resolve_model_dir(None) == hub.BUNDLED_MODEL_DIR
    assert resolve_model_dir("minibert-gutenberg") == hub.BUNDLED_MODEL_DIR


# ==============================================================================
# Google's release archives (minibert/support/hub.py), against a
# local HTTP server (no internet).
#
# The server runs in a thread on 127.0.0.1 and serves archives the tests build.
# It logs each request's path and status, and can be told to answer 404 or to
# hang up half-way through a response.
# ==============================================================================

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


def make_archive_handler(state):
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
    with local_server(state, make_archive_handler(state)):
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
    fetch = hub.fetch

    def fetch_while_another_process_finishes(url, dest, progress=True):
        (cache / BERT_FOLDER / "uncased_L-2_H-128_A-2").mkdir(parents=True)
        (cache / BERT_FOLDER / "uncased_L-2_H-128_A-2" / "bert_config.json").write_text("{}")
        return fetch(url, dest, progress=progress)

    monkeypatch.setattr(hub, "fetch", fetch_while_another_process_finishes)
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
        archive = hub.ARCHIVES[name]
        assert archive_url(archive) == google + path
        assert archive_url(archive, "http://mirror/x/") == "http://mirror/x" + path


def test_an_unknown_archive_name():
    with pytest.raises(MiniBertError, match=r"unknown archive name 'tf:bert-huge'; known names: tf:bert-base-uncased"):
        resolve_model_dir("tf:bert-huge")
