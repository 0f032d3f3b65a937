"""The fine-tuning datasets' files: one reader per file format, the writers
of each task's predictions, and the held-out split.

BERT is fine-tuned on four kinds of task (Devlin et al., section 4), and each
dataset comes in its own format. Every reader returns plain dataclasses, so
the task objects (minibert/tasks/) never need to know where a file came from:

    read_sst2    SST-2: a GLUE TSV (sentence, label), or the Stanford
                 Sentiment Treebank's PTB trees         -> ClassificationExample
    read_snli    SNLI: the official JSON-lines release  -> ClassificationExample
    read_mrpc    MRPC: the GLUE TSV or the original msr_paraphrase_*.txt
    read_mnli    MNLI: a GLUE TSV (sentence1, sentence2, gold_label)
    read_qqp     QQP: a GLUE TSV (id, question1, question2, is_duplicate)
    read_conll   CoNLL-2003 NER columns                 -> NerFile
    read_squad   SQuAD v1.1 and v2.0 JSON               -> SquadQuestion
    read_task_file(task, path)  any of the above, by task name

and the writers of each task's predictions: write_classification_predictions
(jsonl, or GLUE's submission TSV), write_conll_predictions (the input file
plus a column), write_squad_predictions (the official {id: answer} JSON and
its null odds).

Labels are kept exactly as the data writes them ("0"/"1", "entailment", ...);
tasks.py's CLASSIFICATION_LABELS lists each task's labels. A file without a
label column (a file to predict on, like GLUE's test TSVs) gives label None.

Bad input raises `MiniBertError` with one line naming the file, the line
(1-based) and the problem: a missing column, an unknown label, an empty
file, bad JSON, or a file of another task (detected from its first line, so
an SNLI file given to `read_sst2` says so instead of failing somewhere odd).
SQuAD files hold all their JSON on one line, so a SQuAD structure error names
the place inside the JSON instead (e.g. `data[3].paragraphs[0].qas[7]`).

Only dev files exist for SNLI and SQuAD in ../shared/data: `split_examples`
makes a fixed, grouped train/held-out split of one file
(`split_for_evaluation` picks each task's groups).
"""

import collections
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write, read_json_object, write_json
from minibert.support.task_registry import CLASSIFICATION_LABELS, NER, SQUAD


# SNLI (and MNLI) write "-" as the gold label when the annotators did not
# agree; such pairs are dropped, as in every published result.
NO_CONSENSUS = "-"


@dataclass
class ClassificationExample:
    """One sentence (text_b None) or sentence pair, from line `line` of its file."""
    text_a: str
    text_b: Optional[str]
    label: Optional[str]   # None in a file without labels
    id: Optional[str]      # the file's own id for the example, where it has one
    line: int


@dataclass
class NerSentence:
    """One CoNLL sentence: its words, their tags (None in a file without a
    tag column) and the 1-based line number of each word."""
    words: list
    tags: Optional[list]
    line_numbers: list


@dataclass
class NerFile:
    """A CoNLL file's lines as read (without line endings) and its sentences.
    The lines are kept so that predictions can be written back as the input
    file plus one column (`write_conll_predictions`)."""
    lines: list
    sentences: list


class NerExamples(list):
    """The sentences (NerSentence) of one CoNLL file, in file order, as the
    NER task reads them.

    A list, so that len() and iteration work as for every other task
    (fine_tune counts its training examples), plus `ner_file`, the NerFile
    they came from: its lines are what `write_conll_predictions` writes back."""

    def __init__(self, ner_file):
        super().__init__(ner_file.sentences)
        self.ner_file = ner_file


@dataclass
class SquadQuestion:
    """One SQuAD question with its paragraph. `answers` is a list of
    (text, start character in context) pairs: several per dev question, none
    for an unanswerable (v2.0) question."""
    id: str
    question: str
    context: str
    answers: list
    is_impossible: bool
    article: int           # index of the article in the file's "data" list
    title: str


# ----------------------------------------------------------------------------
# Lines, errors and format detection
# ----------------------------------------------------------------------------


def _error(path, line, problem):
    return MiniBertError(f"{path}: line {line}: {problem}")


def _numbered_lines(path):
    """(1-based line number, line without its line ending) for each line.

    The file is read as bytes and split at b"\\n" only, so a stray "\\r" or
    a Unicode line separator inside a sentence never splits an example, and
    a decoding error names its exact line. The UTF-8 byte order mark that
    starts the GLUE MRPC files is dropped.
    """
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise _error(path, number, "not UTF-8 text") from None
                if number == 1:
                    line = line.removeprefix("\ufeff")
                yield number, line.rstrip("\r\n")
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read ({e.strerror or e})") from None


def _first_nonblank_line(path):
    """(number, text) of the file's first line that is not blank."""
    for number, line in _numbered_lines(path):
        if line.strip():
            return number, line
    raise _error(path, 1, "the file is empty")


def _glue_tsv_format(columns):
    """Which GLUE-style TSV a header line names, by its column names."""
    names = set(columns)
    if "sentence" in names and names <= {"index", "sentence", "label"}:
        return "sst2-tsv"
    if {"#1 String", "#2 String"} <= names:
        return "mrpc-tsv"
    if {"question1", "question2"} <= names:
        return "qqp-tsv"
    if {"sentence1", "sentence2"} <= names:
        return "mnli-tsv"
    return "tsv"


def _format_of_line(line):
    """The format a file's first non-blank line announces (see FORMATS)."""
    text = line.strip()
    if re.match(r'\{\s*("|}|$)', text):  # '{"key": ...', or a lone "{" opening a pretty-printed file
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            return "json"  # e.g. a pretty-printed file, whose first line is "{"
        if isinstance(record, dict) and "sentence1" in record:
            return "snli-jsonl"
        return "squad-json" if isinstance(record, dict) and "data" in record else "json"
    if "\t" in line:
        return _glue_tsv_format([column.strip() for column in line.split("\t")])
    if re.match(r"\(\d", text):  # "(3 (2 It) ..."; a CoNLL line may start with a "(" word
        return "sst-trees"
    if text.split()[0] == "-DOCSTART-":
        return "conll"
    return "columns"


def detect_format(path):
    """The name of `path`'s format, one of FORMATS, from its first line."""
    return _format_of_line(_first_nonblank_line(path)[1])


FORMATS = {
    "sst2-tsv": "an SST-2 GLUE TSV (columns sentence, label)",
    "sst-trees": "a Sentiment Treebank file of PTB trees",
    "snli-jsonl": "an SNLI JSON-lines file",
    "mrpc-tsv": "an MRPC TSV (columns Quality, #1 ID, #2 ID, #1 String, #2 String)",
    "mnli-tsv": "an MNLI GLUE TSV (columns sentence1, sentence2, gold_label)",
    "qqp-tsv": "a QQP GLUE TSV (columns id, question1, question2, is_duplicate)",
    "conll": "a CoNLL-2003 file (word POS chunk NER columns)",
    "squad-json": "a SQuAD JSON file",
    "json": "a JSON file",
    "tsv": "a TSV file",
    "columns": "a text file of space-separated columns",
}

# The formats each task's reader accepts. A CoNLL file need not start with
# -DOCSTART-, and some CoNLL files separate their columns with tabs.
TASK_FORMATS = {
    "sst2": ("sst2-tsv", "sst-trees"),
    "snli": ("snli-jsonl",),
    "mrpc": ("mrpc-tsv",),
    "mnli": ("mnli-tsv",),
    "qqp": ("qqp-tsv",),
    "conll2003": ("conll", "columns", "tsv"),
    "squad": ("squad-json", "json"),
}


def _check_format(path, task):
    """The file's format; refused, naming both, if it is another task's."""
    number, line = _first_nonblank_line(path)
    found = _format_of_line(line)
    if found not in TASK_FORMATS[task]:
        described = FORMATS[found]
        if found == "tsv":
            described += " with columns " + ", ".join(column.strip() for column in line.split("\t"))
        expected = " or ".join(FORMATS[name] for name in TASK_FORMATS[task] if name not in ("json", "tsv", "columns"))
        raise _error(path, number, f"this looks like {described}, not {expected} as the {task} task needs")
    return found


# ----------------------------------------------------------------------------
# Classification: GLUE TSVs, SST trees, SNLI JSON lines
# ----------------------------------------------------------------------------


def _check_label(path, number, task, label):
    if label not in CLASSIFICATION_LABELS[task]:
        expected = ", ".join(CLASSIFICATION_LABELS[task])
        raise _error(path, number, f"unknown {task} label {label!r} (expected one of {expected})")


def _nonempty(path, examples, why):
    if not examples:
        raise MiniBertError(f"{path}: no examples ({why})")
    return examples


def _tsv_rows(path):
    """The header's column names, and (line number, {column: field}) per row.

    GLUE files are plain tab-separated text with no quoting (a `"` is just a
    character, as in BERT's own reader). Blank lines hold no example and are
    skipped; a row with more or fewer fields than the header is an error.
    """
    lines = _numbered_lines(path)
    header_number, header = next((n, line) for n, line in lines if line.strip())
    columns = [column.strip() for column in header.split("\t")]

    def rows():
        for number, line in lines:
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != len(columns):
                raise _error(path, number, f"{len(fields)} tab-separated fields, but the header "
                                           f"(line {header_number}) names {len(columns)}: {', '.join(columns)}")
            yield number, dict(zip(columns, fields))

    return columns, rows()


def _read_glue_tsv(path, task, text_columns, label_column, id_choices):
    """Examples of a GLUE-style TSV, its columns found by the header's names.

    `id_choices` lists column tuples; the first whose columns the file has
    gives each example's id (their fields joined by "-"). Without
    `label_column` in the header, every label is None.
    """
    _check_format(path, task)
    columns, rows = _tsv_rows(path)
    has_label = label_column in columns
    id_columns = next((ids for ids in id_choices if all(name in columns for name in ids)), ())
    examples = []
    for number, row in rows:
        label = row[label_column].strip() if has_label else None
        if label == NO_CONSENSUS and task in ("snli", "mnli"):
            continue
        if has_label:
            _check_label(path, number, task, label)
        texts = [row[name].strip() for name in text_columns]
        example_id = "-".join(row[name].strip() for name in id_columns) or None
        examples.append(ClassificationExample(texts[0], texts[1] if len(texts) > 1 else None,
                                              label, example_id, number))
    return _nonempty(path, examples, "no rows after the header, or only pairs labelled '-'")


SENTIMENT_LABELS = {"0", "1", "2", "3", "4"}  # very negative ... very positive

# The treebank escapes brackets and slashes as the Penn Treebank does; GLUE's
# SST-2 (made from the same sentences) writes them plainly: "( something )",
# "mystery/thriller".
PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}

_TREE_TOKENS = re.compile(r"\(|\)|[^\s()]+")


def _unescape_ptb(word):
    """A treebank leaf as GLUE writes it: -LRB- -> "(", writer\\/director -> writer/director."""
    return PTB_ESCAPES.get(word, word).replace("\\/", "/").replace("\\*", "*")


def _parse_sentiment_tree(path, number, line):
    """(root label, leaf words) of one treebank line, e.g. `(3 (2 It) (4 (4 's) ...))`.

    Every "(" is followed by its node's 0-4 label, and every other word is a
    leaf, so reading the tokens left to right gives the sentence in order
    without building the tree. The depth count checks the brackets balance.
    """
    tokens = _TREE_TOKENS.findall(line)
    if not tokens or tokens[0] != "(":
        raise _error(path, number, "a tree must start with '('")
    depth, root_label, leaves, expect_label = 0, None, [], False
    for position, token in enumerate(tokens):
        if depth == 0 and position > 0:
            raise _error(path, number, "text after the tree's closing ')'")
        if token == "(":
            if expect_label:                # "((": the outer node has no label (it would take its child's)
                raise _error(path, number, "a node without its 0-4 label (a '(' right after a '(')")
            depth, expect_label = depth + 1, True
        elif token == ")":
            depth -= 1
        elif expect_label:
            if token not in SENTIMENT_LABELS:
                raise _error(path, number, f"node label {token!r} is not a sentiment 0-4")
            root_label = token if root_label is None else root_label
            expect_label = False
        else:
            leaves.append(_unescape_ptb(token))
    if depth != 0 or not leaves:
        raise _error(path, number, "an incomplete tree (unbalanced brackets or no words)")
    return root_label, leaves


def _read_sst_trees(path):
    """SST-2 from the treebank: root 0-1 -> "0", 3-4 -> "1", neutral 2 dropped
    (the GLUE SST-2 construction); the sentence is the leaves joined by spaces."""
    examples = []
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        root_label, leaves = _parse_sentiment_tree(path, number, line)
        if root_label != "2":
            label = "0" if root_label in ("0", "1") else "1"
            examples.append(ClassificationExample(" ".join(leaves), None, label, None, number))
    return _nonempty(path, examples, "every tree is neutral")


def read_sst2(path):
    """SST-2 sentences from a GLUE TSV (`sentence<TAB>label`, header line;
    `index<TAB>sentence` for an unlabelled test file) or from the treebank's
    PTB tree files; the format is told from the first line."""
    if _check_format(path, "sst2") == "sst-trees":
        return _read_sst_trees(path)
    return _read_glue_tsv(path, "sst2", ["sentence"], "label", [("index",)])


def _json_record(path, number, line):
    """The JSON object on one line of a JSON-lines file."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise _error(path, number, f"bad JSON ({e.msg}, column {e.colno})") from None
    except (ValueError, RecursionError):
        raise _error(path, number, "bad JSON (too deeply nested or an oversized number)") from None
    if not isinstance(record, dict):
        raise _error(path, number, "expected a JSON object")
    return record


def read_snli(path):
    """SNLI premise/hypothesis pairs from the official .jsonl release.

    Pairs with gold_label "-" (no annotator consensus) are dropped; the id is
    pairID. A file without gold_label fields gives label None; one that has
    them on some lines only is an error.
    """
    _check_format(path, "snli")
    examples, labelled = [], None
    for number, line in _numbered_lines(path):
        if not line.strip():
            continue
        record = _json_record(path, number, line)
        texts = [record.get(key) for key in ("sentence1", "sentence2")]
        if not all(isinstance(text, str) for text in texts):
            raise _error(path, number, "sentence1 and sentence2 must both be strings")
        if labelled is None:
            labelled = "gold_label" in record
        if labelled != ("gold_label" in record):
            raise _error(path, number, "gold_label is on some lines and not on others")
        label = record.get("gold_label")
        if label == NO_CONSENSUS:
            continue
        if labelled:
            _check_label(path, number, "snli", label)
        pair_id = record.get("pairID")
        examples.append(ClassificationExample(texts[0].strip(), texts[1].strip(), label,
                                              None if pair_id is None else str(pair_id), number))
    return _nonempty(path, examples, "every pair has gold label '-'")


def read_mrpc(path):
    """MRPC sentence pairs. GLUE's train/dev TSVs and the original
    msr_paraphrase_*.txt share the header `Quality<TAB>#1 ID<TAB>#2 ID<TAB>#1
    String<TAB>#2 String` (GLUE's test.tsv has `index` for Quality). The id is
    "#1 ID-#2 ID", e.g. "1355540-1355592"."""
    return _read_glue_tsv(path, "mrpc", ["#1 String", "#2 String"], "Quality", [("#1 ID", "#2 ID"), ("index",)])


def read_mnli(path):
    """MNLI pairs from a GLUE TSV (columns sentence1, sentence2, gold_label;
    the test files have no gold_label); id = pairID. Pairs labelled "-" are
    dropped, as for SNLI."""
    return _read_glue_tsv(path, "mnli", ["sentence1", "sentence2"], "gold_label", [("pairID",), ("index",)])


def read_qqp(path):
    """QQP question pairs from a GLUE TSV (columns id, qid1, qid2, question1,
    question2, is_duplicate; the test file has id, question1, question2)."""
    return _read_glue_tsv(path, "qqp", ["question1", "question2"], "is_duplicate", [("id",)])


def write_classification_predictions(examples, predictions, path):
    """Write one (label, class probabilities) per example; returns the paths
    written. A path ending in `.tsv` gets GLUE's submission format: the
    header `index<TAB>prediction`, then each example's position in the file
    (0 first, as a GLUE test file's own index column counts) and its label.
    Anything else gets jsonl: one object per example, in file order, with its
    id, label and class probabilities."""
    if str(path).endswith(".tsv"):
        with atomic_write(path, mode="w") as f:
            f.write("index\tprediction\n")
            for index, (label, _) in enumerate(predictions):
                f.write(f"{index}\t{label}\n")
        return [path]
    with atomic_write(path, mode="w") as f:
        for example, (label, probs) in zip(examples, predictions):
            record = {"id": example.id} if example.id is not None else {}
            record.update(label=label, probs=[round(float(p), 6) for p in probs])
            f.write(json.dumps(record) + "\n")
    return [path]


# ----------------------------------------------------------------------------
# Token classification: CoNLL-2003 NER
# ----------------------------------------------------------------------------

DOCSTART = "-DOCSTART-"

# conlleval's tags: O, or B/I/E/S, a hyphen and the entity type.
_NER_TAG = re.compile(r"O|[BIES]-\S+")


def has_tag_column(columns):
    """Whether a CoNLL file with this many columns per token carries NER tags.

    4 (`word POS chunk NER`, CoNLL-2003) and 2 (`word NER`): yes, the last
    column. 1 (words only) and 3 (`word POS chunk`, a file to predict on): no.
    More than 4 (e.g. a predictions file, `... gold predicted`): the last.
    """
    return columns not in (1, 3)


def _is_docstart(fields):
    return bool(fields) and fields[0] == DOCSTART


def read_conll(path):
    """Sentences of a CoNLL-2003 file: one token per line, whitespace-separated
    columns with the word first, blank lines between sentences, `-DOCSTART-`
    lines between documents (neither is a token).

    Every token line must have the same number of columns; whether the last
    is the NER tag follows from that number (`has_tag_column`). Tags must be
    O or B-/I-/E-/S- plus a type, and are kept as written (CoNLL-2003 is IOB1;
    minibert.metrics.iob1_to_iob2 converts).
    """
    _check_format(path, "conll2003")
    lines, sentences = [], []
    words, tags, numbers = [], [], []
    columns = first_token_line = None
    for number, line in _numbered_lines(path):
        if "\r" in line:                   # old Mac line endings: the whole file would be one line
            raise _error(path, number, "a carriage return (\\r) inside a line: convert the file's line endings "
                                       "to \\n")
        lines.append(line)
        fields = line.split()
        if not fields or _is_docstart(fields):
            if words:
                sentences.append(NerSentence(words, tags if has_tag_column(columns) else None, numbers))
                words, tags, numbers = [], [], []
            continue
        if columns is None:
            columns, first_token_line = len(fields), number
        elif len(fields) != columns:
            raise _error(path, number, f"{len(fields)} columns, but line {first_token_line} has {columns}")
        if has_tag_column(columns) and not _NER_TAG.fullmatch(fields[-1]):
            raise _error(path, number, f"unknown NER tag {fields[-1]!r} (expected O or B-/I-/E-/S-TYPE)")
        words.append(fields[0])
        tags.append(fields[-1])
        numbers.append(number)
    if words:
        sentences.append(NerSentence(words, tags if has_tag_column(columns) else None, numbers))
    if not sentences:
        raise MiniBertError(f"{path}: no sentences (only blank and -DOCSTART- lines)")
    return NerFile(lines, sentences)


def ner_file_of(examples):
    """The NerFile that `examples` (as NerTask.read returns them) came from."""
    if not isinstance(examples, NerExamples):
        raise MiniBertError("conll2003: write_predictions needs the examples NerTask.read returned "
                            "(they keep the file's lines)")
    return examples.ner_file


def write_conll_predictions(ner_file, predicted_tags_per_sentence, path):
    """Write `ner_file` back with a predicted tag appended to every token line.

    Blank lines stay as they are. `-DOCSTART-` lines get "O" appended too:
    conlleval requires every non-blank line to have the same number of
    columns. The separator is the file's own (a tab if it used tabs). With a
    gold column, the result is what conlleval scores: gold second to last,
    prediction last. Written atomically: a crash leaves no half file.
    """
    sentences = ner_file.sentences
    if len(predicted_tags_per_sentence) != len(sentences):
        raise MiniBertError(f"{path}: {len(predicted_tags_per_sentence)} predicted sentences "
                            f"for {len(sentences)} sentences in the input")
    tag_of_line = {}
    for index, (sentence, tags) in enumerate(zip(sentences, predicted_tags_per_sentence)):
        if len(tags) != len(sentence.words):
            raise MiniBertError(f"{path}: sentence {index} (line {sentence.line_numbers[0]}) has "
                                f"{len(sentence.words)} words but {len(tags)} predicted tags")
        for number, tag in zip(sentence.line_numbers, tags):
            if not isinstance(tag, str) or not _NER_TAG.fullmatch(tag):
                raise MiniBertError(f"{path}: predicted tag {tag!r} for line {number} is not a NER tag")
            tag_of_line[number] = tag
    first_token_line = ner_file.lines[sentences[0].line_numbers[0] - 1]
    separator = "\t" if "\t" in first_token_line else " "
    with atomic_write(path, mode="w") as f:
        for number, line in enumerate(ner_file.lines, start=1):
            if number in tag_of_line:
                line = line.rstrip() + separator + tag_of_line[number]
            elif _is_docstart(line.split()):
                line = line.rstrip() + separator + "O"
            f.write(line + "\n")


# ----------------------------------------------------------------------------
# Extractive question answering: SQuAD v1.1 and v2.0
# ----------------------------------------------------------------------------

_JSON_KINDS = {list: "a list", str: "a string", int: "an integer"}


def _json_field(path, parent, key, kind, where):
    """parent[key], checked to be of `kind`; `where` is parent's place in the JSON."""
    if not isinstance(parent, dict):
        raise MiniBertError(f"{path}: {where}: expected a JSON object")
    value = parent.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MiniBertError(f"{path}: {where}: '{key}' is missing or not {_JSON_KINDS[kind]}")
    return value


def _squad_question(path, qa, context, article, title, where):
    """One entry of a paragraph's "qas" list, checked."""
    question = _json_field(path, qa, "question", str, where)
    question_id = _json_field(path, qa, "id", str, where)
    is_impossible = qa.get("is_impossible", False)
    if not isinstance(is_impossible, bool):
        raise MiniBertError(f"{path}: {where}: 'is_impossible' must be true or false")
    answers = []
    for k, answer in enumerate(_json_field(path, qa, "answers", list, where)):
        text = _json_field(path, answer, "text", str, f"{where}.answers[{k}]")
        start = _json_field(path, answer, "answer_start", int, f"{where}.answers[{k}]")
        answers.append((text, start))
    if is_impossible and answers:
        raise MiniBertError(f"{path}: {where}: an unanswerable question (is_impossible) with answers")
    return SquadQuestion(question_id, question, context, answers, is_impossible, article, title)


def _squad_version(path, dataset, flags_impossible):
    """"1.1" or "2.0": the file's "version" field ("1.1", "v2.0"), or without
    one, "2.0" exactly when the questions carry is_impossible flags."""
    if "version" not in dataset:
        return "2.0" if flags_impossible else "1.1"
    version = str(dataset["version"]).removeprefix("v")
    if version not in ("1.1", "2.0"):
        raise MiniBertError(f"{path}: unknown SQuAD version {dataset['version']!r} (expected 1.1 or v2.0)")
    return version


def read_squad(path):
    """(questions, version, data) of a SQuAD v1.1 or v2.0 JSON file.

    `version` is "1.1" or "2.0"; `data` is the file's "data" list, which the
    official metric (`minibert.metrics.squad_v1_metrics` / `squad_v2_metrics`)
    scores against. v2.0's "plausible_answers" of unanswerable questions are
    not kept. Answers whose answer_start does not point at their text are kept
    as they are; `misaligned_answers` lists them (none in the official files).
    """
    _check_format(path, "squad")
    dataset = read_json_object(path)
    data = dataset.get("data")
    if not isinstance(data, list):
        raise MiniBertError(f"{path}: no 'data' list of articles (is this a SQuAD file?)")
    questions, flags_impossible = [], False
    for a, article in enumerate(data):
        paragraphs = _json_field(path, article, "paragraphs", list, f"data[{a}]")
        title = str(article.get("title", ""))
        for p, paragraph in enumerate(paragraphs):
            where = f"data[{a}].paragraphs[{p}]"
            context = _json_field(path, paragraph, "context", str, where)
            for q, qa in enumerate(_json_field(path, paragraph, "qas", list, where)):
                questions.append(_squad_question(path, qa, context, a, title, f"{where}.qas[{q}]"))
                flags_impossible = flags_impossible or "is_impossible" in qa
    version = _squad_version(path, dataset, flags_impossible)
    if version == "1.1" and any(question.is_impossible for question in questions):
        raise MiniBertError(f"{path}: a version 1.1 file with unanswerable (is_impossible) questions")
    return _nonempty(path, questions, "no questions in 'data'"), version, data


def misaligned_answers(questions):
    """(question id, answer text) of each answer whose answer_start does not
    index its text in the context. Measured on ../shared/data: none of the
    34,726 answers of SQuAD 1.1 dev, none of the 10,052 of the SQuAD 2.0 half."""
    return [(question.id, text) for question in questions for text, start in question.answers
            if question.context[start:start + len(text)] != text]


def check_answer_alignment(path, questions, refuse_most=False, shown=5):
    """A warning (a string) naming the first `shown` questions whose answer
    text is not at its answer_start in the context, or None when every answer
    is aligned. Such answers would be trained on and scored at the wrong span.
    refuse_most: a file where most answers are misaligned (a training file)
    is refused: its offsets are not character offsets into these contexts."""
    misaligned = misaligned_answers(questions)
    if not misaligned:
        return None
    total = sum(len(question.answers) for question in questions)
    ids = ", ".join(dict.fromkeys(question_id for question_id, _ in misaligned[:shown]))
    if refuse_most and 2 * len(misaligned) > total:
        raise MiniBertError(f"{path}: {len(misaligned):,} of {total:,} answers are not at their answer_start in "
                            f"the context (questions {ids}, ...): the offsets do not index these contexts")
    return (f"{path}: {len(misaligned):,} of {total:,} answers are not at their answer_start in the context "
            f"(questions {ids}{', ...' if len(misaligned) > shown else ''}); they are used as written")


def squad_dataset(questions):
    """The official "data" structure (articles -> paragraphs -> qas) of a list
    of SquadQuestion, in their order: what evaluate-v1.1.py and
    evaluate-v2.0.py read. It holds exactly these questions, so a held-out
    subset of a file is scored on itself alone."""
    articles = {}
    for question in questions:
        article = articles.setdefault(question.article, {"title": question.title, "paragraphs": {}})
        paragraph = article["paragraphs"].setdefault(question.context, {"context": question.context, "qas": []})
        paragraph["qas"].append({"id": question.id, "question": question.question,
                                 "answers": [{"text": text, "answer_start": start} for text, start in question.answers],
                                 "is_impossible": question.is_impossible})
    return [{"title": article["title"], "paragraphs": list(article["paragraphs"].values())}
            for article in articles.values()]


# The null odds file is named after the predictions file (null_odds_file).
NULL_ODDS_SUFFIX = ".null_odds.json"


def null_odds_file(path):
    """Where the null odds of the predictions file `path` go: its name with
    `.null_odds.json` in place of its suffix (pred.json -> pred.null_odds.json)."""
    path = Path(path)
    return path.with_name(path.stem + NULL_ODDS_SUFFIX)


@dataclass
class SquadPredictions:
    """What SquadTask.predict returns.
    answers: {question id: answer text}, "" for "no answer".
    null_odds: {question id: score_diff} for SQuAD 2.0 (None for 1.1): how
    much more the model believes in "no answer" than in its best span.
    span_answers: for SQuAD 2.0, {question id: the best span's text}, the
    answer each question gets at a threshold high enough to answer it. The
    threshold search scores these (what evaluate-v2.0.py expects its
    predictions to be): with answers already blanked at null_threshold, no
    lower threshold could ever find an answer."""
    answers: dict
    null_odds: Optional[dict] = None
    span_answers: Optional[dict] = None

    def __len__(self):
        return len(self.answers)


def write_squad_predictions(questions, predictions, path):
    """The official predictions file {question id: answer} and, for SQuAD
    2.0, {question id: score_diff} (the evaluate-v2.0.py --na-prob-file)
    named after it: pred.json -> pred.null_odds.json, so that two prediction
    runs in one folder keep their own. Returns the paths written."""
    path = Path(path)
    write_json(path, {question.id: predictions.answers[question.id] for question in questions})
    if predictions.null_odds is None:
        return [path]
    null_odds_path = null_odds_file(path)
    write_json(null_odds_path, {question.id: predictions.null_odds[question.id] for question in questions})
    return [path, null_odds_path]


# ----------------------------------------------------------------------------
# Splits, and reading a file by task name
# ----------------------------------------------------------------------------


def split_examples(examples, fraction, seed, group=None):
    """(train, held_out): about `fraction` of `examples` held out, by a fixed seed.

    Whole groups go to one side. `group(example)` names an example's group:
    for SQuAD `lambda q: q.article`, so no article (and so no paragraph) is on
    both sides; for SNLI `lambda e: e.text_a`, so the hypotheses written for
    one premise stay together. Without `group` each example is its own group.

    The distinct groups are shuffled with random.Random(seed) and taken in
    that order into held_out until it holds at least fraction * len(examples)
    examples, so held_out is over the fraction by less than one group. Both
    lists keep the input order. The same examples, fraction and seed always
    give the same split (nothing depends on Python's string hashing).
    """
    if not 0 < fraction < 1:
        raise MiniBertError(f"split fraction must be between 0 and 1, not {fraction}")
    keys = [group(example) if group else index for index, example in enumerate(examples)]
    groups = list(dict.fromkeys(keys))  # distinct keys, in first-seen order
    random.Random(seed).shuffle(groups)
    group_sizes = collections.Counter(keys)
    held_groups, held_count = set(), 0
    for key in groups:
        if held_count >= fraction * len(examples):
            break
        held_groups.add(key)
        held_count += group_sizes[key]
    train = [example for example, key in zip(examples, keys) if key not in held_groups]
    held_out = [example for example, key in zip(examples, keys) if key in held_groups]
    if not train or not held_out:
        raise MiniBertError(f"cannot hold out {fraction} of {len(examples)} examples in {len(groups)} "
                            f"groups: one side would be empty")
    return train, held_out


def split_for_evaluation(task, examples, fraction, seed):
    """(train, held out) of `task`'s examples with a fixed seed, for data sets
    that come with only one labelled file here (SNLI, SQuAD dev). SQuAD keeps
    whole articles on one side, so no paragraph is both trained on and
    evaluated; SNLI keeps the hypotheses of one premise together."""
    if task.name == NER:
        raise MiniBertError("conll2003 has its own dev file (eng.testa): evaluate on it instead of holding out "
                            "part of the training file")
    if task.name == SQUAD:
        return split_examples(examples, fraction, seed, group=lambda question: question.article)
    return split_examples(examples, fraction, seed, group=lambda example: example.text_a)


TASK_READERS = {
    "sst2": read_sst2,
    "snli": read_snli,
    "mrpc": read_mrpc,
    "mnli": read_mnli,
    "qqp": read_qqp,
    "conll2003": read_conll,
    "squad": read_squad,
}


def read_task_file(task, path):
    """Read `path` with `task`'s reader: a list of ClassificationExample, a
    NerFile (conll2003) or (questions, version, data) (squad). A file of
    another task's format is refused with a message naming both."""
    reader = TASK_READERS.get(task)
    if reader is None:
        raise MiniBertError(f"unknown task {task!r} (expected one of {', '.join(TASK_READERS)})")
    return reader(path)
