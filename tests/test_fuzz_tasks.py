"""Seeded mutation fuzzing of the fine-tuning data files and of a fine-tuned
folder's task.json (the model files themselves: test_fuzz.py).

Each task reader gets damaged copies of a good file: bytes flipped, cut off,
inserted or appended, lines dropped, repeated or split at a tab. Every case
must end in a MiniBertError on one line naming the file, or in examples the
task can use: for SQuAD also the check of each answer's offset
(check_answer_alignment) must end one of those two ways. task.json gets wrong
values in each field (test_fuzz.JSON_VALUES); loading the folder must then
give a model, or one line naming the folder.
"""

import json
import random
from collections import Counter

import pytest

from minibert.commands import finetune as finetune_command
from minibert.support import MiniBertError
from minibert.tasks import make_task
from test_fuzz import JSON_VALUES, append, flip, insert, truncate, with_json_value
from test_task_files import CONLL, MRPC_HEADER, SST2_TSV, SST_TREES, mnli_row, snli_line, squad_v1, squad_v2

CASES = 120  # per file

GOOD_FILES = {
    "sst2-tsv": ("sst2", SST2_TSV),
    "sst2-trees": ("sst2", SST_TREES),
    "snli": ("snli", snli_line("p1", "A man sleeps.", "A person rests.") + snli_line("p2", "A cat.", "A dog.",
                                                                                     "contradiction")),
    "mrpc": ("mrpc", MRPC_HEADER + "1\t1\t2\tA man sleeps .\tA person rests .\n0\t3\t4\tA cat .\tA dog .\n"),
    "mnli": ("mnli", "\t".join(["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                                "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
                                "sentence2", "label1", "gold_label"]) + "\n"
             + mnli_row(0, "1e", "A man sleeps.", "A person rests.", "entailment", "entailment")),
    "qqp": ("qqp", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t1\t2\tHow?\tWhy?\t0\n"),
    "conll2003": ("conll2003", CONLL),
    "squad-v1": ("squad", json.dumps(squad_v1())),
    "squad-v2": ("squad", json.dumps(squad_v2())),
}


def line_edit(data, rng):
    """Drop, repeat or split one line (at a tab or a space)."""
    lines = data.split(b"\n")
    at = rng.randrange(len(lines))
    edit = rng.choice(["drop", "repeat", "split"])
    if edit == "drop":
        del lines[at]
    elif edit == "repeat":
        lines.insert(at, lines[at])
    else:
        lines[at] = lines[at].replace(b"\t", b"\n", 1).replace(b" ", b"\n", 1)
    return b"\n".join(lines)


MUTATIONS = {"flip": flip, "truncate": truncate, "insert": insert, "append": append, "line": line_edit}


def read_and_check(task_name, path):
    """What finetune.py does with a data file before the model: read it, tell
    whether it is labelled, and check the examples (SQuAD: the answers' offsets)."""
    task = make_task(task_name)
    examples = task.read(path)
    task.has_gold(examples)
    task.check_examples(path, examples, training=True)
    return examples


@pytest.mark.parametrize("name", sorted(GOOD_FILES))
def test_fuzz_task_files(tmp_path, name):
    task_name, text = GOOD_FILES[name]
    original = text.encode("utf-8")
    path = tmp_path / "data.txt"
    path.write_bytes(original)
    assert read_and_check(task_name, path)                 # the good file reads
    rng = random.Random(name)
    tally = Counter()
    for case in range(CASES):
        kind = rng.choice(sorted(MUTATIONS))
        path.write_bytes(MUTATIONS[kind](original, rng))
        try:
            examples = read_and_check(task_name, path)
        except MiniBertError as e:
            assert str(path) in str(e) and "\n" not in str(e), f"{name} case {case} ({kind}): {e!r}"
            tally["error"] += 1
            continue
        except Exception as e:                             # anything else is a bug in a reader
            raise AssertionError(f"{name} case {case} ({kind}): {type(e).__name__}: {str(e)[:300]}") from e
        assert examples, f"{name} case {case} ({kind}): no examples and no error"
        tally["read"] += 1
    assert tally["error"] > 0


@pytest.fixture(scope="module")
def tuned_folder(tmp_path_factory):
    """A tiny fine-tuned sst2 folder, as finetune.py writes one."""
    from distill_helpers import make_distillation_data
    return make_distillation_data(tmp_path_factory.mktemp("fuzz_tasks")) / "teacher"


@pytest.mark.parametrize("field", ["task", "labels", "max_seq_len"])
def test_fuzz_task_json(tmp_path, tuned_folder, field):
    import shutil
    folder = shutil.copytree(tuned_folder, tmp_path / "copy")
    record = json.loads((folder / "task.json").read_text())
    outcomes = Counter()
    for raw in JSON_VALUES[:-2] + ['["0", 1]', '[["0"], ["1"]]', '"01"']:   # not the 100,000-deep list here
        (folder / "task.json").write_text(with_json_value(record, [field], raw))
        try:
            finetune_command.load_task_model(folder, make_task)
        except MiniBertError as e:
            assert str(folder) in str(e) and "\n" not in str(e), f"{field}={raw[:20]}: {e!r}"
            outcomes["error"] += 1
        except Exception as e:
            raise AssertionError(f"{field}={raw[:20]}: {type(e).__name__}: {str(e)[:300]}") from e
        else:
            outcomes["loaded"] += 1
    assert outcomes["error"] > 0
