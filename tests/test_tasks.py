"""minibert/tasks/__init__.py: the one table of the tasks, and a new task
defined in one file and registered by one line, fine-tuned, evaluated and
predicted with through finetune.py on a tiny model, in seconds."""

import importlib.util
import json
import random

import pytest

from helpers import run_script_in_process
from minibert.support import MiniBertError
from minibert.tasks import CLASSIFICATION, TASKS, Task, make_task, register, task_class
from minibert.tasks.classification import CLASSIFICATION_LABELS, WITH_F1
from tiny_models import FILLER, NEGATIVE, POSITIVE, write_toy_sst2


def test_the_table_names_each_task_once_and_makes_each_by_its_name():
    assert list(TASKS) == ["sst2", "snli", "mnli", "mrpc", "qqp", "conll2003", "squad"]
    assert CLASSIFICATION == ("sst2", "snli", "mnli", "mrpc", "qqp") == tuple(CLASSIFICATION_LABELS)
    for name in TASKS:
        task = make_task(name)
        assert task.name == name and isinstance(task, Task)
    for name, labels in CLASSIFICATION_LABELS.items():
        assert len(set(labels)) == len(labels) >= 2 and make_task(name).labels == list(labels)
    # The F1 these tasks add is that of the class "1" (ClassificationTask.metrics), so each must have one.
    assert all("1" in CLASSIFICATION_LABELS[name] for name in WITH_F1)
    assert make_task("squad").default_max_seq_len == 384 and make_task("sst2").default_max_seq_len == 128
    with pytest.raises(MiniBertError, match="unknown task 'cola'; expected one of sst2, snli"):
        make_task("cola")


def test_register_adds_a_class_by_one_line_as_a_decorator_or_a_call(monkeypatch):
    monkeypatch.setitem(TASKS, "plain", None)                   # removed again after the test

    @register("plain")
    class Plain(Task):
        def __init__(self, name, labels=None, settings=None):
            self.name, self.labels, self.settings_given = name, labels, settings

    assert task_class("plain") is Plain
    task = make_task("plain", labels=["a"], settings={"x": 1})
    assert (task.name, task.labels, task.settings_given, task.settings) == ("plain", ["a"], {"x": 1}, {})
    assert register("plain", Task) is Task and task_class("plain") is Task


# ----------------------------------------------------------------------------
# A new task in one file
# ----------------------------------------------------------------------------

# A toy task in its own file, with its own file format ("LABEL | sentence",
# "# " comments), its labels, its reader, its writer and its metric; the
# head and the loss are those of sentence classification.
TOY_TASK = '''
"""Toy sentiment: positive, negative or neutral (no sentiment word), from lines "LABEL | sentence"."""

from minibert import metrics
from minibert.support.files import atomic_write
from minibert.support.task_files import ClassificationExample, line_error, nonempty, numbered_lines
from minibert.tasks import register
from minibert.tasks.classification import ClassificationTask


@register("toy-sentiment")
class ToySentiment(ClassificationTask):
    default_labels = ("negative", "neutral", "positive")
    main_metric = "macro_f1"
    default_max_seq_len = 32          # short sentences

    def read(self, path):
        examples = []
        for number, line in numbered_lines(path):
            if not line.strip() or line.startswith("# "):
                continue
            label, separator, text = line.partition(" | ")
            if not separator:
                raise line_error(path, number, "expected 'LABEL | sentence'")
            if label and label not in self.labels:
                raise line_error(path, number, f"unknown label {label!r} (expected one of {', '.join(self.labels)})")
            examples.append(ClassificationExample(text.strip(), None, label or None, None, number))
        return nonempty(path, examples, "only comments")

    def metrics(self, examples, predictions):
        gold, predicted = [e.label for e in examples], [label for label, _ in predictions]
        f1 = [metrics.binary_f1(predicted, gold, positive=label) for label in self.labels]
        return {"accuracy": metrics.accuracy(predicted, gold), "macro_f1": sum(f1) / len(f1)}

    def write_predictions(self, examples, predictions, path):
        with atomic_write(path, mode="w") as f:
            for example, (label, _) in zip(examples, predictions):
                f.write(f"{label} | {example.text_a}\\n")
        return [path]
'''


def toy_rows(n, seed):
    """n (label, sentence): filler words and one positive word, one negative word or none."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.choice(["negative", "neutral", "positive"])
        words = rng.sample(FILLER, rng.randint(2, 6))
        words += {"negative": [rng.choice(NEGATIVE)], "neutral": [], "positive": [rng.choice(POSITIVE)]}[label]
        rng.shuffle(words)
        rows.append((label, " ".join(words)))
    return rows


def write_toy(path, rows, labelled=True):
    lines = ["# toy sentiment"] + [f"{label if labelled else ''} | {text}" for label, text in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def toy_task(tmp_path, monkeypatch):
    """The toy task's file written under tmp_path and imported: its one line registers it."""
    monkeypatch.setitem(TASKS, "toy-sentiment", None)            # removed again after the test
    (tmp_path / "toy_task.py").write_text(TOY_TASK, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("toy_task", tmp_path / "toy_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert TASKS["toy-sentiment"] is module.ToySentiment
    return module.ToySentiment


def test_a_task_in_one_file_fine_tunes_evaluates_and_predicts_through_finetune_py(toy_task, tmp_path, capsys):
    write_toy_sst2(tmp_path)                                     # tmp_path/base: a tiny random BERT
    train = write_toy(tmp_path / "train.txt", toy_rows(240, seed=0))
    dev_rows = toy_rows(48, seed=1)
    dev = write_toy(tmp_path / "dev.txt", dev_rows)
    code, captured = run_script_in_process(
        capsys, "finetune.py", "--task", "toy-sentiment", "--model", tmp_path / "base", "--train", train,
        "--eval", dev, "--epochs", "3", "--batch-size", "16", "--lr", "3e-3", "--device", "cpu",
        "--output", tmp_path / "run", "--quiet")
    assert code == 0, captured.err
    best = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert best["task"] == "toy-sentiment" and "best epoch" in captured.out
    assert best["accuracy"] > 45 and best["macro_f1"] > 40      # chance: about 33 for three classes
    record = json.loads((tmp_path / "run" / "task.json").read_text())
    assert record["labels"] == ["negative", "neutral", "positive"] and record["max_seq_len"] == 32
    config = json.loads((tmp_path / "run" / "config.json").read_text())     # what transformers loads
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}

    code, captured = run_script_in_process(capsys, "finetune.py", "--model", tmp_path / "run", "--eval", dev,
                                           "--json", tmp_path / "eval.json", "--quiet")
    assert code == 0 and "toy-sentiment on" in captured.out
    assert json.loads((tmp_path / "eval.json").read_text())["macro_f1"] == pytest.approx(best["macro_f1"])

    unlabelled = write_toy(tmp_path / "test.txt", dev_rows, labelled=False)
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", tmp_path / "run", "--predict",
                                           unlabelled, "--output", tmp_path / "preds.txt", "--quiet")
    assert code == 0 and "wrote predictions for 48 examples" in captured.out
    predicted = [line.split(" | ") for line in (tmp_path / "preds.txt").read_text().splitlines()]
    assert [text for _, text in predicted] == [text for _, text in dev_rows]
    right = sum(label == gold for (label, _), (gold, _) in zip(predicted, dev_rows))
    assert right / len(dev_rows) * 100 == pytest.approx(best["accuracy"])


def test_a_task_files_errors_reach_finetune_py_as_one_line(toy_task, tmp_path, capsys):
    write_toy_sst2(tmp_path)
    bad = tmp_path / "bad.txt"
    bad.write_text("positive | a good film\nmaybe | a film\n", encoding="utf-8")
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "toy-sentiment", "--model",
                                           tmp_path / "base", "--train", bad, "--output", tmp_path / "run")
    assert code == 1
    assert f"{bad}: line 2: unknown label 'maybe' (expected one of negative, neutral, positive)" in captured.err
