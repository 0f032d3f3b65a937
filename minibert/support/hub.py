"""Find a model folder by name: the bundled model, a local path, or a download.

`resolve_model_dir(name_or_path)` is the one entry point the rest of minibert
uses. It accepts

* None or "minibert-gutenberg": the small model shipped inside the package;
* a path to a folder (or to a file inside it, e.g. `bert_config.json`);
* a known name such as "bert-base-uncased" or "albert-base-v2": the official
  Google release archive is downloaded once into the cache folder, checked,
  unpacked, and found there on every later call without touching the network;
* a known Hugging Face hub name ("microsoft/deberta-base",
  "microsoft/deberta-v3-xsmall", "-small", "-base"): the repository has no
  archive, so its files (config.json, pytorch_model.bin and the tokenizer's)
  are downloaded one by one from https://huggingface.co/<name>/resolve/main/
  into a folder of the cache, each checked, resumed and cached the same way.

The cache folder is `$MINIBERT_CACHE` if set, else `~/.cache/minibert`:

    <cache>/bert-base-uncased.lock                        held while downloading
    <cache>/downloads/uncased_L-12_H-768_A-12.zip.part       while downloading
    <cache>/downloads/uncased_L-12_H-768_A-12.zip.part.json  which version it is
    <cache>/.bert-base-uncased.<random>.unpacking/         while unpacking
    <cache>/bert-base-uncased/uncased_L-12_H-768_A-12/     after unpacking
        bert_config.json  vocab.txt  bert_model.ckpt.index  ...

The archive itself is deleted once it has been unpacked. To install a model
by hand (e.g. on a machine without internet), download the archive yourself
and unpack it into `<cache>/<name>/`, or simply pass the unpacked folder's
path instead of the name.

A Hugging Face name's "/" becomes "--" in the cache:

    <cache>/microsoft--deberta-v3-base.lock
    <cache>/downloads/microsoft--deberta-v3-base/            while downloading
        config.json  pytorch_model.bin.part  pytorch_model.bin.part.json ...
    <cache>/microsoft--deberta-v3-base/                      when every file is in
        config.json  pytorch_model.bin  spm.model  tokenizer_config.json

The download folder is renamed to its final name only once every file is
there and checked, so the final folder existing means the model is complete.

One process at a time. Downloading and unpacking a name happen while holding
an exclusive lock (fcntl.flock) on `<cache>/<name>.lock`; a second process
asking for the same name waits, then finds the finished folder. The operating
system drops the lock when its process dies, even by `kill -9`, so a crash
never leaves the cache locked. Whatever a killed process left behind
(`.<name>.*.unpacking` folders) is deleted by the next process that takes the
lock. Where fcntl does not exist (Windows) there is no lock: do not download
the same name from two processes at once there.

Resuming. An interrupted download leaves `<archive>.part`, and beside it
`<archive>.part.json` with the URL, the total size and the server's name for
that version of the file (its ETag, else its Last-Modified date). The next
attempt asks only for the missing bytes (`Range`), and only if the file is
still that version (`If-Range`): a server whose file changed answers with the
whole new file, and the download starts again from zero. The total in the
answer's `Content-Range` must also match the saved size. A `.part` without
its `.part.json` is not trusted and is downloaded again from zero.

Verification. Before anything is unpacked, the archive is read to its end:
every zip member's CRC-32 is checked, and for a .tar.gz the gzip trailer's
CRC-32 and length (which `tarfile` alone never reaches). A corrupt archive is
deleted, so the next attempt downloads it again. Member names that would
land outside the folder are refused, and so is an archive that would unpack
to more than `max_unpacked_bytes` (20 times its own size plus 100 MiB, or
`$MINIBERT_MAX_UNPACKED_BYTES`): the sizes the members declare are added up
before unpacking, and the bytes actually written are counted while unpacking.

A Hugging Face model's files are checked as they arrive: a .json must parse,
and pytorch_model.bin (a zip archive, as torch.save writes it) must pass its
members' CRC-32 checks. A file that fails is deleted, to be downloaded anew.

Refreshing. A download can unpack fine and still not load (a damaged
checkpoint inside a valid archive, a missing config). Errors from loading a
cached download say which cache folder it is; `force_download=True` (on
resolve_model_dir, load_pretrained and load_tokenizer) deletes the cached copy
and downloads it again, as does deleting `<cache>/<name>/` by hand.

`MINIBERT_DOWNLOAD_URL_PREFIX`, if set, replaces the
`https://storage.googleapis.com` or `https://huggingface.co` at the start of
every official URL, e.g. to use a mirror or, in the tests, a local server:
MINIBERT_DOWNLOAD_URL_PREFIX=http://127.0.0.1:8000
"""

import contextlib
import gzip
import hashlib
import http.client
import os
import re
import shutil
import stat
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from tqdm import tqdm

from minibert.support.errors import MiniBertError
from minibert.support.fileio import read_json_object, write_json

try:
    import fcntl  # Unix only
except ImportError:
    fcntl = None

BUNDLED_MODEL_NAME = "minibert-gutenberg"
BUNDLED_MODEL_DIR = Path(__file__).parent.parent / "pretrained" / "minibert-gutenberg"

OFFICIAL_URL_PREFIX = "https://storage.googleapis.com"
HF_URL_PREFIX = "https://huggingface.co"
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
class KnownModel:
    """An official release archive: where it is and, when known, what it must be."""
    name: str
    url: str
    size: int | None = None    # bytes; None = trust the server's Content-Length
    sha256: str | None = None  # hex digest; None = not checked

    @property
    def archive_name(self):
        return self.url.rsplit("/", 1)[-1]

    @property
    def folder_name(self):
        """Its folder in the cache (and the name of its lock file)."""
        return self.name

    @property
    def download_name(self):
        """What `<cache>/downloads/` holds while it downloads: the archive."""
        return self.archive_name


@dataclass(frozen=True)
class HubModel:
    """A model repository on the Hugging Face hub, downloaded file by file:
    `files` must all be there; `optional_files` are fetched when the
    repository has them (a 404 for one is not an error)."""
    name: str                       # "microsoft/deberta-v3-base"
    files: tuple
    optional_files: tuple = ()

    def url(self, file_name):
        return f"{HF_URL_PREFIX}/{self.name}/resolve/main/{file_name}"

    @property
    def folder_name(self):
        return self.name.replace("/", "--")

    @property
    def download_name(self):
        """The folder in `<cache>/downloads/` that gathers the files."""
        return self.folder_name


def hub_models():
    """The Hugging Face registry: DeBERTa v1 and v3 (docs/deberta.md 4.1).
    v1's tokenizer is GPT-2's byte-level BPE (vocab.json + merges.txt), v3's
    a SentencePiece spm.model; tokenizer_config.json says how to use them
    (both do_lower_case false, the default when it is absent)."""
    v1 = ("config.json", "pytorch_model.bin", "vocab.json", "merges.txt")
    v3 = ("config.json", "pytorch_model.bin", "spm.model")
    models = [HubModel("microsoft/deberta-base", v1, ("tokenizer_config.json",))]
    models += [HubModel(f"microsoft/deberta-v3-{size}", v3, ("tokenizer_config.json",))
               for size in ("xsmall", "small", "base")]
    return {model.name: model for model in models}


def official_models():
    """The registry: every downloadable name and its official URL.

    Sizes and checksums are left as None: minibert does not pin them (Google
    has not published digests for these archives), so only the length the
    server announces and the archive's own CRC-32 checks are checked.
    """
    bert = f"{OFFICIAL_URL_PREFIX}/bert_models"
    models = [
        KnownModel("bert-base-uncased", f"{bert}/2018_10_18/uncased_L-12_H-768_A-12.zip"),
        KnownModel("bert-base-cased", f"{bert}/2018_10_18/cased_L-12_H-768_A-12.zip"),
        KnownModel("bert-large-uncased", f"{bert}/2018_10_18/uncased_L-24_H-1024_A-16.zip"),
    ]
    # The 24 small BERTs of "Well-Read Students Learn Better" (2020):
    # L layers, H hidden units, A = H / 64 attention heads.
    for layers in (2, 4, 6, 8, 10, 12):
        for hidden in (128, 256, 512, 768):
            heads = hidden // 64
            models.append(KnownModel(
                f"bert-uncased-L-{layers}-H-{hidden}",
                f"{bert}/2020_02_20/uncased_L-{layers}_H-{hidden}_A-{heads}.zip"))
    for size in ("base", "large", "xlarge", "xxlarge"):
        models.append(KnownModel(
            f"albert-{size}-v2",
            f"{OFFICIAL_URL_PREFIX}/albert_models/albert_{size}_v2.tar.gz"))
    return {model.name: model for model in models}


KNOWN_MODELS = official_models()
HUB_MODELS = hub_models()

# How error messages list the names, without spelling out all 24 small BERTs.
KNOWN_NAMES_SHORT = (f"{BUNDLED_MODEL_NAME}, bert-base-uncased, bert-base-cased, "
                     "bert-large-uncased, bert-uncased-L-{2,4,6,8,10,12}-H-{128,256,512,768}, "
                     "albert-{base,large,xlarge,xxlarge}-v2, microsoft/deberta-base, "
                     "microsoft/deberta-v3-{xsmall,small,base}")


def known_model_names():
    """Every name that resolve_model_dir accepts: the bundled model, Google's
    release archives, then the Hugging Face hub's DeBERTa repositories
    (those alone: hub_model_names)."""
    return [BUNDLED_MODEL_NAME, *KNOWN_MODELS, *HUB_MODELS]


def hub_model_names():
    """The Hugging Face hub names that resolve_model_dir accepts."""
    return list(HUB_MODELS)


def registered_model(name):
    """The KnownModel or HubModel of a name, or None."""
    return KNOWN_MODELS.get(name) or HUB_MODELS.get(name)


def default_cache_dir():
    """$MINIBERT_CACHE if set, else ~/.cache/minibert (not created here)."""
    return Path(os.environ.get(CACHE_VARIABLE) or "~/.cache/minibert").expanduser()


def model_url(model, url_prefix=None):
    """The URL to fetch, with the official prefix swapped for a mirror if asked."""
    return mirror_url(model.url, url_prefix)


def mirror_url(url, url_prefix=None):
    """`url` with its official host (Google's or Hugging Face's) replaced by
    `url_prefix`, else by $MINIBERT_DOWNLOAD_URL_PREFIX, if either is set."""
    prefix = url_prefix or os.environ.get(URL_PREFIX_VARIABLE)
    if not prefix:
        return url
    for official in (OFFICIAL_URL_PREFIX, HF_URL_PREFIX):
        if url.startswith(official):
            return prefix.rstrip("/") + url[len(official):]
    return url


def bundled_model_dir():
    if not BUNDLED_MODEL_DIR.is_dir():
        raise MiniBertError(f"the bundled model is missing from this installation: "
                            f"{BUNDLED_MODEL_DIR}")
    return BUNDLED_MODEL_DIR


# ---------------------------------------------------------------------------
# Resolving a name or path
# ---------------------------------------------------------------------------

def resolve_model_dir(name_or_path, *, force_download=False):
    """Turn what the user typed into the folder holding the model's files.

    Order: None / the bundled name, then an existing path (so a local folder
    that happens to be called "bert-base-uncased" wins), then a known name,
    which is downloaded on first use. `force_download=True` deletes the
    cached copy of a known name and downloads it again; it does nothing for
    a path or the bundled model, which minibert never downloaded.
    """
    if name_or_path is None or name_or_path == BUNDLED_MODEL_NAME:
        return bundled_model_dir()
    text = os.fspath(name_or_path)
    if text == "":
        raise MiniBertError("model name or path is empty; expected a folder, a file "
                            f"in it, or one of: {KNOWN_NAMES_SHORT}")
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        return path.parent
    if registered_model(text) is not None:
        return download_model(text, force_download=force_download)
    raise MiniBertError(f"model {text!r} is neither an existing file or folder nor a "
                        f"known model name; known names: {KNOWN_NAMES_SHORT}")


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


def refresh_advice(name, target):
    """How to replace the cached download of `name` in `target`, for error messages."""
    return f"to download {name} again, pass force_download=True or delete {target}"


def explain_cache_error(error, folder):
    """`error`, raised while loading `folder`, plus which cached download it is, if it is one.

    An archive can unpack fine and still hold a file that does not load (a
    damaged checkpoint, a config missing). Without this note the user would
    not know that the folder came from minibert's cache, nor how to replace
    it. Returns `error` itself when `folder` is not in the default cache.
    """
    cache = default_cache_dir().resolve()
    folder = Path(folder).resolve()
    for name, model in [*KNOWN_MODELS.items(), *HUB_MODELS.items()]:
        target = cache / model.folder_name
        if folder == target or target in folder.parents:
            return MiniBertError(f"{error} (the cached download of {name} in {target} is bad; "
                                 f"{refresh_advice(name, target)})")
    return error


# ---------------------------------------------------------------------------
# Downloading a known model
# ---------------------------------------------------------------------------

def download_model(name, *, cache_dir=None, url_prefix=None, progress=True, force_download=False):
    """Download, check and unpack a known model once; return the folder with its config.

    A second call finds the unpacked folder in the cache and does no network
    access. `cache_dir` defaults to default_cache_dir(); `url_prefix` to
    $MINIBERT_DOWNLOAD_URL_PREFIX (else the official host). `force_download`
    deletes what the cache holds for `name` and downloads it again. A
    Hugging Face name's files are downloaded one by one (download_hub_files).
    """
    if name == BUNDLED_MODEL_NAME:
        return bundled_model_dir()
    model = registered_model(name)
    if model is None:
        raise MiniBertError(f"unknown model name {name!r}; known names: {KNOWN_NAMES_SHORT}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / model.folder_name

    # The quick way, without the lock: `target` only ever appears by renaming
    # a completely unpacked folder, so if it exists it is finished.
    if target.is_dir() and not force_download:
        return cached_config_dir(name, target)

    downloads = cache / "downloads"
    try:
        downloads.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MiniBertError(f"cannot create the cache folder {downloads} ({e.strerror}); "
                            f"set {CACHE_VARIABLE} to a writable folder") from None
    archive = downloads / model.download_name    # for a hub model: the folder its files gather in

    with cache_lock(cache / f"{model.folder_name}.lock", name, progress):
        remove_leftovers(cache, model.folder_name, archive)
        if force_download:
            delete_cached(cache, model.folder_name, archive)
        elif target.is_dir():  # another process finished it while we waited for the lock
            return cached_config_dir(name, target)

        if isinstance(model, HubModel):
            download_hub_files(model, archive, url_prefix, progress, cache, target)
            os.replace(archive, target)         # complete and checked: now it may appear
            return target
        if not archive.is_file():
            url = model_url(model, url_prefix)
            try:
                download_file(url, archive, size=model.size, sha256=model.sha256,
                              progress=progress)
            except MiniBertError as e:
                raise MiniBertError(
                    f"{e}. The cache folder is {cache}; to install {name} by hand, download "
                    f"{model.url} yourself and unpack it into {target}, or pass the unpacked "
                    f"folder's path instead of the name") from None
        unpack_archive(archive, target)
        archive.unlink()

    found = find_config_dir(target)
    if found is None:
        raise MiniBertError(f"{model.url}: the archive unpacked into {target} holds no "
                            f"{' / '.join(CONFIG_FILE_NAMES)}; {refresh_advice(name, target)}")
    return found


def download_hub_files(model, folder, url_prefix, progress, cache, target):
    """Download a Hugging Face model's files into `folder`, each checked.

    A file already in `folder` was finished and checked by an earlier run
    that stopped at a later file, so it is not asked for again; the file
    that was cut off resumes from its `.part` (download_file). An optional
    file the repository does not have (404) is left out."""
    folder.mkdir(exist_ok=True)
    for file_name in (*model.files, *model.optional_files):
        dest = folder / file_name
        if dest.is_file():
            continue
        url = mirror_url(model.url(file_name), url_prefix)
        try:
            download_file(url, dest, progress=progress)
        except MiniBertError as e:
            if isinstance(e, NotOnServer) and file_name in model.optional_files:
                continue
            raise hub_download_error(model, cache, target, e) from None
        check_downloaded_file(dest, url)


def hub_download_error(model, cache, target, error):
    """The error of a failed Hugging Face download, saying how to install it by hand."""
    files = ", ".join((*model.files, *model.optional_files))
    return MiniBertError(f"{error}. The cache folder is {cache}; to install {model.name} by hand, download "
                         f"{files} from {HF_URL_PREFIX}/{model.name} into {target}, or pass that "
                         f"folder's path instead of the name")


def check_downloaded_file(path, url):
    """Check a downloaded Hugging Face file as far as its format allows: a
    .json file must be a JSON object; pytorch_model.bin, a zip archive as
    torch.save writes it, must pass its members' CRC-32 checks. A file that
    fails is deleted, so that the next attempt downloads it again. (A .bin
    from PyTorch before 1.6 is a bare pickle with no checksum: not checked.)"""
    try:
        if path.suffix == ".json":
            read_json_object(path)
        elif path.suffix == ".bin" and zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                # all CRCs 0: saved with torch's CRC computation off, nothing to check
                bad = zf.testzip() if any(member.CRC for member in zf.infolist()) else None
            if bad is not None:
                raise zipfile.BadZipFile(f"member {bad!r} fails its CRC-32 check")
    except (MiniBertError, *CORRUPT_ARCHIVE_ERRORS) as e:
        path.unlink()
        raise MiniBertError(f"could not download {url}: the file is damaged ({e}); it was deleted, "
                            f"run again to download it anew") from None


def cached_config_dir(name, target):
    """The folder with the config inside the finished download `target`."""
    found = find_config_dir(target)
    if found is None:
        raise MiniBertError(f"{target}: cached model folder has no "
                            f"{' / '.join(CONFIG_FILE_NAMES)}; {refresh_advice(name, target)}")
    return found


@contextlib.contextmanager
def cache_lock(path, name, progress=True):
    """Hold an exclusive lock on the file `path` while downloading `name`.

    A second process blocks here until the first is done. The lock file is
    never deleted: a process could delete it while another waits on it, and
    a third would then lock a new file alongside the second.
    """
    if fcntl is None:  # Windows: no flock; see the module docstring
        yield
        return
    try:
        lock_file = open(path, "a")  # "a" creates the file if needed and never truncates it
    except OSError as e:
        raise MiniBertError(f"cannot create the lock file {path} ({e.strerror}); "
                            f"set {CACHE_VARIABLE} to a writable folder") from None
    with lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # someone else holds it: say why we stop, then wait
            if progress:
                print(f"waiting for another process that is downloading {name} "
                      f"(lock file {path})", file=sys.stderr)
            fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def remove_leftovers(cache, name, archive):
    """Delete what a killed process left while unpacking or deleting `name`.

    That is half-unpacked or half-deleted folders, and atomic_write's
    temporary files for the `.part.json` record. Only called with the lock
    held, so no live process is still using them. (The `.part` download is
    kept on purpose: the next download resumes it.)
    """
    for pattern in (f".{name}.*.unpacking", f".{name}.*.deleting"):
        for leftover in cache.glob(pattern):
            shutil.rmtree(leftover, ignore_errors=True)
    for leftover in archive.parent.glob(f".{archive.name}.part.json.*.tmp"):
        leftover.unlink(missing_ok=True)
    if archive.is_dir():  # a Hugging Face model's download folder: the same, per file
        for leftover in archive.glob(".*.part.json.*.tmp"):
            leftover.unlink(missing_ok=True)


def delete_cached(cache, name, archive):
    """Delete everything the cache holds for `name`: folder, archive, partial download."""
    target = cache / name
    if target.is_dir():
        # Rename first, in one atomic step: if we are killed during the slow
        # rmtree, what remains is a leftover that the next call deletes, not
        # a half-deleted model folder that looks finished.
        trash = cache / f".{name}.{os.getpid()}.deleting"
        os.replace(target, trash)
        shutil.rmtree(trash)
    if archive.is_dir():  # a Hugging Face model's files, finished and partial
        shutil.rmtree(archive)
    for file in (archive, *partial_files(archive)):
        file.unlink(missing_ok=True)


def partial_files(dest):
    """An interrupted download of `dest`: the bytes so far, and what they are a prefix of."""
    return dest.with_name(dest.name + ".part"), dest.with_name(dest.name + ".part.json")


class NotOnServer(MiniBertError):
    """download_file's error for an HTTP 404: the server has no such file."""


def download_file(url, dest, *, size=None, sha256=None, progress=True):
    """Fetch `url` into the file `dest`, resuming from `dest.part` if that is safe.

    The finished file is checked (length from the server or `size`; `sha256`
    if given) and only then renamed to `dest`, so `dest` existing means the
    download completed. Any failure raises MiniBertError naming the URL.
    """
    dest = Path(dest)
    part, info_file = partial_files(dest)
    expected = size

    for attempt in range(2):  # a second try only after throwing a bad .part away
        resume = resumable(part, info_file, url)
        have = part.stat().st_size if resume else 0
        request = urllib.request.Request(url, headers={"User-Agent": "minibert"})
        if have:
            # "Send the bytes from `have` on, but only if the file is still the
            # version we started with; if it changed, send all of the new one."
            request.add_header("Range", f"bytes={have}-")
            request.add_header("If-Range", resume["version"])
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                if have and response.status == 206:
                    if range_total(response, have) != resume["size"]:
                        forget_part(part, info_file)  # not the rest of our file: start over
                        continue
                    expected = resume["size"]
                else:
                    # A 200: the file changed, or the server ignores Range. Start from zero.
                    length = response.headers.get("Content-Length", "")
                    expected = int(length) if length.isdigit() else size
                    start_part(part, info_file, url, file_version(response), expected)
                with open(part, "ab") as f, tqdm(
                        total=expected, initial=part.stat().st_size, unit="B", unit_scale=True,
                        unit_divisor=1024, desc=dest.name, disable=not progress) as progress_bar:
                    while chunk := response.read(CHUNK_BYTES):
                        f.write(chunk)
                        progress_bar.update(len(chunk))
        except urllib.error.HTTPError as e:
            e.close()  # an HTTPError holds the open connection
            if e.code == 416 and have and attempt == 0:
                forget_part(part, info_file)  # "Range Not Satisfiable": our .part is wrong
                continue
            error = NotOnServer if e.code == 404 else MiniBertError
            raise error(f"could not download {url}: HTTP {e.code} {e.reason}") from None
        except urllib.error.URLError as e:
            raise MiniBertError(f"could not download {url}: {e.reason}") from None
        except (OSError, http.client.HTTPException) as e:
            # Connection dropped half-way: keep the .part so the next run resumes.
            raise MiniBertError(f"could not download {url}: {type(e).__name__}: {e} "
                                f"(run again to resume)") from None
        break

    got = part.stat().st_size
    if expected is not None and got < expected:
        raise MiniBertError(f"could not download {url}: the connection ended after {got} "
                            f"of {expected} bytes (run again to resume)")
    if size is not None and got != size:
        forget_part(part, info_file)
        raise MiniBertError(f"could not download {url}: got {got} bytes, expected {size}; "
                            f"the bad download was deleted")
    if sha256 is not None:
        digest = file_sha256(part)
        if digest != sha256.lower():
            forget_part(part, info_file)
            raise MiniBertError(f"could not download {url}: sha256 is {digest}, expected "
                                f"{sha256}; the bad download was deleted")
    os.replace(part, dest)
    info_file.unlink(missing_ok=True)
    return dest


def resumable(part, info_file, url):
    """The saved {"url", "version", "size"} of the partial download `part`, or None.

    None means "start from zero": there is no .part, or nothing says which
    version of which file it is a prefix of, or it is not shorter than the
    whole file.
    """
    if not part.is_file() or not info_file.is_file():
        return None
    try:
        info = read_json_object(info_file)
    except MiniBertError:  # a damaged .part.json: do not trust its .part either
        return None
    if (info.get("url") != url or not isinstance(info.get("version"), str)
            or not isinstance(info.get("size"), int)):
        return None
    return info if 0 < part.stat().st_size < info["size"] else None


def start_part(part, info_file, url, version, size):
    """Empty `part` for a download from zero and record what it will hold.

    The order matters. The old record goes first and the new one is written
    only once `part` is empty, so a process killed in between leaves either
    a .part with no record (downloaded again from zero) or an empty one:
    never old bytes vouched for by the new version's record. Without a
    version or a size there is nothing to check a resume against, so no
    record is written and an interrupted download starts again from zero.
    """
    info_file.unlink(missing_ok=True)
    part.write_bytes(b"")
    if version and size:
        write_json(info_file, {"url": url, "version": version, "size": size})


def forget_part(part, info_file):
    info_file.unlink(missing_ok=True)
    part.unlink(missing_ok=True)


def file_version(response):
    """The server's name for this version of the file, for If-Range, or None.

    A strong ETag if there is one (a weak one, W/"...", is not allowed in
    If-Range), else the Last-Modified date.
    """
    etag = response.headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return response.headers.get("Last-Modified")


def range_total(response, start):
    """The TOTAL of a 206 answer's `Content-Range: bytes START-END/TOTAL`.

    None if the header is missing or malformed, the total is unknown ("*"),
    or the range does not begin at `start`, the byte we asked for.
    """
    content_range = response.headers.get("Content-Range", "").strip()
    match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", content_range)
    if match is None or int(match.group(1)) != start:
        return None
    return int(match.group(2))


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


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
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".unpacking",
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
