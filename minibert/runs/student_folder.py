"""The run of minibert/distillation.py saves its student here: the student
folder on disk, and load_student reads it back (distill.py --student).

A student folder holds student.safetensors (the BiLSTM's weights), its
vocabulary (vocab.txt, or the teacher's tokenizer files) and student.json
(the config, the task and its labels, how the text is tokenized, the run's
record); docs/formats.md describes every file. It is written as one unit
(support/outputs.write_folder), so a folder is never a mix of two epochs.
The weights carry BiLSTMClassifier's names (embedding.weight, lstm.weight_ih_l0,
..., fc1.weight, fc2.bias), so plain torch and safetensors read them too.
load_student builds the student, its tokenizer and its task from a folder,
as the checkpoint package builds a model.
"""

from pathlib import Path

from minibert.checkpoints.safetensors import load_weights, save_weights
from minibert.distillation import PieceTokenizer, WordTokenizer, is_pair_task
from minibert.lstm import BiLSTMClassifier, StudentConfig
from minibert.support.errors import MiniBertError
from minibert.support.files import read_json_object
from minibert.support.outputs import read_as_one, read_record, restore_interrupted, write_folder, write_record
from minibert.tasks import CLASSIFICATION, make_task
from minibert.tokenization import load_tokenizer

STUDENT_FILE = "student.json"
WEIGHTS_FILE = "student.safetensors"


def save_student(model, tokenizer, task, folder, record):
    """student.safetensors, the vocabulary (vocab.txt, or the teacher's
    tokenizer files) and student.json, written as one unit
    (support/outputs.write_folder: a temporary folder renamed into place, so
    a kill leaves the old best epoch or the new one, whole). The folder's
    other files (checkpoint.pt) are carried over."""
    def write_into(staging):
        save_weights(model, staging / WEIGHTS_FILE)
        tokenizer.save(staging)
        write_record(staging, STUDENT_FILE, {"student": model.config.to_dict(), "task": task.name,
                                             "labels": task.labels, "tokenization": tokenizer.kind,
                                             "max_seq_len": tokenizer.max_seq_len, **record})

    write_folder(folder, write_into)


def read_student_record(folder, tasks):
    """student.json, its fields checked (`tasks`: the task names a student may have)."""
    restore_interrupted(folder)          # a folder a killed write left renamed away comes back
    if not (Path(folder) / STUDENT_FILE).is_file():
        raise MiniBertError(f"--student {folder}: not a distill.py student folder (no {STUDENT_FILE})")
    record = read_record(folder, STUDENT_FILE, required=("student", "task", "labels", "tokenization", "max_seq_len"))
    path = Path(folder) / STUDENT_FILE
    if record["task"] not in tasks:
        raise MiniBertError(f"{path}: task {record['task']!r}: expected one of {', '.join(tasks)}")
    if not isinstance(record["labels"], list) or not all(isinstance(label, str) for label in record["labels"]):
        raise MiniBertError(f"{path}: labels: expected a list of strings")
    if record["tokenization"] not in ("words", "teacher"):
        raise MiniBertError(f"{path}: tokenization {record['tokenization']!r}: expected 'words' or 'teacher'")
    max_len = record["max_seq_len"]
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise MiniBertError(f"{path}: max_seq_len {max_len!r}: expected a positive integer")
    return record


def check_student_fits(folder, config, vocab_size, task, pair):
    """The config of student.json agrees with the vocabulary, the task's labels and its kind (`pair`)."""
    folder = Path(folder)
    if vocab_size != config.vocab_size:
        raise MiniBertError(f"{folder}: the vocabulary has {vocab_size} entries, student.json says "
                            f"vocab_size {config.vocab_size}")
    if len(task.labels) != config.num_classes:
        raise MiniBertError(f"{folder / STUDENT_FILE}: {len(task.labels)} labels for num_classes {config.num_classes}")
    if config.pair != pair:
        raise MiniBertError(f"{folder / STUDENT_FILE}: pair={config.pair} does not fit task {task.name}")


def previous_best(folder, main_metric):
    """The best epoch a killed run saved ({main_metric: value, ...}, its epoch), or (None, None):
    on --resume it stays the one to beat."""
    path = Path(folder) / STUDENT_FILE
    if not path.is_file():
        return None, None
    saved = read_json_object(path)
    metrics = saved.get("metrics") or {}
    return (metrics, saved.get("best_epoch")) if main_metric in metrics else (None, None)


def load_student(folder):
    """(model in eval mode, tokenizer, task) from a student folder, read as
    one snapshot of it (support/outputs.read_as_one)."""
    return read_as_one(folder, lambda: read_student(folder))


def read_student(folder):
    """load_student's reads, in order."""
    record = read_student_record(folder, CLASSIFICATION)
    config = StudentConfig.from_dict(record["student"], f"{Path(folder) / STUDENT_FILE}: student")
    tokenizer = (WordTokenizer.load(folder, record["max_seq_len"]) if record["tokenization"] == "words"
                 else PieceTokenizer(load_tokenizer(folder), record["max_seq_len"]))
    task = make_task(record["task"], labels=record["labels"])
    check_student_fits(folder, config, tokenizer.vocab_size, task, is_pair_task(task))
    model = load_weights(BiLSTMClassifier(config), Path(folder) / WEIGHTS_FILE, f"the student of {STUDENT_FILE}")
    return model.eval(), tokenizer, task
