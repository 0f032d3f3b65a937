"""Where and how a run computes: the device (`--device`, bfloat16 autocast,
memory headroom), torch's CPU threads (`--threads`), and the seeds every
random draw is made from.
"""

import hashlib
import os
import time

import torch

from minibert.support import MiniBertError

# ==============================================================================
# Where tensors live: choosing a device, and moving a batch there.
#
# Every script takes a `--device` flag (auto, cpu, cuda, cuda:1, mps) and turns
# it into a `torch.device` with `choose_device`; training, probing and
# fine-tuning move their batches with `move_to_device`. Every script's `--bf16`
# is `autocast(device, bf16)`. Every script's `--threads` is `use_threads`:
# how many CPU threads torch runs, by one rule (`threads_rule`) unless told.
# ==============================================================================


def choose_device(name="auto"):
    """"auto" picks the fastest device present (CUDA, then Apple's MPS, then
    the CPU); any other name must be a device torch knows and this machine has."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise MiniBertError(f"--device {name!r}: expected auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise MiniBertError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise MiniBertError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise MiniBertError(f"--device {name}: MPS is not available on this machine")
    if device.type not in ("cpu", "cuda", "mps"):
        raise MiniBertError(f"--device {name!r}: expected auto, cpu, cuda, cuda:N or mps")
    return device


def move_to_device(batch, device):
    """A dict of tensors, each moved to `device` (non_blocking: a copy from
    pinned CPU memory can overlap with GPU work)."""
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


def autocast(device, bf16=False):
    """What every script's --bf16 means, in one place: bfloat16 autocast on
    `device` (any kind: cpu, cuda, mps) when `bf16` is true, else a context
    that changes nothing. Under it the matrix products run in bfloat16 while
    the weights stay float32; whoever reads the result turns it back into
    float32 (`logits.float()`) before a softmax, a loss or a score. It pays on
    a GPU and on a CPU with bfloat16 instructions (AVX512-BF16, AMX). The
    returned object can be entered again and again (one batch at a time)."""
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=bool(bf16))


def check_bf16_lstm(device, flag="--bf16"):
    """Stop with one line where `device` cannot run torch's LSTM in bfloat16:
    on a CPU, oneDNN builds its bf16 LSTM only with AVX512-BF16 or AMX, and
    elsewhere the first batch would fail deep inside torch. Tried on a
    one-step LSTM, so the answer is this machine's, not a guess."""
    lstm = torch.nn.LSTM(2, 2, batch_first=True).to(device)
    try:
        with torch.no_grad(), autocast(device, True):
            lstm(torch.zeros(1, 1, 2, device=device))
    except RuntimeError:
        raise MiniBertError(f"{flag}: this {torch.device(device).type.upper()} cannot run an LSTM in bfloat16 "
                            f"(a CPU needs AVX512-BF16 or AMX for it); run without {flag}") from None


# ----------------------------------------------------------------------------
# Memory: a size a file declares, checked before it is allocated
# ----------------------------------------------------------------------------


def _proc_kilobytes(path, field):
    """A "Field:   1234 kB" line of a /proc file, in bytes; None where there is none (not Linux)."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_headroom():
    """(address space the process may still map under its limit, memory the
    machine has available), in bytes; None for what is unlimited or unknown.
    The limit is RLIMIT_AS (`ulimit -v`, prlimit), less what is mapped already."""
    try:
        import resource
    except ImportError:                  # Windows
        return None, None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    address = None
    if soft != resource.RLIM_INFINITY:
        mapped = _proc_kilobytes("/proc/self/status", "VmSize")
        address = soft - (mapped or 0)
    return address, _proc_kilobytes("/proc/meminfo", "MemAvailable")


def check_can_allocate(what, address_bytes, memory_bytes):
    """Stop with one line, before allocating, when `what` needs more address
    space (address_bytes) than the process's limit leaves, or more memory
    (memory_bytes) than the machine has available: the allocation would
    otherwise fail half-way with a bare ENOMEM or MemoryError."""
    address, available = memory_headroom()
    gb = lambda n: f"{n / 2**30:.1f} GB"
    if address is not None and address_bytes > address:
        raise MiniBertError(f"{what}: loading it needs about {gb(address_bytes)} of address space, and this "
                            f"process's limit (ulimit -v) leaves {gb(max(address, 0))}; raise the limit")
    if available is not None and memory_bytes > available:
        raise MiniBertError(f"{what}: loading it needs about {gb(memory_bytes)} of memory, and this machine has "
                            f"{gb(available)} available")


# ==============================================================================
# Threads: how many CPU threads torch runs (every script's --threads).
# ==============================================================================


def threads_rule(cores, load, processes=1):
    """The default number of torch's CPU threads: the cores not already busy,
    shared among the `processes` of one run on this machine (torchrun's local
    processes), and at least one:

        max(1, min(cores, cores - round(load)) // processes)

    `load` is how many cores other work keeps busy as the run starts
    (busy_cores). Why not every core, torch's own default: torch's threads
    meet at a barrier after every operation, so one thread that waits for a
    core another job holds makes all of them wait. A user measured a 30-step
    train_mlm.py run on 2 cores busy with other work: 66 s and 125 s with 2
    threads, 31 s and 30 s with one.

    Its limits: it sees the machine for a tenth of a second (a job that
    pauses then is not counted; where /proc/stat is missing, the 1-minute
    load average stands in, and it trails the machine by about a minute);
    it counts the whole machine, and in a container often the host's,
    whatever this process may use; a job that starts after this run has
    chosen is not seen. On an idle machine the rule gives every core, as
    torch does. --threads N says otherwise, and so does OMP_NUM_THREADS
    (use_threads)."""
    free = min(cores, cores - round(load))
    return max(1, free // max(1, processes))


def cpu_times():
    """(busy, total) time of every core since boot, in clock ticks, from
    Linux's /proc/stat ("cpu  user nice system idle iowait irq softirq
    steal ..."; idle and iowait hold no core), or None elsewhere."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    total = sum(fields)
    return total - fields[3] - fields[4], total


def busy_cores(sample_seconds=0.1):
    """How many cores other work keeps busy now: the busy share of every
    core's time over `sample_seconds` (this process sleeps meanwhile, so it
    is not counted), times the machine's cores. Where /proc/stat is missing,
    the 1-minute load average; on Windows, which has neither, 0."""
    before = cpu_times()
    if before is not None:
        time.sleep(sample_seconds)
        after = cpu_times()
        busy, total = after[0] - before[0], after[1] - before[1]
        if total > 0:
            return busy / total * (os.cpu_count() or 1)
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def machine_cores():
    """The cores this process may run on (its CPU affinity, which taskset and
    a container's cpuset narrow), else every core the machine has."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def positive_count(text):
    """An environment variable's value as a count of threads or processes, or None if it is not one."""
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None


def choose_threads(requested=None, environ=None):
    """(torch's number of CPU threads, why, in words) for a run about to
    start. In order: `requested` (--threads N); OMP_NUM_THREADS, if the
    environment sets it to a count (what torch itself would read, and what
    torchrun sets to 1 for each of several processes unless it is set
    already); else threads_rule over this process's cores, the cores busy
    now (busy_cores), and LOCAL_WORLD_SIZE (torchrun's processes on this machine)."""
    environ = os.environ if environ is None else environ
    if requested is not None:
        return requested, "--threads"
    omp = positive_count(environ.get("OMP_NUM_THREADS"))
    if omp is not None:
        return omp, f"OMP_NUM_THREADS={omp} in the environment"
    cores = machine_cores()
    load = busy_cores()
    processes = positive_count(environ.get("LOCAL_WORLD_SIZE")) or 1
    shared = f", shared by {processes} processes" if processes > 1 else ""
    return threads_rule(cores, load, processes), f"{cores} cores, {load:.1f} busy{shared}"


def use_threads(requested=None, quiet=False):
    """Set torch's CPU threads for this run (choose_threads) and say so, in
    one line ("threads: 1 (2 cores, 1.9 busy)") unless `quiet` (--quiet).
    Under torchrun only the main process's line shows (cli.script_main
    silences the others). Returns the count.

    The line goes to stdout, with the run's other news ("wrote ...", a load
    report): stderr holds the progress bars and, for a run that fails, its
    one `error:` line and nothing else (support/cli.py)."""
    threads, why = choose_threads(requested)
    torch.set_num_threads(threads)
    if not quiet:
        print(f"threads: {threads} ({why})", flush=True)
    return threads


# ==============================================================================
# Seeds mixed from several numbers, so every random draw can be named.
#
# Training re-seeds dropout from (seed, "dropout", step, rank) and pretraining
# data draws each batch from (seed, "batch", epoch, index): a resumed or
# distributed run then makes exactly the draws an uninterrupted single-process
# run would have made, with no random state stored anywhere.
# ==============================================================================


def seed_from(*numbers):
    """One 63-bit seed from several integers or strings: the first 8 bytes of
    the SHA-256 of their repr (a hash, so nearby inputs give unrelated seeds)."""
    digest = hashlib.sha256(repr(numbers).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def generator_for(*numbers):
    """A torch.Generator seeded with seed_from(*numbers)."""
    return torch.Generator().manual_seed(seed_from(*numbers))
