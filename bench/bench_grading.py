"""What one grade costs: peak memory and CPU time of `python -m minibert.coursework check`,
against what Gradescope gives an autograder by default (768 MB of memory, half a CPU, 10 minutes).

The grade runs as a child of this script. Every 0.2 s the script adds up the resident memory
(VmRSS) of the grader and every process below it (the instructor's run, the jailed run, bwrap),
since a container's limit counts them together; it reports the largest sum seen, the largest
single process, the CPU time of the whole tree (user + system, from getrusage once it has ended)
and the wall time. At half a CPU a grade takes at least twice its CPU time of wall time.

    python bench/bench_grading.py --data ../shared/data        # every exercise and the three end-to-end rows
    python bench/bench_grading.py -- --assignment 1            # arguments after -- go to check
    python bench/bench_grading.py --json cost.json -- layer-norm gelu-erf

--data is check's: the folder holding sst2/train.tsv and sst2/dev.tsv, which the end-to-end rows of
the tokenizer and the milestone read (check stops, in one line, where they are chosen without it).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

GRADESCOPE = {"memory_mb": 768, "cpus": 0.5, "minutes": 10}


def tree_of(root):
    """The pids of `root` and every process below it (read from /proc)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def resident_mb(pid):
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return 0.0            # the process ended between the listing and the read
    return 0.0


def measure(check_args):
    command = [sys.executable, "-m", "minibert.coursework", "check", *check_args]
    began = time.monotonic()
    grader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak_total = peak_single = 0.0
    while grader.poll() is None:
        sizes = [resident_mb(pid) for pid in tree_of(grader.pid)]
        peak_total, peak_single = max(peak_total, sum(sizes)), max(peak_single, max(sizes, default=0.0))
        time.sleep(0.2)
    output = grader.stdout.read()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = next((line for line in output.splitlines() if line.startswith("total")), "total ?").split()[-1]
    return {"command": " ".join(["python -m minibert.coursework check", *check_args]),
            "score": total, "wall_s": round(time.monotonic() - began, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 1), "peak_memory_mb": round(peak_total),
            "peak_process_mb": round(peak_single), "exit_status": grader.returncode}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--data", metavar="DIR", help="check's --data: the folder holding sst2/train.tsv and "
                        "sst2/dev.tsv, for the end-to-end rows that read them")
    parser.add_argument("check_args", nargs="*", metavar="CHECK_ARGUMENT",
                        help="arguments for check, after -- (default: every exercise)")
    args = parser.parse_args(argv)
    cost = measure(args.check_args + (["--data", args.data] if args.data else []))
    fits = {"memory": cost["peak_memory_mb"] <= GRADESCOPE["memory_mb"],
            "time": cost["cpu_s"] / GRADESCOPE["cpus"] <= GRADESCOPE["minutes"] * 60}
    print(f"{cost['command']}: {cost['score']}")
    print(f"{'':<24}{'this grade':>14}{'Gradescope default':>22}")
    print(f"{'peak memory (all)':<24}{cost['peak_memory_mb']:>11} MB{GRADESCOPE['memory_mb']:>19} MB"
          f"   {'fits' if fits['memory'] else 'raise the memory limit'}")
    print(f"{'largest process':<24}{cost['peak_process_mb']:>11} MB")
    print(f"{'CPU time':<24}{cost['cpu_s']:>12} s{GRADESCOPE['cpus']:>17} CPU")
    print(f"{'at half a CPU, at least':<24}{cost['cpu_s'] / GRADESCOPE['cpus'] / 60:>10.1f} min"
          f"{GRADESCOPE['minutes']:>18} min   {'fits' if fits['time'] else 'raise the time limit or the CPUs'}")
    print(f"{'wall time here':<24}{cost['wall_s']:>12} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**cost, "gradescope_default": GRADESCOPE, "fits": fits}, f, indent=2)
    return 0 if cost["exit_status"] in (0, 1) else 1


if __name__ == "__main__":
    raise SystemExit(main())
