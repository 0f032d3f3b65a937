"""Small helpers shared by the benchmark scripts."""

import os
import platform
import sys

import torch
import transformers


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def environment():
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
            "threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0)), "cpu": cpu_model()}


def rss_mib():
    """Current resident set size, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib():
    """This process's peak RSS (VmHWM), MiB. Not getrusage's ru_maxrss: that
    one also keeps the parent's RSS at fork time, and clear_refs cannot reset it."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def start_peak_window():
    """Reset the kernel's peak-RSS counter (Linux >= 4.0: writing 5 to
    /proc/self/clear_refs), so that peak_rss_mib() afterwards is the peak from
    now on. Returns the current RSS in MiB, the baseline to subtract."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        print("warning: cannot reset the peak RSS; the forward peak may hide under the loading peak",
              file=sys.stderr)
    return rss_mib()
