"""The package's modules sit on five levels, and each imports only its own
level and the ones below it.

    0  support       minibert/support/: checks, file I/O, caches, downloads, command lines
    1  model files   the models and the tokenizer: model.py, deberta.py, lstm.py, heads.py, tokenization.py
    2  checkpoints   minibert/checkpoints/: checkpoint formats and name tables, which build the models;
                     the package facade (minibert/__init__.py), which exports them
    3  lessons       every other minibert/X.py, and minibert/tasks/
    4  commands      minibert/commands/, minibert/walkthrough.py, minibert/coursework/

(The scripts, train_mlm.py and the others, sit above the package.)

Every `import minibert...` / `from minibert... import ...` statement, at the
top of a module or inside a function, is an arrow from that module to the
one it names; so is each name the facade exports on first use. So a
student reads a level with only the levels below it in mind: the model
knows no file format, no tokenizer and no training loop, and a lesson
knows no output folder.
"""

import ast
import io
import re
import tokenize
from pathlib import Path

import minibert

PACKAGE_DIR = Path(minibert.__file__).parent

LEVEL_NAMES = ("support", "model files", "checkpoints", "lessons", "commands")
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
    "minibert.commands": 4,
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
    assert level_of("minibert.support") == 0 and level_of("minibert.support.files") == 0
    assert level_of("minibert.tokenization") == 1 and level_of("minibert.checkpoints.safetensors") == 2
    assert level_of("minibert.pretraining") == LESSONS and level_of("minibert.tasks.squad") == LESSONS
    assert level_of("minibert.commands.distill") == 4 and level_of("minibert.coursework.check") == 4
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
    assert graph["minibert.model"] == {"minibert.support", "minibert.support.checks"}
    assert graph["minibert.deberta"] == {"minibert.support", "minibert.support.checks", "minibert.model"}
    assert graph["minibert.lstm"] == {"minibert.support", "minibert.support.checks"}
    assert graph["minibert.support.checks"] == {"minibert.support"}      # and the checks import no more


def test_tokenization_and_checkpoints_share_hub_and_protobuf_from_below():
    graph = import_graph()
    assert "minibert.checkpoints" not in graph["minibert.tokenization"]
    assert "minibert.support.tokenizer_files" in graph["minibert.tokenization"]
    assert {"minibert.support.hub", "minibert.support.protobuf"} <= graph["minibert.support.tokenizer_files"]
    assert "minibert.support.protobuf" in graph["minibert.checkpoints.tf_bundle"]
    assert not any(name.startswith("minibert.") and name.split(".")[1] != "support"
                   for name in graph["minibert.support.protobuf"] | graph["minibert.support.tokenizer_files"])
    assert not any(name.startswith("minibert.checkpoints") for name in graph["minibert.support.hub"])


def test_a_command_calls_its_lesson():
    # A command sits above its lesson and calls the lesson's own functions: the
    # step a student reads is the step that runs.
    graph = import_graph()
    assert "minibert.pretraining" in graph["minibert.commands.train_mlm"]
    assert "minibert.distillation" in graph["minibert.commands.distill"]


def test_the_commands_are_named_after_their_scripts_and_no_command_shares_a_lesson_name():
    # minibert/commands/finetune.py is finetune.py's code; minibert/finetuning.py is the lesson: one name each.
    commands = {path.stem for path in (PACKAGE_DIR / "commands").glob("*.py")} - {"__init__"}
    scripts = {path.stem for path in PACKAGE_DIR.parent.glob("*.py")}
    assert scripts <= commands and commands - scripts == {"trainer"}, (scripts, commands)
    lessons = {name.split(".")[1] for name in package_modules() if level_of(name) in (1, LESSONS) and
               name.count(".") == 1}
    assert not commands & lessons, commands & lessons


# ----------------------------------------------------------------------------
# The reading path: lessons only, short, and free of command lines
# ----------------------------------------------------------------------------

README = PACKAGE_DIR.parent / "README.md"
READING_PATH_CODE_TARGET = 2800     # code lines: about what Google's BERT files hold for the same scope; docstrings
                                    # and comments are free, so no explanation is ever cut to meet it


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


def code_lines(source):
    """The numbers of the lines that hold code: not blank, not only a comment,
    not part of a docstring (a string standing alone as the first statement of
    a module, class or function)."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    lines = set()
    skipped = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skipped:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - docstrings


def test_code_lines_leave_out_blanks_comments_and_docstrings():
    source = '''"""Module docstring,
two lines."""

import os   # a comment after code counts as code


def f(x):
    """A docstring."""
    # a comment alone
    text = """a string that is
    not a docstring"""
    return x + 1
'''
    assert sorted(code_lines(source)) == [4, 7, 10, 11, 12]


def reading_path_source(path):
    """The part of `path` a reader of the path reads: a task file's lines
    above its closing section "# The files: ...", which holds its datasets'
    readers and writers and the checks of its settings (what support holds
    for a lesson, kept in the task's one file so a task stays one file)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    if path.parent.name == "tasks":
        heading = next((i for i, line in enumerate(lines) if line.startswith("# The files")), len(lines) + 1)
        lines = lines[:heading - 1]                 # up to the "# ----" rule above the heading
    return "".join(lines)


def test_the_reading_path_names_lessons_only_and_stays_within_its_target():
    files = reading_path_files()
    assert len(files) >= 15 and all(path.is_file() for path in files), files
    for path in files:
        level = level_of(module_name(path))
        assert level in (LEVEL_NAMES.index("model files"), LESSONS), f"{path.name}: level {level}, not a lesson"
    ner = PACKAGE_DIR / "tasks" / "ner.py"
    assert len(reading_path_source(ner)) < len(ner.read_text(encoding="utf-8"))   # the CoNLL reader is below the heading
    code = {path.name: len(code_lines(reading_path_source(path))) for path in files}
    assert sum(code.values()) <= READING_PATH_CODE_TARGET, (
        f"the reading path holds {sum(code.values())} code lines, the target {READING_PATH_CODE_TARGET}: {code}")


# Every algorithm the README's seven reading-path steps name -> the functions and
# classes that write it out. Each must be defined in a file the path names, so a
# student reads the algorithm there and never needs support/ to understand it.
READING_PATH_ALGORITHMS = {
    # 1. the encoder (BERT; ALBERT's factorised embeddings and shared layers)
    "embeddings": ["Embeddings"], "attention": ["attention", "SelfAttention"], "feed-forward block": ["FeedForward"],
    "LayerNorm": ["layer_norm", "LayerNorm"], "the layer": ["TransformerLayer"], "the heads": ["MaskedLMHead", "Pooler"],
    "ALBERT's depth plan": ["depth_plan"], "the model's config": ["BertConfig"],
    # 2. tokenization (BERT, ALBERT, DeBERTa)
    "the basic tokenizer": ["basic_tokenize", "clean_text", "tokenize_chinese_chars", "split_on_punctuation"],
    "WordPiece": ["wordpiece", "written_out_tokenize"], "BERT's truncation": ["truncate_seq_pair"],
    "the fast path": ["Tokenizer"], "ALBERT's preprocess_text": ["preprocess_text"],
    "ALBERT's digit-comma rule": ["albert_piece_score"], "DeBERTa's split_by_punct": ["run_split_on_punc"],
    "SentencePiece's word starts": ["sentencepiece_words"],
    # 3. pretraining
    "sentence splitting (NSP/SOP segments)": ["split_sentences"], "packing": ["pack_blocks"],
    "masking 80/10/10": ["mask_tokens", "corrupt_chosen"], "NSP and SOP": ["PretrainingBatches"],
    "the sparse MLM loss": ["masked_lm_loss"], "the training step": ["training_step"],
    "AdamW": ["AdamW", "adamw_update"], "warm-up and linear decay": ["warmup_then_linear_decay"],
    # 4. Kao et al.
    "probing every layer": ["probe_model", "hidden_states"], "duplicating layers": ["duplicate_order", "deepen"],
    "tied duplicates": ["tied_layers"],
    # 5. fine-tuning
    "one output layer per task type": ["OutputLayer", "SpanHead", "TaskModel"],
    "the tasks": ["ClassificationTask", "NerTask", "SquadTask"],
    "the official metrics": ["squad_v1_metrics", "squad_v2_metrics", "conlleval", "binary_f1"],
    # 6. DeBERTa
    "disentangled attention": ["disentangled_attention", "DisentangledSelfAttention"],
    "relative positions and log buckets": ["relative_index", "log_bucket"],
    "the enhanced mask decoder": ["enhanced_mask_decoder"], "SiFT": ["ascent_step", "SiftObjective", "normalise"],
    # 7. distillation (Tang et al.)
    "the LSTM": ["lstm_cell", "LSTM"], "the BiLSTM student": ["BiLSTMClassifier"], "its config": ["StudentConfig"],
    "sentence pairs: the siamese student": ["is_pair_task"], "the transfer set": ["transfer_set", "augment_words"],
    "the loss": ["distillation_loss"], "Tang's settings and per-task defaults": ["DistillationSettings"],
    "Tang's optimizer (Adadelta, constant rate)": ["optimizer_factory"],
}


def defined_names(path):
    return {node.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def test_every_algorithm_the_reading_path_names_is_defined_on_it():
    on_the_path = set().union(*(defined_names(path) for path in reading_path_files()))
    missing = {algorithm: [name for name in names if name not in on_the_path]
               for algorithm, names in READING_PATH_ALGORITHMS.items()}
    missing = {algorithm: names for algorithm, names in missing.items() if names}
    assert not missing, f"defined off the reading path (or nowhere): {missing}"
    in_support = set().union(*(defined_names(path) for name, path in package_modules().items()
                               if level_of(name) == LEVEL_NAMES.index("support")))
    copied = sorted(in_support & {name for names in READING_PATH_ALGORITHMS.values() for name in names})
    assert not copied, f"support defines reading-path algorithms too (one home each): {copied}"


def test_no_lesson_names_a_command_line_flag():
    # A lesson's errors name its parameters (ParameterError); the error line a script prints shows the
    # flag instead, from the one table support/cli.FLAGS.
    flag = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
    for name, path in package_modules().items():
        if level_of(name) not in (LEVEL_NAMES.index("model files"), LESSONS):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not flag.search(node.value), f"{path.name}:{node.lineno} names a flag: {node.value!r}"
