"""The generic helpers every task's file reader (minibert/tasks/) shares:
numbered lines, the one-line errors that name the file and the line, the
format a file's first line announces, GLUE-style TSV rows, JSON fields, the
plain sentence(-pair) example record, and the held-out split.

Each task reads and writes its own files in its own file (the readers of
SST-2, SNLI, MRPC, MNLI and QQP in tasks/classification.py, CoNLL-2003 in
tasks/ner.py, SQuAD in tasks/squad.py); what they share is here. Bad input
raises `MiniBertError` with one line naming the file, the line (1-based) and
the problem; a file of another task is refused from its first line
(`check_format`), so an SNLI file given to the SST-2 reader says so instead
of failing somewhere odd.

Only dev files exist for SNLI and SQuAD in ../shared/data: `split_examples`
makes a fixed, grouped train/held-out split of one file (each task's
`split` names its groups).
"""

import collections
import json
import random
import re
from dataclasses import dataclass
from typing import Optional

from minibert.support import MiniBertError


@dataclass
class ClassificationExample:
    """One sentence (text_b None) or sentence pair, from line `line` of its file."""
    text_a: str
    text_b: Optional[str]
    label: Optional[str]   # None in a file without labels
    id: Optional[str]      # the file's own id for the example, where it has one
    line: int


# ----------------------------------------------------------------------------
# Lines, errors and format detection
# ----------------------------------------------------------------------------


def line_error(path, line, problem):
    """The one-line error of line `line` (1-based) of `path`."""
    return MiniBertError(f"{path}: line {line}: {problem}")


def numbered_lines(path):
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
                    raise line_error(path, number, "not UTF-8 text") from None
                if number == 1:
                    line = line.removeprefix("\ufeff")
                yield number, line.rstrip("\r\n")
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read ({e.strerror or e})") from None


def _first_nonblank_line(path):
    """(number, text) of the file's first line that is not blank."""
    for number, line in numbered_lines(path):
        if line.strip():
            return number, line
    raise line_error(path, 1, "the file is empty")


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


def check_format(path, task, formats):
    """The file's format, one of `formats` (the names of FORMATS the reader
    of `task` accepts); refused, naming both, if it is another task's."""
    number, line = _first_nonblank_line(path)
    found = _format_of_line(line)
    if found not in formats:
        described = FORMATS[found]
        if found == "tsv":
            described += " with columns " + ", ".join(column.strip() for column in line.split("\t"))
        expected = " or ".join(FORMATS[name] for name in formats if name not in ("json", "tsv", "columns"))
        raise line_error(path, number, f"this looks like {described}, not {expected} as the {task} task needs")
    return found


# ----------------------------------------------------------------------------
# TSV rows, JSON lines and fields
# ----------------------------------------------------------------------------


def nonempty(path, examples, why):
    """`examples`, or a one-line error saying why the file gave none."""
    if not examples:
        raise MiniBertError(f"{path}: no examples ({why})")
    return examples


def tsv_rows(path):
    """The header's column names, and (line number, {column: field}) per row.

    GLUE files are plain tab-separated text with no quoting (a `"` is just a
    character, as in BERT's own reader). Blank lines hold no example and are
    skipped; a row with more or fewer fields than the header is an error.
    """
    lines = numbered_lines(path)
    header_number, header = next((n, line) for n, line in lines if line.strip())
    columns = [column.strip() for column in header.split("\t")]

    def rows():
        for number, line in lines:
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != len(columns):
                raise line_error(path, number, f"{len(fields)} tab-separated fields, but the header "
                                               f"(line {header_number}) names {len(columns)}: {', '.join(columns)}")
            yield number, dict(zip(columns, fields))

    return columns, rows()


def json_record(path, number, line):
    """The JSON object on one line of a JSON-lines file."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise line_error(path, number, f"bad JSON ({e.msg}, column {e.colno})") from None
    except (ValueError, RecursionError):
        raise line_error(path, number, "bad JSON (too deeply nested or an oversized number)") from None
    if not isinstance(record, dict):
        raise line_error(path, number, "expected a JSON object")
    return record


_JSON_KINDS = {list: "a list", str: "a string", int: "an integer"}


def json_field(path, parent, key, kind, where):
    """parent[key], checked to be of `kind`; `where` is parent's place in the JSON."""
    if not isinstance(parent, dict):
        raise MiniBertError(f"{path}: {where}: expected a JSON object")
    value = parent.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MiniBertError(f"{path}: {where}: '{key}' is missing or not {_JSON_KINDS[kind]}")
    return value


# ----------------------------------------------------------------------------
# The held-out split
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

