"""minibert/commands/distill.py: a student folder written and read back
gives the same logits, a damaged folder is a one-line error, a folder is
replaced whole, and the plain-torch loader docs/formats.md gives reads it."""

import json

import pytest
import torch

from distill_helpers import make_distillation_data, one_thread
from helpers import REPO
from minibert.checkpoints.safetensors import save_safetensors
from minibert.distillation import student_features, student_logits
from minibert.lstm import BiLSTMClassifier
from minibert.commands.distill import load_teacher
from minibert.commands.distill import WEIGHTS_FILE, load_student, save_student
from minibert.lstm import StudentConfig
from minibert.distillation import PieceTokenizer, WordTokenizer, build_vocabulary
from minibert.support import MiniBertError
from minibert.support.student_files import collate_student
from minibert.tasks import make_task
from minibert.support.task_files import ClassificationExample

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)

EXAMPLES = [ClassificationExample("a good film", "a bad plot", "1", None, 2),
            ClassificationExample("bad", "good film , a plot", "0", None, 3)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_distillation_data(tmp_path_factory.mktemp("student_folder"))


def saved_student(folder, task_name="sst2", tokenizer=None):
    tokenizer = tokenizer or WordTokenizer(build_vocabulary(["a good film", "a bad plot"]), 16)
    torch.manual_seed(0)
    config = StudentConfig(tokenizer.vocab_size, 2, embedding_dim=8, hidden_size=4, fc_size=6,
                           pair=task_name != "sst2", pooling="max", padding_id=tokenizer.pad_id)
    model = BiLSTMClassifier(config).eval()
    save_student(model, tokenizer, make_task(task_name), folder, {"note": "test"})
    return model, tokenizer


def logits_of(model, task, tokenizer, examples=EXAMPLES):
    with torch.no_grad():
        return student_logits(model, collate_student(student_features(task, examples, tokenizer), tokenizer.pad_id))


def test_a_saved_student_loads_back_with_identical_logits(setup, tmp_path):
    teacher = load_teacher(setup / "teacher")
    for task_name, tokenizer in [("sst2", None), ("mrpc", PieceTokenizer(teacher.tokenizer, 16))]:
        model, tokenizer = saved_student(tmp_path / task_name, task_name, tokenizer)
        task = make_task(task_name)
        loaded, loaded_tokenizer, loaded_task = load_student(tmp_path / task_name)
        assert loaded_task.name == task_name and loaded_task.labels == task.labels
        assert loaded_tokenizer.kind == tokenizer.kind and loaded_tokenizer.vocab_size == tokenizer.vocab_size
        assert [f["input_ids"].tolist() for f in student_features(loaded_task, EXAMPLES, loaded_tokenizer)] == \
            [f["input_ids"].tolist() for f in student_features(task, EXAMPLES, tokenizer)]
        assert torch.equal(logits_of(model, task, tokenizer), logits_of(loaded, loaded_task, loaded_tokenizer))


def test_a_damaged_student_folder_is_a_one_line_error(tmp_path):
    saved_student(tmp_path)
    record = json.loads((tmp_path / "student.json").read_text())
    for changes, message in [({"task": "squad"}, "task 'squad': expected one of sst2"),
                             ({"tokenization": "bytes"}, "tokenization 'bytes': expected 'words' or 'teacher'"),
                             ({"labels": ["0", "1", "2"]}, "3 labels for num_classes 2"),
                             ({"max_seq_len": 0}, "max_seq_len 0: expected a positive integer")]:
        (tmp_path / "student.json").write_text(json.dumps({**record, **changes}))
        with pytest.raises(MiniBertError, match=message):
            load_student(tmp_path)
    (tmp_path / "student.json").write_text(json.dumps({k: v for k, v in record.items() if k != "labels"}))
    with pytest.raises(MiniBertError, match="field 'labels' is missing"):
        load_student(tmp_path)
    (tmp_path / "student.json").write_text(json.dumps(record))
    save_safetensors({"embedding.weight": torch.zeros(2, 2)}, tmp_path / WEIGHTS_FILE)
    with pytest.raises(MiniBertError, match="student.safetensors: does not fit the student of student.json"):
        load_student(tmp_path)
    with pytest.raises(MiniBertError, match="not a distill.py student folder"):
        load_student(tmp_path / "absent")


def formats_md_student_loader():
    """The plain-torch loader of docs/formats.md 7.4, run as the documentation gives it."""
    text = (REPO / "docs" / "formats.md").read_text(encoding="utf-8")
    section = text[text.index("### 7.4 Loading a student with plain torch"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("\n```\n")]
    namespace = {}
    exec(compile(code, "docs/formats.md 7.4", "exec"), namespace)
    return namespace["load_student"]


@pytest.mark.parametrize("task_name, pooling", [("sst2", "final"), ("mnli", "max")])
def test_the_documented_plain_torch_loader_gives_minibert_logits(tmp_path, task_name, pooling):
    sentences = ["A good film!", "a bad plot , and an unknown word", "good"]
    seconds = ["bad", "a good plot", "the film , the film , the film"]
    tokenizer = WordTokenizer(build_vocabulary(sentences[:1] + seconds), 6)    # unknown words; 6: some are cut
    torch.manual_seed(0)
    task = make_task(task_name)
    config = StudentConfig(tokenizer.vocab_size, len(task.labels), embedding_dim=8, hidden_size=4, fc_size=6,
                           pair=task_name != "sst2", pooling=pooling, padding_id=tokenizer.pad_id)
    save_student(BiLSTMClassifier(config).eval(), tokenizer, task, tmp_path, {"note": "test"})

    student, encode, labels = formats_md_student_loader()(tmp_path)
    with torch.no_grad():
        plain = student(*encode(sentences), *(encode(seconds) if config.pair else ()))
    model, loaded_tokenizer, loaded_task = load_student(tmp_path)
    examples = [ClassificationExample(a, b if config.pair else None, task.labels[0], None, i)
                for i, (a, b) in enumerate(zip(sentences, seconds))]
    assert labels == loaded_task.labels
    assert torch.allclose(plain, logits_of(model, loaded_task, loaded_tokenizer, examples), atol=1e-6)


def test_a_student_saved_again_replaces_the_folder_whole_and_keeps_the_checkpoint(tmp_path):
    saved_student(tmp_path / "run")
    (tmp_path / "run" / "checkpoint.pt").write_bytes(b"the run's checkpoint")
    model, _ = saved_student(tmp_path / "run", "mrpc")
    assert json.loads((tmp_path / "run" / "student.json").read_text())["task"] == "mrpc"
    assert (tmp_path / "run" / "checkpoint.pt").read_bytes() == b"the run's checkpoint"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]                 # no temporary folder left
    assert torch.equal(load_student(tmp_path / "run")[0].fc1.weight, model.fc1.weight)
