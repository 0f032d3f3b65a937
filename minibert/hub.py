"""Find a model folder by name: the bundled model, a local path, or a download.

`resolve_model_dir(name_or_path)` is the one entry point the rest of minibert
uses. It accepts

* None or "minibert-gutenberg": the small model shipped inside the package;
* a path to a folder (or to a file inside it, e.g. `bert_config.json`);
* a known name such as "bert-base-uncased" or "albert-base-v2": the official
  Google release archive is downloaded once into the cache folder, unpacked,
  and found there on every later call without touching the network.

The cache folder is `$MINIBERT_CACHE` if set, else `~/.cache/minibert`:

    <cache>/downloads/uncased_L-12_H-768_A-12.zip.part   while downloading
    <cache>/bert-base-uncased/uncased_L-12_H-768_A-12/   after unpacking
        bert_config.json  vocab.txt  bert_model.ckpt.index  ...

The archive itself is deleted once it has been unpacked. To install a model
by hand (e.g. on a machine without internet), download the archive yourself
and unpack it into `<cache>/<name>/`, or simply pass the unpacked folder's
path instead of the name.

Downloads resume: an interrupted download leaves `<archive>.part`, and the next
attempt asks the server for the remaining bytes with an HTTP Range request
(starting again from zero if the server ignores it).

`MINIBERT_DOWNLOAD_URL_PREFIX`, if set, replaces the
`https://storage.googleapis.com` at the start of every official URL, e.g. to
use a mirror or, in the tests, a local server:
MINIBERT_DOWNLOAD_URL_PREFIX=http://127.0.0.1:8000
"""

import gzip
import hashlib
import http.client
import os
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

from tqdm import tqdm

from minibert.errors import MiniBertError

BUNDLED_MODEL_NAME = "minibert-gutenberg"
BUNDLED_MODEL_DIR = Path(__file__).parent / "pretrained" / "minibert-gutenberg"

OFFICIAL_URL_PREFIX = "https://storage.googleapis.com"
URL_PREFIX_VARIABLE = "MINIBERT_DOWNLOAD_URL_PREFIX"
CACHE_VARIABLE = "MINIBERT_CACHE"
CONFIG_FILE_NAMES = ("config.json", "bert_config.json", "albert_config.json")
TIMEOUT_SECONDS = 60
CHUNK_BYTES = 1 << 20


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


def official_models():
    """The registry: every downloadable name and its official URL.

    Sizes and checksums are left as None: minibert does not pin them (Google
    has not published digests for these archives), so only the length the
    server announces is checked.
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

# How error messages list the names, without spelling out all 24 small BERTs.
KNOWN_NAMES_SHORT = (f"{BUNDLED_MODEL_NAME}, bert-base-uncased, bert-base-cased, "
                     "bert-large-uncased, bert-uncased-L-{2,4,6,8,10,12}-H-{128,256,512,768}, "
                     "albert-{base,large,xlarge,xxlarge}-v2")


def known_model_names():
    """Every name resolve_model_dir accepts besides a path, the bundled model first."""
    return [BUNDLED_MODEL_NAME, *KNOWN_MODELS]


def default_cache_dir():
    """$MINIBERT_CACHE if set, else ~/.cache/minibert (not created here)."""
    return Path(os.environ.get(CACHE_VARIABLE) or "~/.cache/minibert").expanduser()


def model_url(model, url_prefix=None):
    """The URL to fetch, with the official prefix swapped for a mirror if asked."""
    prefix = url_prefix or os.environ.get(URL_PREFIX_VARIABLE)
    if not prefix:
        return model.url
    return prefix.rstrip("/") + model.url[len(OFFICIAL_URL_PREFIX):]


def bundled_model_dir():
    if not BUNDLED_MODEL_DIR.is_dir():
        raise MiniBertError(f"the bundled model is missing from this installation: "
                            f"{BUNDLED_MODEL_DIR}")
    return BUNDLED_MODEL_DIR


# ---------------------------------------------------------------------------
# Resolving a name or path
# ---------------------------------------------------------------------------

def resolve_model_dir(name_or_path):
    """Turn what the user typed into the folder holding the model's files.

    Order: None / the bundled name, then an existing path (so a local folder
    that happens to be called "bert-base-uncased" wins), then a known name,
    which is downloaded on first use.
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
    if text in KNOWN_MODELS:
        return download_model(text)
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


# ---------------------------------------------------------------------------
# Downloading a known model
# ---------------------------------------------------------------------------

def download_model(name, *, cache_dir=None, url_prefix=None, progress=True):
    """Download and unpack a known model once; return the folder with its config.

    A second call finds the unpacked folder in the cache and does no network
    access. `cache_dir` defaults to default_cache_dir(); `url_prefix` to
    $MINIBERT_DOWNLOAD_URL_PREFIX (else the official host).
    """
    if name == BUNDLED_MODEL_NAME:
        return bundled_model_dir()
    if name not in KNOWN_MODELS:
        raise MiniBertError(f"unknown model name {name!r}; known names: {KNOWN_NAMES_SHORT}")
    model = KNOWN_MODELS[name]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / name

    if target.is_dir():
        found = find_config_dir(target)
        if found is None:
            raise MiniBertError(f"{target}: cached model folder has no "
                                f"{' / '.join(CONFIG_FILE_NAMES)}; delete it to download again")
        return found

    url = model_url(model, url_prefix)
    downloads = cache / "downloads"
    try:
        downloads.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MiniBertError(f"cannot create the cache folder {downloads} ({e.strerror}); "
                            f"set {CACHE_VARIABLE} to a writable folder") from None
    archive = downloads / model.archive_name
    if not archive.is_file():
        try:
            download_file(url, archive, size=model.size, sha256=model.sha256, progress=progress)
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
                            f"{' / '.join(CONFIG_FILE_NAMES)}")
    return found


def download_file(url, dest, *, size=None, sha256=None, progress=True):
    """Fetch `url` into the file `dest`, resuming from `dest.part` if present.

    The finished file is checked (length from the server or `size`; `sha256`
    if given) and only then renamed to `dest`, so `dest` existing means the
    download completed. Any failure raises MiniBertError naming the URL.
    """
    dest = Path(dest)
    part = dest.with_name(dest.name + ".part")
    expected = size

    for attempt in range(2):  # a second try only after throwing a bad .part away
        have = part.stat().st_size if part.exists() else 0
        if size is not None and have > size:
            have = 0  # longer than the whole file: cannot be a prefix of it
        request = urllib.request.Request(url, headers={"User-Agent": "minibert"})
        if have:
            request.add_header("Range", f"bytes={have}-")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                if have and response.status == 206:
                    content_range = response.headers.get("Content-Range", "")
                    if not content_range.startswith(f"bytes {have}-"):
                        part.unlink()  # not the bytes we asked for: start over
                        continue
                else:
                    have = 0  # a plain 200: the server ignored Range, so restart from zero
                length = response.headers.get("Content-Length", "")
                expected = have + int(length) if length.isdigit() else size
                with open(part, "ab" if have else "wb") as f, tqdm(
                        total=expected, initial=have, unit="B", unit_scale=True,
                        unit_divisor=1024, desc=dest.name, disable=not progress) as bar:
                    while chunk := response.read(CHUNK_BYTES):
                        f.write(chunk)
                        bar.update(len(chunk))
        except urllib.error.HTTPError as e:
            e.close()  # an HTTPError holds the open connection
            if e.code == 416 and have and attempt == 0:
                part.unlink()  # "Range Not Satisfiable": our .part is wrong; start over
                continue
            raise MiniBertError(f"could not download {url}: HTTP {e.code} {e.reason}") from None
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
        part.unlink()
        raise MiniBertError(f"could not download {url}: got {got} bytes, expected {size}; "
                            f"the bad download was deleted")
    if sha256 is not None:
        digest = file_sha256(part)
        if digest != sha256.lower():
            part.unlink()
            raise MiniBertError(f"could not download {url}: sha256 is {digest}, expected "
                                f"{sha256}; the bad download was deleted")
    os.replace(part, dest)
    return dest


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Unpacking, safely
# ---------------------------------------------------------------------------

def unpack_archive(archive, dest):
    """Unpack a .zip or .tar.gz into the new folder `dest`, all or nothing.

    Members are written into a temporary folder next to `dest`, which is
    renamed to `dest` only when everything is out. A member whose name would
    land outside the folder ("../x", "/etc/x") makes the whole archive be
    refused; links and device files are skipped (the releases have none).
    A corrupt archive is deleted so that the next attempt downloads it again.
    """
    archive, dest = Path(archive), Path(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".unpacking", dir=dest.parent))
    try:
        try:
            if archive.name.endswith(".zip"):
                unpack_zip(archive, tmp)
            elif archive.name.endswith((".tar.gz", ".tgz", ".tar")):
                unpack_tar(archive, tmp)
            else:
                raise MiniBertError(f"{archive}: expected a .zip or .tar.gz archive")
        except (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, zlib.error,
                EOFError, NotImplementedError) as e:
            archive.unlink()
            raise MiniBertError(f"{archive}: corrupt archive ({e}); it was deleted, "
                                f"run again to download it anew") from None
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def member_path(root, name, archive):
    """Where the archive member `name` goes under `root`; refuses escapes."""
    posix = PurePosixPath(name.replace("\\", "/"))
    if (posix.is_absolute() or PureWindowsPath(name).drive or ".." in posix.parts):
        raise MiniBertError(f"{archive}: refusing to unpack member {name!r}: it would be "
                            f"written outside the target folder")
    return root.joinpath(*posix.parts)


def copy_member(source, target):
    target.parent.mkdir(parents=True, exist_ok=True)
    with source, open(target, "wb") as out:
        shutil.copyfileobj(source, out, CHUNK_BYTES)


def unpack_zip(archive, root):
    with zipfile.ZipFile(archive) as zf:
        members = zf.infolist()
        for info in members:  # check every name before writing anything
            member_path(root, info.filename, archive)
        for info in members:
            target = member_path(root, info.filename, archive)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif stat.S_ISLNK(info.external_attr >> 16):
                continue  # a symbolic link (Unix zips keep the mode in the high bits)
            else:
                copy_member(zf.open(info), target)


def unpack_tar(archive, root):
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        for member in members:
            member_path(root, member.name, archive)
        for member in members:
            target = member_path(root, member.name, archive)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                copy_member(tf.extractfile(member), target)
            # links, devices, fifos: skipped
