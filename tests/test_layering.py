"""The package's modules depend on each other in one direction only.

Every `import minibert...` / `from minibert... import ...` statement, at the
top of a module or inside a function, is an arrow from that module to the
one it names. The arrows must form no cycle, so each module can be read
(and tested) with only the modules below it in mind. The model sits at the
bottom: it knows no file format, no tokenizer, no training loop.
"""

import ast
from pathlib import Path

import minibert

PACKAGE_DIR = Path(minibert.__file__).parent


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
    found.discard("minibert")  # the package facade imports its submodules lazily, by name
    return found


def import_graph():
    modules = package_modules()
    return {name: imports_of(path, modules) - {name} for name, path in modules.items()}


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


def test_model_files_depend_only_on_the_error_type_and_their_config_checks():
    # The model files know no file format, tokenizer or training loop: they
    # import support's error type and their config checks only (deberta.py
    # also model.py, whose pieces it reuses).
    graph = import_graph()
    assert graph["minibert.model"] == {"minibert.support.errors", "minibert.support.config_checks"}
    assert graph["minibert.deberta"] == {"minibert.support.errors", "minibert.support.config_checks", "minibert.model"}
    assert graph["minibert.lstm"] == {"minibert.support.errors", "minibert.support.student_config"}


def test_support_modules_import_no_lesson():
    # Support sits below the lessons: it may import other support modules and
    # the checkpoint code (which builds models), never a lesson module, except
    # the loader that rebuilds what a lesson wrote, as the checkpoint code does
    # for the model: the student folder (the student, its task and tokenizer).
    graph = import_graph()
    allowed_lessons = {
        "minibert.runs.student_folder": {"minibert.lstm", "minibert.tasks", "minibert.tokenization"},
    }
    for name, imported in graph.items():
        if name.startswith("minibert.support"):
            lessons = {m for m in imported if not m.startswith(("minibert.support", "minibert.checkpoints"))}
            assert lessons <= allowed_lessons.get(name, set()), f"{name} imports lesson modules {sorted(lessons)}"


def test_tokenization_and_checkpoints_share_hub_and_protobuf_from_below():
    graph = import_graph()
    assert "minibert.checkpoints" not in graph["minibert.tokenization"]
    assert "minibert.support.fast_tokenizers" in graph["minibert.tokenization"]
    assert {"minibert.support.hub", "minibert.support.sentencepiece_model"} <= graph["minibert.support.fast_tokenizers"]
    assert "minibert.support.protobuf" in graph["minibert.support.sentencepiece_model"]
    assert not any(name.startswith("minibert.") and not name.startswith("minibert.support.")
                   for name in graph["minibert.support.sentencepiece_model"] | graph["minibert.support.tokenizer_files"])
    assert not any(name.startswith("minibert.checkpoints") for name in graph["minibert.support.hub"])


def test_no_lesson_imports_a_run():
    # A run (minibert/runs/) sits above its lesson: it calls the lesson's functions, never the reverse.
    graph = import_graph()
    for name, imported in graph.items():
        if not name.startswith(("minibert.runs", "minibert.coursework")):
            assert not {m for m in imported if m.startswith("minibert.runs")}, f"{name} imports a run"
    assert "minibert.pretraining" in graph["minibert.runs.pretraining"]
    assert "minibert.distillation" in graph["minibert.runs.distillation"]
