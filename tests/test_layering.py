"""The package's modules sit on five levels, and each imports only its own
level and the ones below it.

    0  support       minibert/support/: checks, file I/O, caches, downloads, command lines
    1  model files   the models and the tokenizer: model.py, deberta.py, lstm.py, heads.py, tokenization.py
    2  checkpoints   minibert/checkpoints/: checkpoint formats and name tables, which build the models;
                     the package facade (minibert/__init__.py), which exports them
    3  lessons       every other minibert/X.py, and minibert/tasks/
    4  runs          minibert/runs/, minibert/walkthrough.py, minibert/coursework/

(The scripts, train_mlm.py and the others, sit above the package.)

Every `import minibert...` / `from minibert... import ...` statement, at the
top of a module or inside a function, is an arrow from that module to the
one it names; so is each name the facade exports on first use. So a
student reads a level with only the levels below it in mind: the model
knows no file format, no tokenizer and no training loop, and a lesson
knows no output folder.
"""

import ast
import re
from pathlib import Path

import minibert

PACKAGE_DIR = Path(minibert.__file__).parent

LEVEL_NAMES = ("support", "model files", "checkpoints", "lessons", "runs")
LESSONS = LEVEL_NAMES.index("lessons")

# A module, or a package and everything in it -> its level. Every top-level
# module not named here (minibert/X.py) is a lesson; a module that neither
# this table nor that rule places makes the test below fail until it is added.
LEVELS = {
    "minibert.support": 0,
    "minibert.model": 1,
    "minibert.deberta": 1,
    "minibert.lstm": 1,
    "minibert.heads": 1,
    "minibert.tokenization": 1,
    "minibert.checkpoints": 2,
    "minibert": 2,                  # the facade only (below, `minibert` does not cover its submodules)
    "minibert.tasks": 3,
    "minibert.runs": 4,
    "minibert.walkthrough": 4,
    "minibert.coursework": 4,
}


def level_of(module):
    """The level LEVELS gives `module` (its own entry, else its package's), a
    lesson's for a top-level module, or None."""
    if module in LEVELS:
        return LEVELS[module]
    package = next((name for name in LEVELS if name != "minibert" and module.startswith(name + ".")), None)
    if package is not None:
        return LEVELS[package]
    return LESSONS if module.count(".") == 1 else None


def module_name(path):
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules():
    return {module_name(path): path for path in PACKAGE_DIR.rglob("*.py")}


def imports_of(path, modules):
    """The minibert modules that `path` imports, anywhere in its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module in modules:
            for alias in node.names:  # `from minibert.support import hub` names a module; `import X` from a module names a value
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found


def import_graph():
    modules = package_modules()
    graph = {name: imports_of(path, modules) - {name} for name, path in modules.items()}
    graph["minibert"] |= set(minibert._EXPORTS.values())   # the facade imports these by name, on first use
    return graph


def find_cycle(graph):
    """A list of modules forming a cycle, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_package_imports_form_no_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]  # the search finds one
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_levels_table_places_modules_as_the_readme_says():
    assert level_of("minibert.support.errors") == 0 and level_of("minibert.support") == 0
    assert level_of("minibert.tokenization") == 1 and level_of("minibert.checkpoints.safetensors") == 2
    assert level_of("minibert.pretraining") == LESSONS and level_of("minibert.tasks.squad") == LESSONS
    assert level_of("minibert.runs.student_folder") == 4 and level_of("minibert.coursework.check") == 4
    assert level_of("minibert.newpackage.module") is None      # a new subpackage must be given its level


def test_every_import_points_to_the_same_level_or_a_lower_one():
    graph = import_graph()
    unplaced = sorted(name for name in graph if level_of(name) is None)
    assert not unplaced, f"modules with no level: {unplaced}; add them (or their package) to LEVELS"
    upward = []
    for name, imported in sorted(graph.items()):
        for target in sorted(imported):
            if level_of(target) > level_of(name):
                upward.append(f"{name} ({LEVEL_NAMES[level_of(name)]}, level {level_of(name)}) imports "
                              f"{target} ({LEVEL_NAMES[level_of(target)]}, level {level_of(target)})")
    assert not upward, ("imports of a higher level; move the importing code up to the level of what it imports, "
                        "or the imported code down:\n  " + "\n  ".join(upward))


def test_model_files_depend_only_on_the_error_type_and_their_config_checks():
    # The model files know no file format, tokenizer or training loop: they
    # import support's error type and their config checks only (deberta.py
    # also model.py, whose pieces it reuses).
    graph = import_graph()
    assert graph["minibert.model"] == {"minibert.support.errors", "minibert.support.config_checks"}
    assert graph["minibert.deberta"] == {"minibert.support.errors", "minibert.support.config_checks", "minibert.model"}
    assert graph["minibert.lstm"] == {"minibert.support.errors", "minibert.support.distillation.student_config"}


def test_tokenization_and_checkpoints_share_hub_and_protobuf_from_below():
    graph = import_graph()
    assert "minibert.checkpoints" not in graph["minibert.tokenization"]
    assert "minibert.support.fast_tokenizers" in graph["minibert.tokenization"]
    assert {"minibert.support.hub", "minibert.support.sentencepiece_model"} <= graph["minibert.support.fast_tokenizers"]
    assert "minibert.support.protobuf" in graph["minibert.support.sentencepiece_model"]
    assert not any(name.startswith("minibert.") and not name.startswith("minibert.support.")
                   for name in graph["minibert.support.sentencepiece_model"] | graph["minibert.support.tokenizer_files"])
    assert not any(name.startswith("minibert.checkpoints") for name in graph["minibert.support.hub"])


def test_a_run_calls_its_lesson():
    # A run sits above its lesson and calls the lesson's own functions: the
    # step a student reads is the step that runs.
    graph = import_graph()
    assert "minibert.pretraining" in graph["minibert.runs.pretraining"]
    assert "minibert.distillation" in graph["minibert.runs.distillation"]


# ----------------------------------------------------------------------------
# The reading path: lessons only, short, and free of command lines
# ----------------------------------------------------------------------------

README = PACKAGE_DIR.parent / "README.md"
READING_PATH_TARGET = 5100      # lines, about three quarters of the original authors' code for the same scope
                                # (5,000 before the schedule keyed to a time budget joined training.py)


def reading_path_files():
    """Every minibert/...py file the README's reading path section names (the
    tasks by their short names, ner.py and squad.py, as it names them)."""
    text = README.read_text(encoding="utf-8")
    start = text.index("## Reading path")
    section = text[start:text.index("\n## ", start)]              # up to the next section
    names = re.findall(r"minibert/[\w/]+\.py", section)
    names += [f"minibert/tasks/{name}" for name in re.findall(r"`(\w+\.py)`", section)
              if (PACKAGE_DIR / "tasks" / name).is_file()]
    return [PACKAGE_DIR.parent / name for name in dict.fromkeys(names)]


def reading_path_lines(path):
    """The lines of `path` a reader of the path reads: a task file's lines
    above its closing section "# The files: ...", its datasets' readers and
    writers and the checks of its settings (support, which a student may
    skip, kept in the task's one file)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.parent.name == "tasks":
        heading = next((i for i, line in enumerate(lines) if line.startswith("# The files")), len(lines) + 1)
        lines = lines[:heading - 1]                 # up to the "# ----" rule above the heading
    return len(lines)


def test_the_reading_path_names_lessons_only_and_stays_within_its_target():
    files = reading_path_files()
    assert len(files) >= 15 and all(path.is_file() for path in files), files
    for path in files:
        level = level_of(module_name(path))
        assert level in (LEVEL_NAMES.index("model files"), LESSONS), f"{path.name}: level {level}, not a lesson"
    assert reading_path_lines(PACKAGE_DIR / "tasks" / "ner.py") < len((PACKAGE_DIR / "tasks" / "ner.py").read_text(
        encoding="utf-8").splitlines())                   # the CoNLL reader is below the heading
    lines = sum(reading_path_lines(path) for path in files)
    assert lines <= READING_PATH_TARGET, f"the reading path is {lines} lines, the target {READING_PATH_TARGET}"


def test_no_lesson_names_a_command_line_flag():
    # A lesson's errors name its parameters; a script translates them to its flags.
    flag = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
    for name, path in package_modules().items():
        if level_of(name) not in (LEVEL_NAMES.index("model files"), LESSONS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not flag.search(node.value), f"{path.name}:{node.lineno} names a flag: {node.value!r}"
