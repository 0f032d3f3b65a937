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


def test_model_depends_only_on_the_error_type():
    # The model files import support's error type and config checks only (deberta.py also model.py).
    allowed = {"minibert.support.errors", "minibert.support.config_checks"}
    graph = import_graph()
    assert graph["minibert.model"] <= allowed
    assert graph["minibert.deberta"] <= allowed | {"minibert.model"}
    assert all(name.startswith("minibert.support.") for name in graph["minibert.lstm"])   # its own config checks


def test_tokenization_and_checkpoints_share_hub_and_protobuf_from_below():
    graph = import_graph()
    assert "minibert.checkpoints" not in graph["minibert.tokenization"]
    assert {"minibert.support.hub", "minibert.support.sentencepiece_model"} <= graph["minibert.tokenization"]
    assert "minibert.support.protobuf" in graph["minibert.support.sentencepiece_model"]
    assert not any(name.startswith("minibert.") and not name.startswith("minibert.support.")
                   for name in graph["minibert.support.sentencepiece_model"] | graph["minibert.support.tokenizer_files"])
    assert not any(name.startswith("minibert.checkpoints") for name in graph["minibert.support.hub"])
