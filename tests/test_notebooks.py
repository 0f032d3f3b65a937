"""notebooks/first_steps.ipynb runs end to end in a fresh kernel (nbclient) in
both of its modes: on the built-in sentiment set (MINIBERT_NOTEBOOK_QUICK=1,
a few seconds), and on SST-2 where ../shared/data/sst2 is there (its default,
about a minute). Its printed values are the real ones: the set-up cell's
minibert, the bundled model's word for the [MASK], an accuracy far above
chance, the showcase sentences' labels, a script's main returning 0, and
progress bars drawn as notebook widgets (no TqdmWarning, no cursor-up codes)."""

import ast
import json
import os
import re

import pytest

from helpers import REPO

NOTEBOOK = REPO / "notebooks" / "first_steps.ipynb"
SST2 = REPO.parent / "shared" / "data" / "sst2"


def test_the_committed_notebook_has_no_outputs():
    # A small diff and no stale figures: outputs are made by running it, never committed.
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)


def test_the_set_up_cell_never_pins_torch():
    """Colab's torch is built for its GPU: the first cell installs minibert with
    --no-deps, then only the requirements missing altogether (its branch that
    clones needs the network, so only its text is checked here)."""
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    first = "".join(next(cell for cell in cells if cell["cell_type"] == "code")["source"])
    assert re.search(r'^REPOSITORY_URL = "', first, re.M)
    assert '"--no-deps", str(CLONE)' in first and 'importlib.metadata.requires("minibert")' in first
    strings = [node.value for node in ast.walk(ast.parse(first)) if isinstance(node, ast.Constant)
               and isinstance(node.value, str)]
    assert "--no-deps" in strings and not [string for string in strings if "torch" in string]


def run_notebook(quick):
    """Every stream the executed notebook printed, as one text, and its other outputs' text."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat (requirements-test.txt) is not installed")
    nbclient = pytest.importorskip("nbclient", reason="nbclient (requirements-test.txt) is not installed")
    pytest.importorskip("ipykernel", reason="ipykernel (requirements-test.txt) is not installed")
    pytest.importorskip("ipywidgets", reason="ipywidgets (requirements-test.txt), which tqdm draws with, is not installed")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        pytest.skip("no python3 Jupyter kernel on this machine")

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel runs this interpreter's python (the one with the test dependencies), one thread.
    env = {"MINIBERT_NOTEBOOK_QUICK": "1" if quick else "0", "OMP_NUM_THREADS": "1"}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        client.execute()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    text = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    return text, json.dumps(outputs)


def check_common_values(text, everything):
    assert f"minibert from {REPO / 'minibert'} (this checkout)" in text   # the checkout's package, not another
    assert "1. Tokens and ids" in text and "6. The MLM head on every layer" in text   # the walk, printed
    assert "max |difference|: 0.0" in text
    assert "masked word: door" in text                           # the bundled model's first guess
    # The showcase: the label a reader gives, and the model's, for both sentences.
    assert re.search(r"positive +positive \(\d\.\d\d\)  a beautiful , touching story \.\n", text), text[-2000:]
    assert re.search(r"negative +negative \(\d\.\d\d\)  the plot is dreadful \.\n", text), text[-2000:]
    assert "<- wrong" not in text
    assert re.search(r"accuracy +\d", text) and "finetune.main returned 0" in text
    # tqdm.auto drew widgets: no fallback warning and no text bars' cursor-up codes anywhere.
    assert "TqdmWarning" not in everything and "\\u001b[A" not in everything
    assert "application/vnd.jupyter.widget-view+json" in everything


def test_the_notebook_runs_end_to_end_on_the_built_in_set():
    text, everything = run_notebook(quick=True)
    check_common_values(text, everything)
    assert "the built-in set (MINIBERT_NOTEBOOK_QUICK=1): 640 training sentences, 200 held out" in text
    accuracy = float(re.search(r"held-out accuracy: ([\d.]+)%", text).group(1))
    assert accuracy > 85, text[-2000:]                           # chance is 50%; measured 94.50


@pytest.mark.shared_data
@pytest.mark.skipif(not (SST2 / "train.tsv").is_file() or not (SST2 / "dev.tsv").is_file(),
                    reason="needs ../shared/data/sst2/train.tsv and dev.tsv, absent here")
def test_the_notebook_runs_end_to_end_on_sst2():
    text, everything = run_notebook(quick=False)
    check_common_values(text, everything)
    assert f"SST-2 from {SST2}: 2,000 training sentences, 872 dev sentences" in text
    accuracy = float(re.search(r"held-out accuracy: ([\d.]+)%", text).group(1))
    assert accuracy > 65, text[-2000:]                           # chance is about 50%; measured 70.07
