"""The wall around a graded submission: a bubblewrap jail and resource limits.

A guard written in Python cannot protect the grader from a program that
runs in the same process (CPython's documentation says as much of audit
hooks), so the submission's code runs behind an operating-system boundary:
bubblewrap (`bwrap`, the jail Flatpak uses; Debian and Ubuntu package
`bubblewrap`). Why bubblewrap rather than a second user account: it needs
no account set up on the machine, works for an instructor without root
(through user namespaces) as well as on Gradescope (where the grader is
root), and gives each grade its own file system, process table and
network at once.

Inside the jail the graded child sees:

    /usr, /bin, /lib, ... and the Python installation   read-only
    /grade/tree      the fresh tree (the instructor's tests, the submission's package)   read-only
    /grade/inputs    the inputs of the end-to-end checks (sentences without labels)      read-only
    /grade/runner.py, pytest.ini, probes.py              read-only
    /tmp             an empty tmpfs of at most `scratch_bytes`: the only place it can write

and nothing else: not the instructor's checkout, not the data folder and its
labels, not the grader's own files or its results folder (none is mounted).
Its own PID namespace keeps it from seeing, signalling or tracing the
grader; no network; detached from the grader's terminal (no keystrokes to inject);
and `--die-with-parent`: when the grade ends, or the grader itself dies,
the namespace's first process dies and the kernel kills every process the
submission started, double-forked or not. The reference packages a
submission may not hand in as its own (transformers, ...) are replaced by a
module that raises ImportError.

Resource limits (setrlimit, inherited by everything in the jail) bound
memory (address space), CPU time, the size of any file written, open
files and, for a grader that is not root, the number of processes (Linux
does not apply RLIMIT_NPROC to root; there the PID namespace and the time
limits bound what a fork bomb can do: everything is killed at the limit).
"""

import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

INSIDE = Path("/grade")                  # where the tree, the inputs and the runner appear in the jail
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
                "/etc/nsswitch.conf", "/etc/passwd", "/etc/group")
# The reference implementations a submission must not hand in as its own.
REFERENCE_PACKAGES = ("transformers", "sentence_transformers", "tensorflow", "keras", "jax", "flax")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"


class SandboxUnavailable(Exception):
    """No jail can be built on this machine; the message says why in one line."""


@dataclass(frozen=True)
class Limits:
    """What one graded child may use. The defaults fit a whole grade of every
    exercise (docs/coursework.md, "What a grade costs")."""
    memory_bytes: int = 4 << 30       # address space of each process (torch maps ~1 GiB before any tensor)
    cpu_seconds: int = 3600           # CPU time of each process; wall-clock limits are the grader's
    file_bytes: int = 64 << 20        # the largest file it may write
    scratch_bytes: int = 256 << 20    # its whole /tmp
    processes: int = 64               # processes beyond the grader user's own (not enforced for root)
    open_files: int = 256


_checked = {}


def check_available():
    """Raise SandboxUnavailable unless bubblewrap is installed and can build a
    jail here (user namespaces may be switched off, e.g. in some containers);
    returns its path."""
    bwrap = shutil.which("bwrap")
    if not bwrap:
        raise SandboxUnavailable(f"no sandbox: bubblewrap is not installed ({INSTALL_HINT})")
    if bwrap not in _checked:
        try:
            done = subprocess.run([bwrap, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "true"],
                                  capture_output=True, text=True, timeout=30)
            _checked[bwrap] = None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]
        except (OSError, subprocess.TimeoutExpired) as e:
            _checked[bwrap] = str(e)
    if _checked[bwrap]:
        raise SandboxUnavailable(f"no sandbox: bubblewrap cannot build a jail here ({_checked[bwrap]}); "
                                 f"user namespaces may be switched off")
    return bwrap


def python_folders():
    """The folders of the running Python installation (and of its virtual
    environment, if any): what the jail must show, read-only."""
    folders = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(),
               Path(sys.executable).resolve().parent.parent}
    return sorted(folders)


def command(argv, *, tree, inputs, files, hidden=(), limits=Limits(), blocker=None):
    """The bwrap command line that runs `argv` (a Python command whose paths
    are those inside the jail) with the layout of the module docstring.
    `files`: {name: host path} shown read-only as /grade/NAME (the runner,
    its pytest.ini, the probes); `hidden`: folders that must stay invisible
    even where they lie inside a mounted one (the instructor's checkout
    inside the Python prefix, say); `blocker`: a file whose text replaces
    each reference package's __init__.py."""
    bwrap = check_available()
    # --as-pid-1: the graded Python is the namespace's first process, so when it
    # ends, the kernel ends every process it started; no bwrap process (whose
    # command line names the grader's folders) is visible inside.
    args = [bwrap, "--unshare-all", "--die-with-parent", "--as-pid-1", "--new-session", "--cap-drop", "ALL",
            "--hostname", "grade", "--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.scratch_bytes), "--tmpfs", "/tmp", "--dir", "/tmp/home"]
    mounted = []
    for folder in SYSTEM:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
            mounted.append(Path(folder))
    for name in SYSTEM_FILES:
        if os.path.exists(name):
            args += ["--ro-bind", name, name]
    for folder in python_folders():
        if not any(folder.is_relative_to(m) for m in mounted):
            args += ["--ro-bind", str(folder), str(folder)]
            mounted.append(folder)
    for folder in sorted({Path(h).resolve() for h in hidden}):
        if any(folder.is_relative_to(m) for m in mounted) and folder.exists():
            args += ["--tmpfs", str(folder)]            # an empty folder in its place
    if blocker is not None:
        for package in _reference_packages():
            args += ["--ro-bind", str(blocker), str(package / "__init__.py")]
    args += ["--ro-bind", str(tree), str(INSIDE / "tree"), "--ro-bind", str(inputs), str(INSIDE / "inputs")]
    for name, path in files.items():
        args += ["--ro-bind", str(path), str(INSIDE / name)]
    args += ["--chdir", str(INSIDE / "tree"), "--clearenv"]
    for key, value in environment("/tmp/home", "/tmp").items():
        args += ["--setenv", key, value]
    return args + ["--", *argv]


def _reference_packages():
    """The installed reference packages' folders (those holding __init__.py)."""
    import importlib.util
    found = []
    for name in REFERENCE_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.origin and spec.origin.endswith("__init__.py"):
            found.append(Path(spec.origin).resolve().parent)
    return found


def environment(home, tmp):
    """The child's whole environment: nothing of the grader's."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def processes_of_this_user():
    """How many processes the grader's user runs now (RLIMIT_NPROC counts them all)."""
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


def apply_limits(limits):
    """A preexec function for subprocess.Popen: the limits of `limits`, set
    in the child before it runs bwrap, so that every process in the jail
    inherits them; and death with the grader (PR_SET_PDEATHSIG), so the
    child goes when the grader goes even before bwrap takes over."""
    wanted = [(resource.RLIMIT_AS, limits.memory_bytes), (resource.RLIMIT_CPU, limits.cpu_seconds),
              (resource.RLIMIT_FSIZE, limits.file_bytes), (resource.RLIMIT_NOFILE, limits.open_files),
              (resource.RLIMIT_CORE, 0)]
    if os.getuid() != 0:
        wanted.append((resource.RLIMIT_NPROC, processes_of_this_user() + limits.processes))
    # Never above the limit the grader itself runs under (lowering needs no privilege; raising does).
    settings = []
    for which, value in wanted:
        _, hard = resource.getrlimit(which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        settings.append((which, value))

    def preexec():
        die_with_parent()
        for which, value in settings:
            resource.setrlimit(which, (value, value))
    return preexec


def die_with_parent():
    """Ask Linux to kill this process when its parent dies (prctl
    PR_SET_PDEATHSIG); elsewhere, nothing."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)        # 1 = PR_SET_PDEATHSIG
