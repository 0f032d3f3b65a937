"""minibert.support.fileio: a file is written whole or not at all, never onto
a link, FIFO or device, and a full disk is one line naming the file."""

import os
import subprocess
import sys

import pytest

from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write, process_is_alive, remove_leftovers


def test_a_symbolic_link_is_refused_and_left_pointing_where_it_did(tmp_path):
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    with pytest.raises(MiniBertError, match="link.json: a symbolic link; give the path of a regular file"):
        with atomic_write(tmp_path / "link.json", "w") as f:
            f.write("new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "{}"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_or_a_device_is_refused_without_being_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    for target in (tmp_path / "pipe", "/dev/null", tmp_path):
        with pytest.raises(MiniBertError, match="not a regular file|a folder"):
            with atomic_write(target, "w") as f:
                f.write("x")
    assert (tmp_path / "pipe").is_fifo() and os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]           # no temporary file left


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_file_size_limit_is_one_line_and_keeps_the_previous_file(tmp_path):
    (tmp_path / "out.bin").write_bytes(b"old")
    program = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"          # so the write fails with EFBIG, as a full disk does
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "from minibert.support.errors import MiniBertError\n"
        "from minibert.support.fileio import atomic_write\n"
        "try:\n"
        f"    with atomic_write({str(tmp_path / 'out.bin')!r}) as f:\n"
        "        f.write(bytes(5000))\n"
        "except MiniBertError as e:\n"
        "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == f"{tmp_path / 'out.bin'}: cannot write it (File too large); the previous file is unchanged"
    assert (tmp_path / "out.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_temporary_files_of_dead_writers_are_removed_and_those_of_live_ones_kept(tmp_path):
    finished = subprocess.Popen([sys.executable, "-c", "None"])
    finished.wait()                                                     # its PID is no process now
    assert process_is_alive(os.getpid()) and not process_is_alive(finished.pid)
    dead = tmp_path / f".checkpoint.pt.{finished.pid}.0badc0de.tmp"
    live = tmp_path / f".checkpoint.pt.{os.getpid()}.0000cafe.tmp"
    other = tmp_path / f".other.pt.{finished.pid}.0badc0de.tmp"          # not this checkpoint's
    for path in (dead, live, other):
        path.write_bytes(b"part of a file")
    assert remove_leftovers(tmp_path / "checkpoint.pt") == [dead.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_a_file_written_again_removes_what_a_killed_writer_of_that_file_left(tmp_path):
    from minibert.support.fileio import write_json
    finished = subprocess.Popen([sys.executable, "-c", "None"])
    finished.wait()
    dead = tmp_path / f".results.json.{finished.pid}.0badc0de.tmp"        # a --json killed with -9
    live = tmp_path / f".results.json.{os.getpid()}.0000cafe.tmp"
    for path in (dead, live):
        path.write_text("half")
    write_json(tmp_path / "results.json", {"accuracy": 1.0})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["results.json", live.name])
