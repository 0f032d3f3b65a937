"""Find a model folder by name: the bundled model, a path, a Hugging Face hub id,
or one of Google's release archives.

`resolve_model_dir(name_or_path)` is the one entry point the rest of minibert
uses. It tries, in this order:

* None or "minibert-gutenberg": the small model shipped inside the package;
* an existing path to a folder, or to a file inside it (`bert_config.json`),
  so a local folder that happens to be called "bert-base-uncased" wins;
* "tf:<name>", e.g. "tf:bert-base-uncased": Google's original TensorFlow
  release archive, downloaded by minibert's own small downloader (the
  second half of this file), because reading it is part of the checkpoint
  lesson;
* a short name, e.g. "bert-base-uncased", "bert-large-cased",
  "bert-base-chinese", "bert-uncased-L-2-H-128", "albert-base-v1": the Hugging
  Face repository holding the same weights ("google-bert/bert-base-uncased",
  "google/bert_uncased_L-2_H-128_A-2", "albert/albert-base-v1"; SHORT_NAMES),
  fetched as a hub id. These are the names transformers also resolves: the
  hub redirects each legacy name of a BERT or ALBERT model to the
  repository it moved to, and SHORT_NAMES holds the same table;
* a hub id "owner/name", with a revision (branch, tag or commit hash) as
  "owner/name@revision" or `revision=`: fetched by `huggingface_hub`.

Why `huggingface_hub`. It comes with `tokenizers`, so every minibert user
has it, and transformers and sentence-transformers download through it: a
model any of them fetched is found in the same cache (`$HF_HOME/hub`,
default `~/.cache/huggingface/hub`) without the network, and `hf cache ls`
or `hf cache rm` manage it. It honours its own settings (HF_HOME,
HF_HUB_CACHE, HF_ENDPOINT for a mirror, HF_TOKEN for private and gated
models, HF_HUB_OFFLINE), and it downloads safely (resumes, locks, renames
into place), which minibert therefore does not write again.

Which files. Only what minibert reads: config.json, the tokenizer files
(TOKENIZER_FILES below) and one weights file, model.safetensors when the
repository has it, else pytorch_model.bin; never both, and never the
TensorFlow, Flax or ONNX copies many repositories also hold. A tokenizer
alone (`weights=False`, as load_tokenizer asks) downloads no weights.

Keyword arguments, as huggingface_hub's own functions take them:
`revision`, `cache_dir` (the cache folder instead of $HF_HUB_CACHE; for a
"tf:" name, minibert's archive cache instead of $MINIBERT_CACHE), `token`
(instead of HF_TOKEN) and `local_files_only` (read the cache only, as
HF_HUB_OFFLINE does, for this call alone). A path or the bundled model
needs none of them and ignores the last three.

Offline. With HF_HUB_OFFLINE set (1, true, yes or on) or
local_files_only=True, only the cache is read: a model that is not there
is a one-line error saying so, and a file that is not there (the tokenizer
of a model whose weights alone were fetched) is named as never downloaded;
neither asks the network anything.

Progress bars. huggingface_hub's own switch (HF_HUB_DISABLE_PROGRESS_BARS,
or `huggingface_hub.utils.disable_progress_bars()`, which a script's
--quiet turns on: support/cli.py) governs its progress bars and those of minibert's
archive downloader alike.
"""

import contextlib
import gzip
import http.client
import os
import re
import secrets
import shutil
import stat
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from tqdm.auto import tqdm

from minibert.support import MiniBertError

BUNDLED_MODEL_NAME = "minibert-gutenberg"
BUNDLED_MODEL_DIR = Path(__file__).parent.parent / "pretrained" / "minibert-gutenberg"

# What minibert reads from a Hugging Face repository besides the weights:
# the config and every tokenizer file load_tokenizer may look at (WordPiece,
# ALBERT's and DeBERTa's SentencePiece, DeBERTa v1's BPE, and the files that
# say how to use them). A repository holds only some; the others are skipped.
CONFIG_AND_TOKENIZER_FILES = ["config.json", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                              "added_tokens.json", "vocab.txt", "spiece.model", "spm.model", "vocab.json",
                              "merges.txt"]
# The files that hold a tokenizer's vocabulary: a cached model has at least one.
TOKENIZER_ONLY_FILES = ["vocab.txt", "tokenizer.json", "spiece.model", "spm.model", "vocab.json"]
# The weights, in order of preference: minibert's own safetensors reader
# first, then torch.load. One unsharded file: minibert reads no shard index.
WEIGHTS_FILES = ["model.safetensors", "pytorch_model.bin"]

# "owner/name" or "owner/name@revision". Hub names begin with a letter or a
# digit, so "./x", "../x" or "/x" (paths that do not exist) never match.
HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^\s@]+))?")


def short_names():
    """The names BERT and ALBERT were released under -> the Hugging Face
    repository holding the same weights. The legacy names are those
    transformers resolves (the hub redirects each to the repository it moved
    to); the small BERTs' names are minibert's own, as their Google
    archives are named. A name with a Google archive stays reachable as
    "tf:<name>"."""
    bert = ["base-uncased", "large-uncased", "base-cased", "large-cased", "base-multilingual-uncased",
            "base-multilingual-cased", "base-chinese", "base-german-cased", "large-uncased-whole-word-masking",
            "large-cased-whole-word-masking", "large-uncased-whole-word-masking-finetuned-squad",
            "large-cased-whole-word-masking-finetuned-squad", "base-cased-finetuned-mrpc",
            "base-german-dbmdz-cased", "base-german-dbmdz-uncased"]
    names = {f"bert-{kind}": f"google-bert/bert-{kind}" for kind in bert}
    for layers in (2, 4, 6, 8, 10, 12):  # "Well-Read Students Learn Better": A = H / 64 heads
        for hidden in (128, 256, 512, 768):
            names[f"bert-uncased-L-{layers}-H-{hidden}"] = f"google/bert_uncased_L-{layers}_H-{hidden}_A-{hidden // 64}"
    for version in ("v1", "v2"):
        for size in ("base", "large", "xlarge", "xxlarge"):
            names[f"albert-{size}-{version}"] = f"albert/albert-{size}-{version}"
    return names


SHORT_NAMES = short_names()

# How error messages list the names, without spelling out all 24 small BERTs
# (Google's archives by their "tf:" names: the second half of this file).
ARCHIVE_NAMES_SHORT = ("tf:bert-base-uncased, tf:bert-base-cased, tf:bert-large-uncased, "
                       "tf:bert-uncased-L-{2,4,6,8,10,12}-H-{128,256,512,768}, "
                       "tf:albert-{base,large,xlarge,xxlarge}-v2")
KNOWN_NAMES_SHORT = (f"{BUNDLED_MODEL_NAME}, bert-{{base,large}}-{{uncased,cased}}, bert-base-multilingual-cased, "
                     "bert-base-chinese (and the other legacy names transformers resolves), "
                     "bert-uncased-L-{2,4,6,8,10,12}-H-{128,256,512,768}, albert-{base,large,xlarge,xxlarge}-{v1,v2}, "
                     f"any Hugging Face hub id (owner/name), or {ARCHIVE_NAMES_SHORT}")


def known_model_names():
    """Every name resolve_model_dir knows without asking the hub: the bundled
    model, the short names, then Google's archives ("tf:...")."""
    return [BUNDLED_MODEL_NAME, *SHORT_NAMES, *archive_names()]


def bundled_model_dir():
    if not BUNDLED_MODEL_DIR.is_dir():
        raise MiniBertError(f"the bundled model is missing from this installation: {BUNDLED_MODEL_DIR}")
    return BUNDLED_MODEL_DIR


# ---------------------------------------------------------------------------
# Resolving a name or path
# ---------------------------------------------------------------------------

def resolve_model_dir(name_or_path, *, force_download=False, revision=None, cache_dir=None, token=None,
                      local_files_only=False, weights=True):
    """Turn what the user typed into the folder holding the model's files.

    `force_download=True` downloads a hub id or a Google archive again (e.g.
    after an error saying the cached copy is bad); it does nothing for a path
    or the bundled model, which minibert never downloaded. `revision` picks
    a hub id's branch, tag or commit. `cache_dir`, `token` and
    `local_files_only` are huggingface_hub's (see the module docstring).
    `weights=False` fetches a hub model's config and tokenizer only.
    """
    if name_or_path is None or name_or_path == BUNDLED_MODEL_NAME:
        refuse_revision(revision, BUNDLED_MODEL_NAME)
        return bundled_model_dir()
    text = os.fspath(name_or_path)
    if text == "":
        raise MiniBertError(f"model name or path is empty; expected a folder, a file in it, or "
                            f"{KNOWN_NAMES_SHORT}")
    path = Path(text).expanduser()
    from minibert.support.outputs import restore_interrupted
    restore_interrupted(path)            # a folder a killed write left renamed away comes back
    if path.is_dir() or path.is_file():
        refuse_revision(revision, text)
        return path if path.is_dir() else path.parent
    if text.startswith(ARCHIVE_PREFIX):
        refuse_revision(revision, text)
        return archive_dir(text, force_download=force_download, cache_dir=cache_dir,
                           local_files_only=local_files_only)
    why = reads_as_path(text)
    if why and text not in SHORT_NAMES:
        raise MiniBertError(f"model {text}: no such file or folder (read as a path: {why}; a hub id is "
                            f"owner/name)")
    match = HUB_ID.fullmatch(SHORT_NAMES.get(text, text))
    if match is None:
        raise MiniBertError(f"model {text!r} is neither an existing file or folder nor a known name or hub id; "
                            f"expected {KNOWN_NAMES_SHORT}")
    if match["revision"] is not None and revision is not None and match["revision"] != revision:
        raise MiniBertError(f"model {text!r} names revision {match['revision']!r} but revision={revision!r} "
                            f"was given; give one of them")
    return download_from_hub(match["repo"], match["revision"] or revision, force_download=force_download,
                             weights=weights, typed=text, cache_dir=cache_dir, token=token,
                             local_files_only=local_files_only)


def archive_dir(name, *, force_download, cache_dir, local_files_only):
    """A Google archive's folder through minibert's downloader, which shows
    its progress unless huggingface_hub's progress bars are off (progress_bars_on);
    local_files_only=True: only if it is in the cache already."""
    if local_files_only:
        short = name[len(ARCHIVE_PREFIX):]
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        if short in archive_names_bare() and not (cache / short).is_dir():
            raise MiniBertError(f"model {name!r} was never downloaded into {cache} and local_files_only=True; "
                                f"download it once with the network on, or give the path of a folder that holds it")
    return download_archive(name, force_download=force_download, cache_dir=cache_dir,
                            progress=progress_bars_on())


def archive_names_bare():
    return {name[len(ARCHIVE_PREFIX):] for name in archive_names()}


def progress_bars_on():
    """huggingface_hub's switch for progress bars (HF_HUB_DISABLE_PROGRESS_BARS,
    disable_progress_bars()), which minibert's own downloads follow too."""
    from huggingface_hub.utils import are_progress_bars_disabled
    return not are_progress_bars_disabled()


def reads_as_path(text):
    """Why `text`, which names nothing on disk, must be a mistyped path rather
    than a hub id, or None: it starts like a path, has more than a hub id's
    one "/" before any @revision, or its first part is a folder here
    (runs/quick-sst2x beside runs/)."""
    if text.startswith(("/", "./", "../", "~", ".\\")) or text in (".", ".."):
        return f"it starts with {text[:2] if text[:1] == '.' else text[:1]}"
    name = text.split("@", 1)[0]
    if name.count("/") > 1 or os.sep != "/" and os.sep in name:
        return "a hub id has one /"
    first = name.split("/", 1)[0]
    if "/" in name and first and Path(first).is_dir():
        return f"{first}/ is a folder here"
    return None


def refuse_revision(revision, text):
    """A folder, the bundled model or a Google archive has one version only."""
    if revision is not None:
        raise MiniBertError(f"revision= applies to Hugging Face hub ids only, not to {text!r}")


# ---------------------------------------------------------------------------
# The Hugging Face hub, through huggingface_hub
# ---------------------------------------------------------------------------

def hub_offline():
    """True if HF_HUB_OFFLINE is set now. huggingface_hub reads it once, when
    it is imported; reading it again here also honours a later setting."""
    from huggingface_hub import constants
    value = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return constants.HF_HUB_OFFLINE or value in ("1", "ON", "YES", "TRUE")


def download_from_hub(repo_id, revision=None, *, force_download=False, weights=True, typed=None, cache_dir=None,
                      token=None, local_files_only=False):
    """The snapshot folder of `repo_id` at `revision` (default: the main
    branch) in the Hugging Face cache (`cache_dir`, default $HF_HUB_CACHE),
    with config.json, the tokenizer files and (if `weights`) one weights
    file, downloading what is missing; `token` and `local_files_only` are
    passed to huggingface_hub as they are.

    Two calls of snapshot_download: the small files first, which also says
    which commit `revision` is (the snapshot folder's name); then the one
    weights file chosen (weights_file), at that same commit. Any failure is
    a one-line MiniBertError naming the id (hub_error).
    """
    import huggingface_hub  # here, not at the top: only hub ids need it
    shown = repo_id if revision is None else f"{repo_id}@{revision}"
    # Why only the cache may be read, for the messages; None when the network may be used.
    offline = "local_files_only=True" if local_files_only else "HF_HUB_OFFLINE is set" if hub_offline() else None
    where = dict(cache_dir=cache_dir, token=token, library_name="minibert")
    try:
        # Offline, ask the cache for config.json alone: huggingface_hub would
        # call the snapshot incomplete if a tokenizer file the repository
        # has were missing, though another tokenizer file may be all we read.
        folder = Path(huggingface_hub.snapshot_download(
            repo_id, revision=revision, allow_patterns=["config.json"] if offline else CONFIG_AND_TOKENIZER_FILES,
            local_files_only=offline is not None, force_download=force_download, **where))
        if not (folder / "config.json").is_file():
            raise MiniBertError(f"{shown}: the repository has no config.json; minibert reads Hugging Face "
                                f"models with config.json and model.safetensors or pytorch_model.bin")
        if weights:
            chosen = weights_file(repo_id, folder, offline, token)
            if chosen is None:
                raise no_weights(shown, folder, offline)
            if force_download or not (folder / chosen).is_file():
                # The folder's name is the commit: the file comes from the same version as the config.
                huggingface_hub.snapshot_download(repo_id, revision=folder.name, allow_patterns=[chosen],
                                                  force_download=force_download, **where)
        elif not any((folder / name).is_file() for name in TOKENIZER_ONLY_FILES):
            if offline:
                raise MiniBertError(f"{shown}: the Hugging Face cache ({folder}) has its config but no tokenizer file "
                                    f"({', '.join(TOKENIZER_ONLY_FILES)}): it was never downloaded, and {offline}; "
                                    f"download it once with the network on{unset(offline)}, or give the path of a "
                                    f"folder that holds it")
            raise MiniBertError(f"{shown}: the repository has no tokenizer file ({', '.join(TOKENIZER_ONLY_FILES)}); "
                                f"give the path of a folder that holds the model's tokenizer")
    except MiniBertError:
        raise
    except Exception as e:  # huggingface_hub's errors, the network's and the disk's: one line each
        raise hub_error(shown, repo_id, revision, e, offline, typed or shown, cache_dir) from None
    return folder


def weights_file(repo_id, folder, offline, token=None):
    """Which weights file to read from the snapshot `folder`, or None.

    One already in the cache is used as it is (transformers may have put it
    there). Otherwise the hub's list of the repository's files at that
    commit (the folder's name) says which ones exist; offline, nothing does.
    """
    import huggingface_hub
    for name in WEIGHTS_FILES:
        if (folder / name).is_file():
            return name
    if offline:
        return None
    listed = {entry.rfilename for entry in huggingface_hub.model_info(repo_id, revision=folder.name, token=token).siblings}
    return next((name for name in WEIGHTS_FILES if name in listed), None)


def no_weights(shown, folder, offline):
    if offline:
        return MiniBertError(f"{shown}: the Hugging Face cache has its config but no model.safetensors or "
                             f"pytorch_model.bin ({folder}): it was never downloaded, and {offline}; download it "
                             f"once with the network on{unset(offline)}, or give the path of a folder that holds it")
    return MiniBertError(f"{shown}: the repository has neither model.safetensors nor pytorch_model.bin; "
                         f"minibert reads one unsharded checkpoint in either format")


def unset(offline):
    """How to turn the network on again, for an offline message."""
    return " (unset HF_HUB_OFFLINE)" if offline == "HF_HUB_OFFLINE is set" else ""


def hub_error(shown, repo_id, revision, error, offline, typed, cache_dir=None):
    """The one-line MiniBertError for what huggingface_hub raised.

    huggingface_hub's own messages span several lines and speak of its
    arguments (local_files_only=...); these say what minibert was asked for,
    what it expected, and what to do.
    """
    from huggingface_hub import constants, utils as errors  # utils: where every version keeps the errors
    endpoint, cache = constants.ENDPOINT, cache_dir or constants.HF_HUB_CACHE
    login = "set HF_TOKEN (or run `hf auth login`)"
    if isinstance(error, errors.GatedRepoError):
        message = (f"{shown} is a gated model: accept its terms at {endpoint}/{repo_id}, then {login}")
    elif isinstance(error, errors.RepositoryNotFoundError):
        message = (f"model {typed!r} is neither an existing file or folder nor a model on the Hugging Face hub "
                   f"({endpoint}); if it is a private model, {login}")
    elif isinstance(error, errors.RevisionNotFoundError):
        message = (f"{repo_id} has no revision {revision!r} on the Hugging Face hub ({endpoint}); expected a "
                   f"branch, a tag or a commit hash")
    elif offline and isinstance(error, FileNotFoundError):  # LocalEntryNotFoundError is one too
        message = (f"model {typed!r} is neither an existing file or folder nor in the Hugging Face cache ({cache}), "
                   f"and {offline}; download it once with the network on{unset(offline)}, or "
                   f"give the path of a folder that holds it")
    elif isinstance(error, errors.LocalEntryNotFoundError):
        # Not cached, and the hub did not answer (its error is the cause) or answered with an error.
        cause = error.__cause__ or error
        answer = (http_answer(cause) if isinstance(cause, errors.HfHubHTTPError)
                  else f"could not reach the Hugging Face hub at {endpoint} ({type(cause).__name__})")
        message = (f"{shown}: {answer} and it is not in the cache ({cache}); check the network or HF_ENDPOINT, "
                   f"or give the path of a folder that holds it")
    elif isinstance(error, errors.HfHubHTTPError) and error.response is not None:
        message = f"{shown}: {http_answer(error)}"
    elif isinstance(error, (ConnectionError, TimeoutError)) or "Connect" in type(error).__name__:
        # what the HTTP client raises when the download itself cannot reach the hub
        message = (f"{shown}: could not reach the Hugging Face hub at {endpoint} ({type(error).__name__}); "
                   f"check the network or HF_ENDPOINT, or give the path of a folder that holds it")
    elif isinstance(error, errors.HFValidationError):
        message = f"model {typed!r} is not a valid Hugging Face hub id (owner/name, letters, digits, '-', '_', '.')"
    elif isinstance(error, OSError) and error.strerror:
        message = f"{shown}: could not download into the Hugging Face cache ({cache}): {error.strerror}"
    else:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        message = (f"{shown}: could not download from the Hugging Face hub ({endpoint}): "
                   f"{type(error).__name__}: {first_line}")
    return MiniBertError(message)


def http_answer(error):
    """"the Hugging Face hub at URL answered HTTP 500 (Internal Server Error)" for an HfHubHTTPError."""
    from huggingface_hub import constants
    response = error.response  # an httpx response (huggingface_hub 1.0 on) or a requests one (before)
    if response is None:
        return f"the Hugging Face hub at {constants.ENDPOINT} failed ({type(error).__name__})"
    reason = getattr(response, "reason_phrase", None) or getattr(response, "reason", "")
    return f"the Hugging Face hub at {constants.ENDPOINT} answered HTTP {response.status_code} ({reason})"


# ---------------------------------------------------------------------------
# Errors inside a cached download
# ---------------------------------------------------------------------------

def explain_cache_error(error, folder):
    """`error`, raised while loading `folder`, plus which cached download it is, if it is one.

    A download can arrive whole and still hold a file that does not load (a
    damaged checkpoint, a config that disagrees with it). Without this note
    the user would not know that the folder is a cache, nor how to replace
    it. Returns `error` itself when `folder` is no cached download.
    """
    archive = cached_archive_of(folder)
    if archive is not None:
        name, target = archive
        return MiniBertError(f"{error} (the cached download of {name} in {target} is bad; "
                             f"{refresh_advice(name, target)})")
    folder = Path(folder)
    # huggingface_hub's layout: <cache>/models--<owner>--<name>/snapshots/<commit>/
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        repo_id = folder.parent.parent.name[len("models--"):].replace("--", "/")
        return MiniBertError(f"{error} (the Hugging Face cache's copy of {repo_id} in {folder} is bad; to "
                             f"download it again, use force_download=True, or remove it with "
                             f"`hf cache rm model/{repo_id}`)")
    return error


# ==============================================================================
# Google's original release archives: download, check, unpack, cache.
#
# BERT and ALBERT were first released by Google as TensorFlow checkpoints
# packed in one .zip or .tar.gz each. Reading those checkpoints without
# TensorFlow is part of the checkpoint lesson (checkpoints/tf_bundle.py), so
# minibert keeps a small downloader of its own for them. Everything on the
# Hugging Face hub goes through `huggingface_hub` instead (above).
#
# An archive is asked for by its name with the prefix "tf:", e.g.
# "tf:bert-base-uncased", "tf:bert-uncased-L-2-H-128", "tf:albert-base-v2"
# (`archive_names()` lists all 31). It is downloaded once into the cache
# folder, `$MINIBERT_CACHE` if set, else `~/.cache/minibert`:
#
#     <cache>/.<random>.uncased_L-12_H-768_A-12.zip     while downloading
#     <cache>/.bert-base-uncased.<random>.../           while unpacking
#     <cache>/bert-base-uncased/uncased_L-12_H-768_A-12/
#         bert_config.json  vocab.txt  bert_model.ckpt.index  ...
#
# and found there on every later call without touching the network. The
# final folder appears only by renaming a completely unpacked one, so its
# existing means the model is complete. A failed attempt deletes what it
# wrote (only a process killed outright can leave a hidden ".<...>" file or
# folder, safe to delete); an interrupted download starts again from zero. Two
# processes asking for the same name at once both download it: the first to
# finish puts its folder in place, the other one finds it there and deletes
# its own copy. To install an archive by hand (a machine without internet),
# unpack it into `<cache>/<name>/`, or give the unpacked folder's path.
#
# Verification. Before anything is unpacked, the archive is read to its end:
# every zip member's CRC-32 is checked, and for a .tar.gz the gzip trailer's
# CRC-32 and length (which `tarfile` alone never reaches). Member names that
# would land outside the folder are refused, and so is an archive that would
# unpack to more than `max_unpacked_bytes` (20 times its own size plus 100
# MiB, or `$MINIBERT_MAX_UNPACKED_BYTES`): the sizes the members declare are
# added up before unpacking, and the bytes actually written are counted
# while unpacking. Google publishes no digests for these archives, so the
# length the server announces and the CRCs are all there is to check.
#
# Refreshing. An archive can unpack fine and still not load (a damaged
# checkpoint inside it, a missing config). Errors from loading a cached
# download say which cache folder it is; `force_download=True` (on
# load_pretrained and load_tokenizer) downloads it again and replaces the
# folder, as does deleting `<cache>/<name>/` by hand.
#
# `MINIBERT_DOWNLOAD_URL_PREFIX`, if set, replaces the
# `https://storage.googleapis.com` at the start of every archive's URL, e.g.
# to use a mirror or, in the tests, a local server.
# ==============================================================================


ARCHIVE_PREFIX = "tf:"
OFFICIAL_URL_PREFIX = "https://storage.googleapis.com"
URL_PREFIX_VARIABLE = "MINIBERT_DOWNLOAD_URL_PREFIX"
CACHE_VARIABLE = "MINIBERT_CACHE"
MAX_UNPACKED_VARIABLE = "MINIBERT_MAX_UNPACKED_BYTES"
CONFIG_FILE_NAMES = ("config.json", "bert_config.json", "albert_config.json")
TIMEOUT_SECONDS = 60
CHUNK_BYTES = 1 << 20
# The default unpacking limit: MAX_UNPACK_RATIO * archive size + UNPACK_ALLOWANCE_BYTES.
MAX_UNPACK_RATIO = 20
UNPACK_ALLOWANCE_BYTES = 100 << 20

# What a damaged archive raises from inside zipfile, tarfile, gzip and zlib.
CORRUPT_ARCHIVE_ERRORS = (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, zlib.error,
                          EOFError, NotImplementedError)


@dataclass(frozen=True)
class GoogleArchive:
    """One release archive: its short name (without "tf:") and where it is."""
    name: str
    url: str

    @property
    def archive_name(self):
        return self.url.rsplit("/", 1)[-1]


def google_archives():
    """The registry: every archive's short name and its official URL."""
    bert = f"{OFFICIAL_URL_PREFIX}/bert_models"
    archives = [
        GoogleArchive("bert-base-uncased", f"{bert}/2018_10_18/uncased_L-12_H-768_A-12.zip"),
        GoogleArchive("bert-base-cased", f"{bert}/2018_10_18/cased_L-12_H-768_A-12.zip"),
        GoogleArchive("bert-large-uncased", f"{bert}/2018_10_18/uncased_L-24_H-1024_A-16.zip"),
    ]
    # The 24 small BERTs of "Well-Read Students Learn Better" (2020):
    # L layers, H hidden units, A = H / 64 attention heads.
    for layers in (2, 4, 6, 8, 10, 12):
        for hidden in (128, 256, 512, 768):
            archives.append(GoogleArchive(
                f"bert-uncased-L-{layers}-H-{hidden}",
                f"{bert}/2020_02_20/uncased_L-{layers}_H-{hidden}_A-{hidden // 64}.zip"))
    for size in ("base", "large", "xlarge", "xxlarge"):
        archives.append(GoogleArchive(
            f"albert-{size}-v2", f"{OFFICIAL_URL_PREFIX}/albert_models/albert_{size}_v2.tar.gz"))
    return {archive.name: archive for archive in archives}


ARCHIVES = google_archives()


def archive_names():
    """Every name download_archive accepts, "tf:" included."""
    return [ARCHIVE_PREFIX + name for name in ARCHIVES]


def default_cache_dir():
    """$MINIBERT_CACHE if set, else ~/.cache/minibert (not created here)."""
    return Path(os.environ.get(CACHE_VARIABLE) or "~/.cache/minibert").expanduser()


def archive_url(archive, url_prefix=None):
    """The URL to fetch: Google's host replaced by `url_prefix`, else by
    $MINIBERT_DOWNLOAD_URL_PREFIX, if either is set."""
    prefix = url_prefix or os.environ.get(URL_PREFIX_VARIABLE)
    if not prefix:
        return archive.url
    return prefix.rstrip("/") + archive.url[len(OFFICIAL_URL_PREFIX):]


def find_config_dir(folder, max_depth=3):
    """The shallowest folder under `folder` holding a config file, or None.

    Google's archives put everything in one top-level folder
    (uncased_L-12_H-768_A-12/, albert_base/), so the config is usually one
    level down.
    """
    level = [Path(folder)]
    for _ in range(max_depth):
        for candidate in level:
            if any((candidate / name).is_file() for name in CONFIG_FILE_NAMES):
                return candidate
        level = sorted(sub for candidate in level for sub in candidate.iterdir() if sub.is_dir())
    return None


def cached_archive_of(folder):
    """("tf:<name>", its cache folder) if `folder` lies in an archive's cache folder, else None."""
    cache = default_cache_dir().resolve()
    folder = Path(folder).resolve()
    for name in ARCHIVES:
        target = cache / name
        if folder == target or target in folder.parents:
            return ARCHIVE_PREFIX + name, target
    return None


# ---------------------------------------------------------------------------
# Downloading an archive
# ---------------------------------------------------------------------------

def download_archive(name, *, cache_dir=None, url_prefix=None, progress=True, force_download=False):
    """Download, check and unpack a Google archive once; return the folder with its config.

    `name` is "tf:<name>" (or the bare registry name). A second call finds
    the unpacked folder in the cache and does no network access.
    `force_download` downloads it again and replaces the cached folder.
    """
    short = name[len(ARCHIVE_PREFIX):] if name.startswith(ARCHIVE_PREFIX) else name
    archive = ARCHIVES.get(short)
    if archive is None:
        raise MiniBertError(f"unknown archive name {name!r}; known names: {ARCHIVE_NAMES_SHORT}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / short
    if target.is_dir() and not force_download:
        return cached_config_dir(name, target)

    created_cache = not cache.exists()
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MiniBertError(f"cannot create the cache folder {cache} ({e.strerror}); "
                            f"set {CACHE_VARIABLE} to a writable folder") from None
    url = archive_url(archive, url_prefix)
    # Temporary names start with "." and hold the archive's name, whose
    # ending (.zip, .tar.gz) says how to read it.
    fd, download = tempfile.mkstemp(prefix=".", suffix=f".{archive.archive_name}", dir=cache)
    os.close(fd)
    download = Path(download)
    unpacked = cache / f".{short}.{secrets.token_hex(4)}"  # a name no other attempt uses
    try:
        fetch(url, download, progress=progress)
        try:
            unpack_archive(download, unpacked)
        except MiniBertError as e:
            raise MiniBertError(f"{e} (downloaded from {url}; nothing was kept)") from None
        put_in_place(unpacked, target, replace=force_download)
    except BaseException:  # a failed attempt (or Ctrl-C) leaves nothing behind
        download.unlink(missing_ok=True)
        shutil.rmtree(unpacked, ignore_errors=True)
        if created_cache:
            with contextlib.suppress(OSError):  # only if empty: another process may be using it
                cache.rmdir()
        raise
    download.unlink()  # unpacked and in place: the archive itself is not kept

    found = find_config_dir(target)
    if found is None:
        raise MiniBertError(f"{archive.url}: the archive unpacked into {target} holds no "
                            f"{' / '.join(CONFIG_FILE_NAMES)}; {refresh_advice(name, target)}")
    return found


def put_in_place(unpacked, target, *, replace):
    """Rename the finished folder `unpacked` to `target`, in one step.

    If `target` already exists, either it is the cached copy that
    force_download replaces (`replace`), or another process finished the
    same download first: then its folder is kept and ours deleted.
    """
    if target.is_dir() and replace:
        # Out of the way first, in one atomic rename: a process killed during
        # the slow rmtree leaves a hidden leftover, never a half-deleted model.
        trash = target.with_name(f".{target.name}.{os.getpid()}.deleting")
        os.replace(target, trash)
        shutil.rmtree(trash)
    try:
        os.replace(unpacked, target)
    except OSError:
        if not target.is_dir():
            raise
        shutil.rmtree(unpacked)  # another process was quicker: use its folder


def fetch(url, dest, *, progress=True):
    """Download `url` into the (existing, empty) file `dest`, checking its length.

    Any failure raises a one-line MiniBertError naming the URL.
    """
    request = urllib.request.Request(url, headers={"User-Agent": "minibert"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response, \
                open(dest, "wb") as f:
            length = response.headers.get("Content-Length", "")
            expected = int(length) if length.isdigit() else None
            with tqdm(total=expected, unit="B", unit_scale=True, unit_divisor=1024,
                      desc=Path(url).name, disable=not progress) as meter:
                while chunk := response.read(CHUNK_BYTES):
                    f.write(chunk)
                    meter.update(len(chunk))
    except urllib.error.HTTPError as e:
        e.close()  # an HTTPError holds the open connection
        raise MiniBertError(f"could not download {url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise MiniBertError(f"could not download {url}: {e.reason}") from None
    except (OSError, http.client.HTTPException) as e:
        raise MiniBertError(f"could not download {url}: {type(e).__name__}: {e} "
                            f"(run again to start over)") from None
    got = Path(dest).stat().st_size
    if expected is not None and got != expected:
        raise MiniBertError(f"could not download {url}: the connection ended after {got} "
                            f"of {expected} bytes (run again to start over)")
    return dest


def cached_config_dir(name, target):
    """The folder with the config inside the finished download `target`."""
    found = find_config_dir(target)
    if found is None:
        raise MiniBertError(f"{target}: cached model folder has no "
                            f"{' / '.join(CONFIG_FILE_NAMES)}; {refresh_advice(name, target)}")
    return found


def refresh_advice(name, target):
    """How to replace the cached download of `name` in `target`, for error messages."""
    return f"to download {name} again, use force_download=True or delete {target}"


# ---------------------------------------------------------------------------
# Checking and unpacking, safely
# ---------------------------------------------------------------------------

def unpack_archive(archive, dest, *, max_bytes=None):
    """Check a .zip or .tar.gz, then unpack it into the new folder `dest`, all or nothing.

    First the archive is read to its end and checked (check_zip, check_tar),
    before anything is written: a corrupt archive is deleted, so that the
    next attempt downloads it again. A member whose name would land outside
    the folder ("../x", "/etc/x"), or members adding up to more than
    `max_bytes` (default: max_unpacked_bytes(archive)), make the whole
    archive be refused.

    Members are then written into a temporary folder next to `dest`, which
    is renamed to `dest` only when everything is out, counting the bytes
    written against the same limit. Links and device files are skipped (the
    releases have none).
    """
    archive, dest = Path(archive), Path(dest)
    if archive.name.endswith(".zip"):
        check, unpack = check_zip, unpack_zip
    elif archive.name.endswith((".tar.gz", ".tgz", ".tar")):
        check, unpack = check_tar, unpack_tar
    else:
        raise MiniBertError(f"{archive}: expected a .zip or .tar.gz archive")
    limit = max_unpacked_bytes(archive) if max_bytes is None else max_bytes
    try:
        check(archive, limit)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name.lstrip('.')}.", suffix=".unpacking",
                                    dir=dest.parent))
        try:
            unpack(archive, tmp, ByteBudget(archive, limit))
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    except CORRUPT_ARCHIVE_ERRORS as e:
        archive.unlink()
        raise MiniBertError(f"{archive}: corrupt archive ({e}); it was deleted, "
                            f"run again to download it anew") from None


def max_unpacked_bytes(archive):
    """How many bytes `archive` may unpack to.

    $MINIBERT_MAX_UNPACKED_BYTES if set, else 20 times the archive's size
    plus 100 MiB. Google's archives hold mostly float32 weights, which barely
    compress, so they unpack to about their own size: the default is
    generous, yet refuses a "zip bomb" that would turn a few megabytes into
    gigabytes and fill the disk.
    """
    text = os.environ.get(MAX_UNPACKED_VARIABLE, "").strip()
    if text:
        if not text.isdigit():
            raise MiniBertError(f"{MAX_UNPACKED_VARIABLE}={text!r}: expected a whole number "
                                f"of bytes")
        return int(text)
    return MAX_UNPACK_RATIO * Path(archive).stat().st_size + UNPACK_ALLOWANCE_BYTES


def too_big(archive, amount, limit):
    return MiniBertError(f"{archive}: refusing to unpack {amount} bytes, more than the "
                         f"limit of {limit}; if you trust this archive, set "
                         f"{MAX_UNPACKED_VARIABLE} to a larger number of bytes")


class ByteBudget:
    """Counts the bytes unpacked so far and stops at the limit.

    The declared sizes were added up before unpacking, but they are only what
    the archive claims; counting the bytes actually written cannot be fooled.
    """

    def __init__(self, archive, limit):
        self.archive, self.limit, self.used = archive, limit, 0

    def spend(self, count):
        self.used += count
        if self.used > self.limit:
            raise too_big(self.archive, f"at least {self.used}", self.limit)


def safe_parts(name, archive):
    """The path parts of the archive member `name`; refuses names that escape."""
    posix = PurePosixPath(name.replace("\\", "/"))
    if (posix.is_absolute() or PureWindowsPath(name).drive or ".." in posix.parts):
        raise MiniBertError(f"{archive}: refusing to unpack member {name!r}: it would be "
                            f"written outside the target folder")
    return posix.parts


def check_members(archive, sizes, limit):
    """Refuse escaping names and a declared total over `limit`; `sizes` is [(name, bytes)]."""
    total = 0
    for name, size in sizes:
        safe_parts(name, archive)
        total += size
    if total > limit:
        raise too_big(archive, total, limit)


def copy_member(source, target, budget):
    target.parent.mkdir(parents=True, exist_ok=True)
    with source, open(target, "wb") as out:
        while chunk := source.read(CHUNK_BYTES):
            budget.spend(len(chunk))
            out.write(chunk)


def check_zip(archive, limit):
    """Check names and declared sizes, then read every member to its end.

    Reading a zip member to its end makes zipfile compare its CRC-32 with
    the one stored in the archive; testzip does that for every member and
    names the first that fails.
    """
    with zipfile.ZipFile(archive) as zf:
        check_members(archive, [(info.filename, info.file_size) for info in zf.infolist()], limit)
        bad = zf.testzip()
        if bad is not None:
            raise zipfile.BadZipFile(f"member {bad!r} fails its CRC-32 check")


def unpack_zip(archive, root, budget):
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            target = root.joinpath(*safe_parts(info.filename, archive))
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif stat.S_ISLNK(info.external_attr >> 16):
                continue  # a symbolic link (Unix zips keep the mode in the high bits)
            else:
                copy_member(zf.open(info), target, budget)


def check_tar(archive, limit):
    """Read a .tar.gz to its end, then check names and declared sizes.

    tarfile stops at the tar's own end marker and never reads the gzip
    trailer, whose CRC-32 and length are the only check on the data. So the
    whole gzip stream is decompressed here first (gzip checks the trailer on
    reaching it), stopping early if it grows past the limit.
    """
    if archive.name.endswith((".tar.gz", ".tgz")):
        unpacked = 0
        with gzip.open(archive, "rb") as stream:
            while chunk := stream.read(CHUNK_BYTES):
                unpacked += len(chunk)
                if unpacked > limit:
                    raise too_big(archive, f"at least {unpacked}", limit)
    with tarfile.open(archive) as tf:
        sizes = [(member.name, member.size if member.isfile() else 0) for member in tf]
    check_members(archive, sizes, limit)


def unpack_tar(archive, root, budget):
    with tarfile.open(archive) as tf:
        for member in tf:
            target = root.joinpath(*safe_parts(member.name, archive))
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                copy_member(tf.extractfile(member), target, budget)
            # links, devices, fifos: skipped
