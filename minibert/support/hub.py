"""Find a model folder by name: the bundled model, a path, a Hugging Face hub id,
or one of Google's release archives.

`resolve_model_dir(name_or_path)` is the one entry point the rest of minibert
uses. It tries, in this order:

* None or "minibert-gutenberg": the small model shipped inside the package;
* an existing path to a folder, or to a file inside it (`bert_config.json`),
  so a local folder that happens to be called "bert-base-uncased" wins;
* "tf:<name>", e.g. "tf:bert-base-uncased": Google's original TensorFlow
  release archive, downloaded by minibert's own small downloader
  (google_archives.py), because reading it is part of the checkpoint lesson;
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

import os
import re
from pathlib import Path

from minibert.support.errors import MiniBertError
from minibert.support.google_archives import (ARCHIVE_NAMES_SHORT, ARCHIVE_PREFIX, archive_names,
                                              cached_archive_of, download_archive, refresh_advice)

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

# How error messages list the names, without spelling out all 24 small BERTs.
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
    from minibert.support.folders import restore_interrupted
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
    from minibert.support.google_archives import default_cache_dir
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
