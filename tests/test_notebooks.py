"""notebooks/first_steps.ipynb runs end to end in a fresh kernel (nbclient), on
the built-in sentiment set (MINIBERT_NOTEBOOK_QUICK=1, as the notebook says),
and its printed values are the real ones: the bundled model's word for the
[MASK], an accuracy far above chance, a script's main returning 0."""

import json
import os
import re

import pytest

from helpers import REPO

NOTEBOOK = REPO / "notebooks" / "first_steps.ipynb"


def test_the_committed_notebook_has_no_outputs():
    # A small diff and no stale figures: outputs are made by running it, never committed.
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code and all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)


def test_the_notebook_runs_end_to_end_with_real_values():
    nbformat = pytest.importorskip("nbformat", reason="nbformat (requirements-test.txt) is not installed")
    nbclient = pytest.importorskip("nbclient", reason="nbclient (requirements-test.txt) is not installed")
    pytest.importorskip("ipykernel", reason="ipykernel (requirements-test.txt) is not installed")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        pytest.skip("no python3 Jupyter kernel on this machine")

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel runs this interpreter's python (the one with the test dependencies), one thread.
    env = {"MINIBERT_NOTEBOOK_QUICK": "1", "OMP_NUM_THREADS": "1"}
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                         resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        client.execute()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    text = "".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                   for output in cell.outputs if output.output_type == "stream")

    assert f"minibert from {REPO / 'minibert'}" in text          # the checkout's package, not another install
    assert "1. Tokens and ids" in text and "6. The MLM head on every layer" in text   # the walk, printed
    assert "max |difference|: 0.0" in text
    assert "masked word: door" in text                           # the bundled model's first guess
    assert "the built-in set (MINIBERT_NOTEBOOK_QUICK=1): 640 training sentences, 200 held out" in text
    accuracy = float(re.search(r"held-out accuracy: ([\d.]+)%", text).group(1))
    assert accuracy > 85, text[-2000:]                           # chance is 50%; measured 94.50
    assert re.search(r"positive \(\d\.\d\d\)  what a charming story !", text)
    assert re.search(r"negative \(\d\.\d\d\)  i found the script tedious \.", text)
    assert re.search(r"accuracy +\d", text) and "finetune.main returned 0" in text
