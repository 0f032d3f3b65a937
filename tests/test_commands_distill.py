"""minibert/commands/distill.py: what a run records, what --resume
checks, and the parameter counts it reports; a whole run on a pair task."""

import pytest

from distill_helpers import make_distillation_data, make_teacher, one_thread
from minibert.lstm import BiLSTMClassifier
from minibert.commands.distill import describe_run, distill, parameter_counts, resume_config, run_record
from minibert.commands.distill import load_student
from minibert.distillation import DistillationSettings, WordTokenizer, build_vocabulary
from minibert.lstm import StudentConfig
from minibert.tasks import make_task

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return make_distillation_data(tmp_path_factory.mktemp("distillation"))


def test_counts_record_and_resume_config_of_a_run():
    task = make_task("sst2")
    tokenizer = WordTokenizer(build_vocabulary(["a good film"]), 8)
    model = BiLSTMClassifier(StudentConfig(tokenizer.vocab_size, 2, embedding_dim=4, hidden_size=3, fc_size=5))
    counts = parameter_counts(model)
    lstm = 2 * (4 * 3 * 4 + 4 * 3 * 3 + 2 * 4 * 3)             # per direction: W_ih (4H, E), W_hh (4H, H), 2 biases
    assert counts == {"parameters": 6 * 4 + lstm + (6 * 5 + 5) + (5 * 2 + 2),
                      "parameters_without_embeddings": lstm + (6 * 5 + 5) + (5 * 2 + 2), "teacher_parameters": None,
                      "paper_parameters": 963_002}
    settings = DistillationSettings().resolved(task, True)
    record = run_record(settings, "runs/sst2", True, "train.tsv", None, "random U(-0.25, 0.25)", 48, 900)
    assert record["evaluated_on"] is None and record["settings"]["alpha"] == 0.0 and record["transfer_examples"] == 900
    assert describe_run(task, record, 18, 540, counts).startswith(
        "sst2: 48 training examples, 900 in the transfer set, 18 batches of 50 per epoch, 540 steps; student: ")
    config = resume_config(task, settings, 540, model, tokenizer)
    other = WordTokenizer(build_vocabulary(["a bad film"]), 8)
    assert config["model_config"] == model.config.to_dict()                  # embeddings_mode among the fields
    other_config = resume_config(task, settings, 540, model, other)
    assert config["vocabulary_fingerprint"] != other_config["vocabulary_fingerprint"]


def test_resume_config_records_every_setting_that_shapes_the_run_by_flag(tmp_path):
    task = make_task("sst2")
    tokenizer = WordTokenizer(build_vocabulary(["a good film"]), 8)
    model = BiLSTMClassifier(StudentConfig(tokenizer.vocab_size, 2, embedding_dim=4, hidden_size=3, fc_size=5))
    train = tmp_path / "train.tsv"
    train.write_text("sentence\tlabel\na good film\t1\n")
    settings = DistillationSettings(optimizer="adam", cache_dir="somewhere").resolved(task, True)
    record = run_record(settings, None, False, train, None, "random U(-0.25, 0.25)", 1, 1)
    flags = resume_config(task, settings, 10, model, tokenizer, record)["flags"]
    assert flags["--optimizer"] == "adam" and flags["--lr"] == 5e-4 and flags["--alpha"] == 0.0
    assert flags["--no-augment"] is False and flags["--no-teacher"] is True and flags["--teacher"] is None
    assert flags["--train"].startswith(f"{train} (29 bytes, sha256 ")
    assert not {"--cache-dir", "--teacher-batch-size", "--eval-batch-size", "--max-minutes"} & set(flags)
    # one setting, embeddings_mode (distill.py's --freeze-embeddings is its "static"): a change names --embeddings-mode
    assert "--freeze-embeddings" not in flags and flags["--embeddings-mode"] == "rand"


def test_the_papers_sst2_student_counts_963002_parameters_besides_its_two_embedding_tables():
    settings = DistillationSettings(embeddings_mode="multichannel").resolved(make_task("sst2"), True)
    model = BiLSTMClassifier(StudentConfig(1000, 2, embedding_dim=300, hidden_size=settings.hidden_size,
                                           fc_size=settings.fc_size, embeddings_mode=settings.embeddings_mode))
    counts = parameter_counts(model)
    lstm = 2 * (4 * 150 * 600 + 4 * 150 * 150 + 2 * 4 * 150)   # 600-d input: the frozen and the trained copy
    assert counts["parameters_without_embeddings"] == lstm + (300 * 200 + 200) + (200 * 2 + 2) == 963_002
    assert counts["parameters"] == 963_002 + 2 * 1000 * 300
    assert round(counts["parameters_without_embeddings"] / 1e6, 2) == 0.96 == round(counts["paper_parameters"] / 1e6, 2)
    record = run_record(settings, None, True, "train.tsv", None, "random U(-0.25, 0.25)", 1, 1)
    assert "963,002 without the embeddings; Tang et al.'s SST-2 student: 963,002, 0.96M" in describe_run(
        make_task("sst2"), record, 1, 1, counts)


def test_a_pair_task_is_distilled_with_a_siamese_student(setup, tmp_path):
    rows = [("1", "a good film", "a great film"), ("0", "the plot was bad", "it was a lovely show"),
            ("1", "very sad story", "a sad story"), ("0", "an ugly show", "the film was fine")] * 4
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"] + [f"{q}\t{i}\t{i + 100}\t{a}\t{b}"
                                                               for i, (q, a, b) in enumerate(rows)]
    (tmp_path / "mrpc.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    make_teacher(tmp_path / "teacher", setup / "base", "mrpc")
    settings = DistillationSettings(n_iter=2, pos_file=str(setup / "pos.txt"), cache_dir=str(tmp_path / "cache"),
                                    embedding_dim=8, hidden_size=4, fc_size=8, epochs=2, batch_size=8, alpha=0.5)
    summary = distill(None, tmp_path / "mrpc.tsv", tmp_path / "mrpc.tsv", tmp_path / "student",
                      settings, teacher_folder=tmp_path / "teacher", device="cpu", progress=False)
    assert summary["task"] == "mrpc" and set(summary["best"]) == {"accuracy", "f1"}
    assert summary["transfer_examples"] > summary["train_examples"] == 16
    logged = [record for record in summary["history"] if "distill_loss" in record]
    assert logged and all("gold_loss" in record for record in logged)   # alpha 0.5: both terms
    assert summary["best_epoch"] in (1, 2) and len(summary["epochs_history"]) == 2
    model, _, task = load_student(tmp_path / "student")
    assert model.config.pair and task.name == "mrpc"
