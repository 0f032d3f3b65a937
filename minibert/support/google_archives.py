"""Google's original release archives: download, check, unpack, cache.

BERT and ALBERT were first released by Google as TensorFlow checkpoints
packed in one .zip or .tar.gz each. Reading those checkpoints without
TensorFlow is part of the checkpoint lesson (checkpoints/tf_bundle.py), so
minibert keeps a small downloader of its own for them. Everything on the
Hugging Face hub goes through `huggingface_hub` instead (hub.py).

An archive is asked for by its name with the prefix "tf:", e.g.
"tf:bert-base-uncased", "tf:bert-uncased-L-2-H-128", "tf:albert-base-v2"
(`archive_names()` lists all 31). It is downloaded once into the cache
folder, `$MINIBERT_CACHE` if set, else `~/.cache/minibert`:

    <cache>/.<random>.uncased_L-12_H-768_A-12.zip     while downloading
    <cache>/.bert-base-uncased.<random>.../           while unpacking
    <cache>/bert-base-uncased/uncased_L-12_H-768_A-12/
        bert_config.json  vocab.txt  bert_model.ckpt.index  ...

and found there on every later call without touching the network. The
final folder appears only by renaming a completely unpacked one, so its
existing means the model is complete. A failed attempt deletes what it
wrote (only a process killed outright can leave a hidden ".<...>" file or
folder, safe to delete); an interrupted download starts again from zero. Two
processes asking for the same name at once both download it: the first to
finish puts its folder in place, the other one finds it there and deletes
its own copy. To install an archive by hand (a machine without internet),
unpack it into `<cache>/<name>/`, or give the unpacked folder's path.

Verification. Before anything is unpacked, the archive is read to its end:
every zip member's CRC-32 is checked, and for a .tar.gz the gzip trailer's
CRC-32 and length (which `tarfile` alone never reaches). Member names that
would land outside the folder are refused, and so is an archive that would
unpack to more than `max_unpacked_bytes` (20 times its own size plus 100
MiB, or `$MINIBERT_MAX_UNPACKED_BYTES`): the sizes the members declare are
added up before unpacking, and the bytes actually written are counted
while unpacking. Google publishes no digests for these archives, so the
length the server announces and the CRCs are all there is to check.

Refreshing. An archive can unpack fine and still not load (a damaged
checkpoint inside it, a missing config). Errors from loading a cached
download say which cache folder it is; `force_download=True` (on
load_pretrained and load_tokenizer) downloads it again and replaces the
folder, as does deleting `<cache>/<name>/` by hand.

`MINIBERT_DOWNLOAD_URL_PREFIX`, if set, replaces the
`https://storage.googleapis.com` at the start of every archive's URL, e.g.
to use a mirror or, in the tests, a local server.
"""

import contextlib
import gzip
import http.client
import os
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

from minibert.support.errors import MiniBertError

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

# How error messages list the names, without spelling out all 24 small BERTs.
ARCHIVE_NAMES_SHORT = ("tf:bert-base-uncased, tf:bert-base-cased, tf:bert-large-uncased, "
                       "tf:bert-uncased-L-{2,4,6,8,10,12}-H-{128,256,512,768}, "
                       "tf:albert-{base,large,xlarge,xxlarge}-v2")


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
