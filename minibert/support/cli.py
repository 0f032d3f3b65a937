"""What every command-line script shares: one-line errors, and exit statuses
that say whose mistake it was.

    parser = ArgumentParser(prog="script.py", description=__doc__)
    ...
    @script_main
    def main(argv=None):
        args = parser.parse_args(argv)
        ...
        return 0
    if __name__ == "__main__":
        run(main)

`run` is the one place that exits: called from Python (a notebook, a test),
`main(["--flag", "value"])` returns its status, `--help` included, and
raises a bad flag or a bad file as an exception (UsageError, MiniBertError)
for the caller to see, never SystemExit.

A lesson names its own parameters in its errors (`ParameterError`,
"layer_order: empty"); FLAGS below says which flag gives each one, and the
error line `run` prints puts the flag in its place ("--order: empty"), so a
user reads the name they typed.

A mistake on the command line itself (an unknown flag, a missing required
flag, a flag's invalid value, flags that do not go together) is a usage
error: argparse's usage line, then `error: <message>`, and exit status 2, as
every argparse tool does. A `MiniBertError` met while running (a bad file,
bad data) is one line, `error: <message>`, on stderr and exit status 1.
Anything else is a bug and keeps its traceback. (The end of this file holds
what finetune.py and distill.py print: metrics as a small table, results
ready for JSON.)

Every flag's value is checked when the command line is read, by the `type=`
helpers below (positive_int, probability(), device, output_folder, ...), so a
typo fails at once with one line naming the flag and the allowed values,
not minutes later (after a vocabulary was trained) or never (a NaN learning
rate trains quietly on NaNs):

    parser.add_argument("--lr", type=positive_float, default=5e-4)
    python train_mlm.py ... --lr -1
    usage: train_mlm.py [-h] ...
    error: argument --lr: expected a number > 0, got -1.0 (see train_mlm.py --help)
"""

import argparse
import contextlib
import functools
import json
import math
import os
import sys
import tempfile
from pathlib import Path

from minibert.support import MiniBertError, ParameterError, Terminated


class UsageError(MiniBertError):
    """A mistake on the command line: `run` prints the usage line and exits with 2."""

    def __init__(self, message, usage):
        super().__init__(message)
        self.usage = usage


class ArgumentParser(argparse.ArgumentParser):
    """argparse, whose errors `run` reports (usage line, `error:` line, exit 2).
    A script calls parser.error(message) for flags that do not go together.

    Two things every script gets here, once: an argument list from Python may
    hold paths and numbers (`main(["--model", Path("runs/x"), "--steps", 10])`,
    as a notebook writes it), which become the strings a shell would give;
    and --quiet also silences the downloads' progress bars (quiet_downloads)."""

    def parse_known_args(self, args=None, namespace=None):
        if args is not None:
            args = [command_line_text(item, self) for item in
                    ([args] if isinstance(args, (str, os.PathLike)) else args)]
        parsed, extras = super().parse_known_args(args, namespace)
        if getattr(parsed, "quiet", False) is True:
            quiet_downloads()
        return parsed, extras

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        # --device last, once every other flag is read: its check imports torch (seconds), which an
        # unknown flag or a bad value elsewhere should not wait for (add_device)
        if isinstance(getattr(parsed, "device", None), DeviceName):
            parsed.device = checked(self, "--device", device, parsed.device)
        # --threads (add_threads): torch's CPU threads set, and said, before the run starts
        if any(action.type is thread_count for action in self._actions):
            from minibert.support.runtime import use_threads
            parsed.threads = use_threads(parsed.threads, quiet=getattr(parsed, "quiet", False) is True)
        return parsed

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)", self.format_usage())

    def exit(self, status=0, message=None):
        # argparse calls this after --help has printed the help; script_main
        # turns it into main's return value, run into the exit status.
        if message:
            print(message, file=sys.stderr, end="")
        raise ParserExit(status)


def command_line_text(item, parser):
    """One item of an argument list from Python as the shell would give it."""
    if isinstance(item, str):
        return item
    if isinstance(item, os.PathLike):
        return os.fspath(item)
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return str(item)
    parser.error(f"the argument list holds {item!r} ({type(item).__name__}); expected strings, paths or numbers")


# Whether quiet_downloads turned huggingface_hub's progress bars off (and
# script_main must turn them on again when the script returns).
_progress_bars_turned_off = False


def quiet_downloads():
    """--quiet: huggingface_hub's progress bars off ("Fetching N files", each
    file's download), and with them minibert's archive downloader's
    (hub.progress_bars_on), until the script's main returns."""
    global _progress_bars_turned_off
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars
    if not are_progress_bars_disabled():
        disable_progress_bars()
        _progress_bars_turned_off = True


def restore_progress_bars():
    global _progress_bars_turned_off
    if _progress_bars_turned_off:
        from huggingface_hub.utils import enable_progress_bars
        enable_progress_bars()
        _progress_bars_turned_off = False


class ParserExit(SystemExit):
    """argparse has finished the run by itself (--help): a SystemExit, so code
    that does not know it still exits as argparse does."""


def script_main(main):
    """Make a script's main(argv) callable from Python (a notebook, a test):
    it returns its exit status (0 after --help) instead of exiting, and
    releases the --output locks it took (support/outputs.safe_run), so the
    next call in the same process may write the same folder, and turns the
    progress bars that --quiet silenced on again. Errors stay exceptions:
    `run` is the one place that turns them into exit statuses. Under
    torchrun only the main process speaks (main_process_speaks)."""
    @functools.wraps(main)
    def called(argv=None):
        from minibert.support.outputs import release_locks
        try:
            with main_process_speaks():
                return main(argv) or 0
        except ParserExit as e:
            return e.code
        finally:
            release_locks()
            restore_progress_bars()
    return called


@contextlib.contextmanager
def main_process_speaks():
    """Under torchrun, every process but the main one (outputs.is_main_process)
    runs with its sys.stdout and sys.stderr sent to os.devnull, so that the
    run's lines, warnings and progress appear once, as one process would show
    them, not once per process (the figures in them are the whole run's:
    commands/trainer.py sums them over the processes). An error still reaches
    the terminal from every process that meets it: it leaves main as an
    exception, and `run` prints it after the streams are back."""
    from minibert.support.outputs import is_main_process
    if is_main_process():
        yield
        return
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere), contextlib.redirect_stderr(nowhere):
        yield


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep the description's line breaks; add "(default: X)" to an option's
    help when it has a real default and the help does not already say it."""

    def _get_help_string(self, action):
        text = action.help or ""
        no_default = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if not no_default and "default" not in text:
            text += " (default: %(default)s)"
        return text


# The flag that gives each lesson parameter a script passes on: a lesson's
# ParameterError starts with the parameter's name, which the user reads as the flag's.
FLAGS = {
    "duplicate": "--duplicate",     # duplication.duplicate_order (duplicate.py, bench/duplication_study.py)
    "layer_order": "--order",       # duplication.deepen
    "tied": "--tied",
    "k": "--repeat",                # duplication.repeat_albert
    "task_name": "--task",          # checkpoints/task_folders.py, commands/finetune.load_task_model
    "label_map": "--label-map",
}


def one_line(error):
    """An error's message on one line, a piped input named as the user gave
    it, a lesson's parameter as the flag that gave it (FLAGS)."""
    from minibert.support.files import as_given
    message = str(error)
    if isinstance(error, ParameterError) and error.parameter in FLAGS:
        message = FLAGS[error.parameter] + message[len(error.parameter):]
    return as_given(" ".join(message.split()))


def run(main, argv=None):
    from minibert.support.outputs import release_locks
    try:
        status = main(argv)
    except UsageError as e:
        print(e.usage.rstrip(), file=sys.stderr)
        print(f"error: {one_line(e)}", file=sys.stderr)
        sys.exit(2)
    except MiniBertError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)  # one line, whatever the message held
        sys.exit(1)
    except KeyboardInterrupt as e:        # Ctrl-C, or SIGTERM while a run holds its --output (Terminated)
        terminated = isinstance(e, Terminated)
        print(f"error: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        sys.exit(143 if terminated else 130)
    except BrokenPipeError:           # `... | head -1`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())      # so the exit's own flush of stdout fails no more
        sys.exit(141)                  # 128 + SIGPIPE, as a shell tool stopped by the pipe
    finally:
        release_locks()               # the --output folders this run held (support/outputs.safe_run)
    sys.exit(status or 0)


# ----------------------------------------------------------------------------
# Flag types: argparse calls `type(text)` for each value. A helper returns the
# checked value or raises ArgumentTypeError; argparse turns that into
# "argument --flag: <message>", which ArgumentParser.error above makes one
# `error:` line. (A ValueError would lose our message: argparse replaces it
# with "invalid <type> value".)
# ----------------------------------------------------------------------------


def _parse(text, convert, allowed):
    """int(text) or float(text). NaN and infinity are refused too: no flag can
    use them, and a NaN slips through every comparison (NaN < 0 is False)."""
    try:
        value = convert(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")
    return value


def int_at_least(minimum, why=""):
    """A type for integer flags that have a lower bound; `why` explains it in the message."""
    allowed = f"an integer >= {minimum}{why}"

    def check(text):
        value = _parse(text, int, allowed)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {value}")
        return value
    return check


def int_between(minimum, maximum, why=""):
    """A type for integer flags with both bounds (included)."""
    allowed = f"an integer in [{minimum}, {maximum}]{why}"

    def check(text):
        value = _parse(text, int, allowed)
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {value}")
        return value
    return check


positive_int = int_at_least(1)          # sizes, counts of steps and batches
non_negative_int = int_at_least(0)      # where 0 means "none" or "never" (the help says which)
seed = int_between(0, 2**63 - 1, " (torch's seeds are 63-bit)")


def float_in(low=-math.inf, high=math.inf, include_low=True, include_high=True, kind="number"):
    """A type for float flags in an interval. The ends are included unless
    include_low / include_high say otherwise; NaN and infinity never pass."""
    if high == math.inf:
        allowed = f"a {kind} {'>=' if include_low else '>'} {low:g}" if low > -math.inf else f"a finite {kind}"
    else:
        allowed = f"a {kind} in {'[' if include_low else '('}{low:g}, {high:g}{']' if include_high else ')'}"

    def check(text):
        value = _parse(text, float, allowed)
        too_low = value < low or (value == low and not include_low)
        too_high = value > high or (value == high and not include_high)
        if too_low or too_high:
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {value:g}")
        return value
    return check


finite_float = float_in()
positive_float = float_in(0, include_low=False)      # learning rates, minutes
non_negative_float = float_in(0)                     # weight decay, clipping norm (0 = off)


def probability(include_zero=False, include_one=True):
    """A type for a fraction or probability: (0, 1] by default (a masking
    rate of 0 trains nothing); probability(include_zero=True,
    include_one=False) is [0, 1), e.g. for dropout (1 drops everything)."""
    return float_in(0, 1, include_low=include_zero, include_high=include_one, kind="probability")


def label_map(text):
    """--label-map NAME=LABEL,...: a model's label names -> the task's labels
    (a folder trained with transformers names its labels LABEL_0, LABEL_1, ...
    unless told otherwise). Returns a dict in the order given."""
    mapping = {}
    for item in text.split(","):
        name, equals, label = (part.strip() for part in item.partition("="))
        if not equals or not name or not label:
            raise argparse.ArgumentTypeError(f"expected NAME=LABEL pairs separated by commas (e.g. "
                                             f"LABEL_0=0,LABEL_1=1), got {item.strip()!r}")
        if name in mapping:
            raise argparse.ArgumentTypeError(f"{name!r} is mapped twice")
        mapping[name] = label
    return mapping


def add_label_map(group, folders="a folder trained with transformers"):
    """--label-map, for `folders` (no task.json: --task says the task)."""
    group.add_argument("--label-map", type=label_map, metavar="NAME=LABEL,...",
                       help=f"{folders}: rename the model's labels (config.json's id2label) to the task's, e.g. "
                            f"LABEL_0=0,LABEL_1=1; needed where its names are transformers' generic LABEL_k or "
                            f"differ from the task's; with --task (docs/guide.md 6.2, \"A folder trained with "
                            f"transformers\")")


def add_bf16(group, runs="every model it runs"):
    """The --bf16 flag, with the one meaning every script gives it
    (support/runtime.autocast). `runs`: what the flag puts under autocast."""
    group.add_argument("--bf16", action="store_true",
                       help=f"bfloat16 autocast on any device for {runs} (faster on a GPU, or a CPU with "
                            f"AVX512-BF16/AMX); weights stay float32, outputs and losses are computed in float32 "
                            f"(without it, float32 throughout)")


class DeviceName(str):
    """--device as typed, which ArgumentParser.parse_args turns into a
    torch.device (`device`) after the rest of the command line is read."""


def device(text):
    """--device: auto, cpu, cuda, cuda:N or mps, present on this machine. Returns a torch.device."""
    from minibert.support.runtime import choose_device     # imports torch, so only once a flag is read
    try:
        return choose_device(text)
    except MiniBertError as e:                      # its message starts "--device NAME"; argparse names the flag
        raise argparse.ArgumentTypeError(str(e).removeprefix("--device ")) from None


def _check_writable(folder):
    """`folder` exists and we may write in it, or it can be made: the nearest
    folder on its way that exists is one we may write in (not a file). Tried
    for real, with a temporary file that vanishes when closed: permissions
    alone do not tell (root may write anywhere, except on a read-only disk
    or in /proc)."""
    existing = folder
    while not existing.exists():        # ends at "." or "/" at worst, which exist
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{existing} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot write in {existing} ({e.strerror})") from None


def output_file(text):
    """A file to write (e.g. --json): not a folder, in a folder that exists or
    can be made. Returns a Path; the script makes the missing folders."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; expected a file name")
    _check_writable(path.parent)
    return path


def output_folder(text):
    """A folder to write into (e.g. --output): not a file; it exists and is
    writable, or can be made. Returns a Path. (Whether it may already hold
    files is the run's decision: see support/outputs.py's safe_run.)"""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file; expected a folder")
    _check_writable(path)
    return path


def checked(parser, flag, helper, text):
    """helper(text) for a flag checked after the command line is read (e.g.
    --output, a folder or a file depending on the form of the command): a
    value it refuses is a usage error naming the flag, as if argparse had
    checked it."""
    try:
        return helper(text)
    except argparse.ArgumentTypeError as e:
        parser.error(f"argument {flag}: {e}")


def make_parent_folder(path):
    """Make the missing folders an output_file goes in, just before writing it."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MiniBertError(f"{path}: cannot make its folder ({e.strerror})") from None


# ----------------------------------------------------------------------------
# Flag groups the scripts and the bench studies share, defined once
# ----------------------------------------------------------------------------

PLOT_NEEDS = "needs matplotlib: pip install -e '.[plot]'"


def add_reports(group, json_holds, plot_draws=None, json_metavar="FILE"):
    """--json (the results as JSON: `json_holds`) and, if `plot_draws`, --plot
    (a figure of `plot_draws`). Both are files checked when the command line
    is read (output_file)."""
    group.add_argument("--json", type=output_file, metavar=json_metavar, help=f"write {json_holds} as JSON")
    if plot_draws:
        group.add_argument("--plot", type=output_file, metavar="FILE.png", help=f"plot {plot_draws} ({PLOT_NEEDS})")


def add_device(group, default="auto", quiet=True):
    """--device (and --quiet: no progress bars), and --threads (add_threads).
    Its value is a torch.device, checked when the rest of the command line
    has been read (DeviceName)."""
    group.add_argument("--device", type=DeviceName, default=default,
                       help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps")
    add_threads(group)
    if quiet:
        group.add_argument("--quiet", action="store_true", help="no progress bars (and no threads: line)")


def thread_count(text):
    """--threads N: a positive integer (its own type, by which
    ArgumentParser.parse_args knows the flag to act on)."""
    return positive_int(text)


def add_threads(group):
    """--threads N: torch's CPU threads. Once the command line is read,
    ArgumentParser.parse_args sets them (support/runtime.use_threads: the
    flag, else OMP_NUM_THREADS, else the cores not already busy) and prints
    one line saying how many and why; args.threads is then that count."""
    group.add_argument("--threads", type=thread_count, metavar="N",
                       help="CPU threads for torch (default: OMP_NUM_THREADS if set, else the cores not already "
                            "busy: all cores less the 1-minute load average, at least 1; docs/guide.md 2, "
                            "Threads)")


def add_checkpointing(group, kept, resume_help="continue from OUTPUT/checkpoint.pt after a kill",
                      stopping="the best epoch is chosen among end-of-epoch evaluations only, so a stopped and "
                               "resumed run keeps the model an unstopped one keeps"):
    """--resume, --max-minutes and --keep-checkpoint of a training run, whose
    OUTPUT/checkpoint.pt holds `kept` (e.g. "the weights and Adam's two
    moments"); `stopping`: what a run stopped by --max-minutes keeps."""
    group.add_argument("--resume", action="store_true", help=resume_help)
    group.add_argument("--max-minutes", type=positive_float,
                       help=f"stop (with a checkpoint; --resume continues) after this much time; {stopping}")
    group.add_argument("--keep-checkpoint", action="store_true",
                       help=f"keep OUTPUT/checkpoint.pt ({kept}) after the run has finished; by default it is "
                            f"removed once the model is saved (a run stopped by --max-minutes always keeps it, to "
                            f"--resume)")


def add_fine_tuning(group, max_seq_len=128, max_seq_len_help="tokens per example",
                    evaluating="when evaluating or predicting"):
    """BERT's fine-tuning recipe (Devlin et al. A.3), as finetune.py and the
    studies that fine-tune many runs take it."""
    group.add_argument("--epochs", type=positive_int, default=3, help="passes over the training examples")
    group.add_argument("--lr", type=positive_float, default=5e-5, help="peak learning rate (AdamW)")
    group.add_argument("--batch-size", type=positive_int, default=32, help="training examples per step")
    group.add_argument("--eval-batch-size", type=positive_int, default=128,
                       help=f"examples per forward pass {evaluating} (does not change the scores)")
    group.add_argument("--max-seq-len", type=int_at_least(8), default=max_seq_len, help=max_seq_len_help)
    group.add_argument("--warmup", type=probability(include_zero=True, include_one=False), default=0.1,
                       help="fraction of the steps with a rising learning rate")
    group.add_argument("--weight-decay", type=non_negative_float, default=0.01, help="AdamW weight decay")


def add_sift(group):
    """SiFT's three settings (He et al. 2021, 3.3), whose defaults are
    minibert.sift.SiftConfig's, the official code's (docs/deberta.md 5)."""
    group.add_argument("--sift-lambda", type=positive_float, metavar="LAMBDA",
                       help="weight of the adversarial loss: the loss is l + LAMBDA l_adv (default 5: the official "
                            "vat_lambda of the base, v3-base, v3-small and xxlarge-v2 SiFT runs in "
                            "experiments/glue/mnli.sh; v3-xsmall uses 3)")
    group.add_argument("--sift-init-scale", type=positive_float, metavar="SIGMA",
                       help="std of the initial perturbation, N(0, SIGMA^2) clipped to +-2 SIGMA, on embeddings "
                            "normalised to variance 1 (default 0.01: official vat_init_perturbation)")
    group.add_argument("--sift-step-size", type=positive_float, metavar="ETA",
                       help="size of the one ascent step, per token: delta += ETA g / max|g| "
                            "(default 0.0001: official vat_learning_rate)")


# ==============================================================================
# Command-line reports: metrics as a small table, results ready for JSON.
#
# What finetune.py and distill.py print and write; nothing here is part of a
# lesson.
# ==============================================================================


def format_metrics(metrics, title):
    """A small table: one metric per line, in percent. The figures line up on
    their last digit, however wide the widest; words after a figure
    ("962,302 (0.96M) without embeddings") follow it."""
    rows = [(key, f"{value:.2f}" if isinstance(value, float) else str(value))
            for key, value in metrics.items() if not isinstance(value, dict)]
    width = max(len(k) for k in metrics) if metrics else 0
    figures = [text.partition(" ") for _, text in rows]
    figure_width = max([8] + [len(figure) for figure, _, _ in figures])
    lines = [title, "-" * max(len(title), width + 10)]
    for (key, _), (figure, space, words) in zip(rows, figures):
        lines.append(f"{key:<{width}}  {figure:>{figure_width}}{space}{words}")
    return "\n".join(lines)


def json_safe(values):
    """`values` with numpy scalars turned into floats, ready for json.dump."""
    return json.loads(json.dumps(values, default=float))
