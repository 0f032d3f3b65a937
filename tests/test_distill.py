"""distill.py and minibert/distillation.py (Tang et al. 2019) on tiny models
and tiny data, in seconds: the student learns a teacher's logits, the loss
formula, the word vocabulary and embeddings, the teacher-logit cache, the
student folder, the command line's four forms and its one-line errors."""

import json
import math
import shutil

import numpy as np
import pytest
import torch

from helpers import REPO, run_script_in_process
from minibert import distillation, finetuning
from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.support.cli import run
from minibert.distillation import (NO_LABEL, DistillationObjective, DistillationSettings, PieceTokenizer,
                                   StudentBatches, WordTokenizer, build_vocabulary, distillation_loss,
                                   load_student, save_student, student_features, student_logits)
from minibert.lstm import BiLSTMClassifier, StudentConfig
from minibert.model import BertModel
from minibert.tasks import make_task
from minibert.tasks.readers import ClassificationExample
from minibert.tokenization import load_tokenizer
from minibert.training import Context, TrainingConfig, train
from tiny_models import FILLER, NEGATIVE, POSITIVE, sentiment_rows, tiny_config, write_sst2, write_vocab

TINY_STUDENT = ["--embedding-dim", "16", "--hidden-size", "8", "--fc-size", "8"]

# A part-of-speech lexicon for the toy sentences ("word TAG" lines, as CoNLL's first two columns).
POS_LINES = ["-DOCSTART- -X- -X- O", "", *[f"{w} JJ" for w in POSITIVE + NEGATIVE],
             *[f"{w} NN" for w in ("film", "story", "plot", "show")], "the DT", "a DT", "was VBD", "and CC",
             "very RB", "it PRP"]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Models this small run fastest on one thread: two threads spend their time waiting for each
    other on a busy machine (10x slower here, next to a training job)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load_script(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py") + "_script", REPO / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_teacher(folder, base, task_name, seed=0, labels=None):
    """A finetune.py folder of `task_name` (the tiny encoder + a head drawn with `seed`), written by
    finetuning.save_task_model as finetune.py writes it: the format matters here, not the accuracy."""
    encoder = load_pretrained(base)
    torch.manual_seed(seed)
    finetuning.add_pooler_if_missing(encoder)
    task = make_task(task_name, labels=labels)
    model = finetuning.TaskModel(encoder, task.make_head(encoder.config), task.uses_pooler)
    finetuning.save_task_model(model, task, load_tokenizer(base), folder, {"max_seq_len": 32})
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)
    save_pretrained(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False), root / "base")
    make_teacher(root / "teacher", root / "base", "sst2")
    make_teacher(root / "ner", root / "base", "conll2003", labels=["O", "B-PER", "I-PER"])
    write_sst2(root / "train.tsv", sentiment_rows(48, seed=0))
    write_sst2(root / "dev.tsv", sentiment_rows(24, seed=1))
    (root / "pos.txt").write_text("\n".join(POS_LINES) + "\n", encoding="utf-8")
    return root


def cli_args(root, output, *extra):
    return ["--teacher", root / "teacher", "--task", "sst2", "--train", root / "train.tsv", "--eval",
            root / "dev.tsv", "--output", output, "--n-iter", "2", "--epochs", "2", "--pos-file", root / "pos.txt",
            "--cache-dir", root / "cache", *TINY_STUDENT, "--quiet", *extra]


@pytest.fixture(scope="module")
def distilled(setup, tmp_path_factory):
    """One distill.py run: (student folder, its --json results)."""
    out = tmp_path_factory.mktemp("distilled")
    script = load_script("distill.py")
    with pytest.raises(SystemExit) as exit_info:       # run_script_in_process, without a test's capsys
        run(script.main, [str(a) for a in cli_args(setup, out / "student", "--json", out / "run.json")])
    assert exit_info.value.code == 0
    return out / "student", json.loads((out / "run.json").read_text())


# ----------------------------------------------------------------------------
# The student learns the teacher's logits
# ----------------------------------------------------------------------------


def synthetic_transfer_set(n=200, seed=0):
    """Sentences of random words and a fixed 'teacher': each word adds its own fixed vector to the logits
    (K = 3), so the logits are a learnable function of the words."""
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(20)]
    word_logits = {w: rng.normal(size=3).astype(np.float32) for w in words}
    texts = [" ".join(rng.choice(words, size=rng.integers(2, 8))) for _ in range(n)]
    logits = np.stack([sum(word_logits[w] for w in t.split()) for t in texts]).astype(np.float32)
    return texts, logits


def mse_to_teacher(model, batches, logits):
    model.eval()
    with torch.no_grad():
        batch = distillation.collate_student(batches.features, batches.pad_id, logits)
        return float(torch.nn.functional.mse_loss(student_logits(model, batch), batch["teacher_logits"]))


def test_the_student_learns_to_match_a_fixed_teachers_logits(tmp_path):
    texts, logits = synthetic_transfer_set()
    task = make_task("sst2")          # single sentences, no gold labels: only the teacher's 3 logits count
    examples = [ClassificationExample(t, None, None, None, i + 1) for i, t in enumerate(texts)]
    tokenizer = WordTokenizer(build_vocabulary(texts), max_seq_len=16)
    features = student_features(task, examples, tokenizer)
    torch.manual_seed(0)
    model = BiLSTMClassifier(StudentConfig(tokenizer.vocab_size, 3, embedding_dim=16, hidden_size=16, fc_size=32,
                                           dropout=0.0))
    batches = StudentBatches(features, batch_size=20, seed=0, pad_id=0, logits=logits)
    before = mse_to_teacher(model, batches, logits)
    settings = DistillationSettings(optimizer="adadelta", lr=1.0)    # the default optimizer, as distill.py runs it
    config = TrainingConfig(total_steps=15 * len(batches), seed=0, max_grad_norm=0.0, log_every=10**6)
    train(model, batches, DistillationObjective(alpha=0.0), config, Context(torch.device("cpu")),
          tmp_path / "checkpoint.pt", progress=False, optimizer_factory=distillation.optimizer_factory(settings))
    after = mse_to_teacher(model, batches, logits)
    assert after <= before / 5, (before, after)      # the MSE to the teacher's logits falls at least 5x


def test_training_py_still_defaults_to_adamw_with_warmup_and_decay(tmp_path):
    """The optimizer_factory hook is optional: without it, train builds BERT's AdamW + schedule."""
    model = torch.nn.Linear(2, 2)
    batches = [{"x": torch.ones(4, 2), "attention_mask": torch.ones(4, 1)}] * 4

    class Objective:
        def counts(self, batch):
            return {"loss": 4}

        def losses(self, model, batch):
            return {"loss": (model(batch["x"]).sum(), 0)}
    config = TrainingConfig(total_steps=4, learning_rate=0.1, warmup_steps=2, log_every=1)
    summary = train(model, batches, Objective(), config, Context(torch.device("cpu")), tmp_path / "c.pt",
                    progress=False)
    assert [round(r["lr"], 6) for r in summary["history"]] == [0.1, 0.1, 0.05, 0.0]
    state = torch.load(tmp_path / "c.pt", weights_only=True)
    assert "exp_avg" in next(iter(state["optimizer"]["state"].values()))      # AdamW's state


# ----------------------------------------------------------------------------
# The loss
# ----------------------------------------------------------------------------


class FixedLogits(torch.nn.Module):
    """A 'student' whose logits are given: the loss can be checked by hand."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, input_ids, attention_mask, input_ids_b=None, attention_mask_b=None):
        return self.logits


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_the_loss_is_alpha_ce_on_gold_labels_plus_one_minus_alpha_mse_on_logits(alpha):
    student = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    teacher = torch.tensor([[1.0, 0.0], [0.0, 3.0], [-1.0, 1.0]])
    labels = torch.tensor([0, 0, NO_LABEL])                     # the third is an augmented sample: no gold label
    # by hand: CE over the two labelled rows; MSE = mean over rows of the mean over the 2 classes
    ce = (-math.log(math.exp(2) / (math.exp(2) + 1)) - math.log(1 / (1 + math.e))) / 2
    mse = ((1 + 0) / 2 + (0 + 4) / 2 + (0 + 4) / 2) / 3
    expected = alpha * ce + (1 - alpha) * mse
    assert float(distillation_loss(student, teacher, labels, alpha)) == pytest.approx(expected, rel=1e-6)

    batch = {"input_ids": torch.ones(3, 2, dtype=torch.long), "attention_mask": torch.ones(3, 2),
             "labels": labels, "teacher_logits": teacher}
    objective = DistillationObjective(alpha)
    counts = objective.counts(batch)
    terms = objective.losses(FixedLogits(student), batch)
    combined = sum(loss_sum / max(counts[term], 1) for term, (loss_sum, _) in terms.items())   # as train() does
    assert float(combined) == pytest.approx(expected, rel=1e-6)
    assert set(terms) == {name for name, weight in (("distill", 1 - alpha), ("gold", alpha)) if weight > 0}
    if alpha < 1:
        assert counts["distill"] == 3 and int(terms["distill"][1]) == 2   # rows 0 and 1 agree with the teacher
    if alpha > 0:
        assert counts["gold"] == 2 and int(terms["gold"][1]) == 1         # row 0 right, row 1 wrong


# ----------------------------------------------------------------------------
# Vocabulary and embeddings
# ----------------------------------------------------------------------------


def test_the_word_vocabulary_has_specials_first_then_words_by_frequency():
    texts = ["the film was good", "The plot was bad [MASK] ,", "the [MASK] film"]
    words = build_vocabulary(texts)
    assert words[:6] == ["[PAD]", "[UNK]", "[MASK]", "the", "film", "was"]   # 3, 2, 2 occurrences; ties a-z
    assert build_vocabulary(texts, min_count=2) == ["[PAD]", "[UNK]", "[MASK]", "the", "film", "was"]
    tokenizer = WordTokenizer(words, max_seq_len=3)
    assert tokenizer.encode_many(["The [MASK] unseen-word", ""]) == [[3, 2, 1], [1]]   # truncated; empty -> [UNK]


def test_word_vectors_fill_the_vocabulary_words_they_have(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("4 3\nThe 1 2 3\nzebra 9 9 9\nfilm 0.5 0 -1\nthe 7 7 7\n", encoding="utf-8")
    vectors, dim = distillation.read_word_vectors(path, ["[PAD]", "[UNK]", "[MASK]", "the", "film", "good"])
    assert dim == 3 and set(vectors) == {"the", "film"}              # zebra: not in the vocabulary
    assert vectors["the"].tolist() == [1, 2, 3]                      # the first spelling wins
    with pytest.raises(distillation.MiniBertError, match="3-dimensional vectors, but --embedding-dim is 300"):
        distillation.read_word_vectors(path, ["the"], dim=300)
    (tmp_path / "bad.txt").write_text("a 1 2\nb 1\n", encoding="utf-8")
    with pytest.raises(distillation.MiniBertError, match=r"bad.txt: line 2: 1 numbers; expected 2"):
        distillation.read_word_vectors(tmp_path / "bad.txt", ["a"])

    tokenizer = WordTokenizer(["[PAD]", "[UNK]", "[MASK]", "the", "film", "good"], max_seq_len=8)
    settings = DistillationSettings(embeddings=str(path), hidden_size=4).resolved(make_task("sst2"), True)
    model, report = distillation.build_student(make_task("sst2"), tokenizer, settings)
    assert model.config.embedding_dim == 3 and "vectors for 2 of 3 words" in report
    assert model.embedding.weight[4].tolist() == [0.5, 0.0, -1.0]
    assert model.embedding.weight[5].abs().max() <= 0.25             # no vector: random U(-0.25, 0.25)


def test_teacher_embeddings_are_copied_at_its_width_or_randomly_projected(setup):
    teacher = distillation.load_teacher(setup / "teacher")
    weight = teacher.model.encoder.embeddings.word_embeddings.weight.detach()     # (V, 32)
    same = distillation.teacher_embedding_matrix(teacher.model.encoder, 32, seed=0)
    assert torch.equal(same, weight)
    projected = distillation.teacher_embedding_matrix(teacher.model.encoder, 12, seed=0)
    assert projected.shape == (weight.shape[0], 12)
    assert torch.equal(projected, distillation.teacher_embedding_matrix(teacher.model.encoder, 12, seed=0))
    ratio = projected.norm(dim=1) / weight.norm(dim=1)               # lengths roughly kept (Johnson-Lindenstrauss)
    assert 0.5 < float(ratio.median()) < 1.5
    pieces = PieceTokenizer(teacher.tokenizer, max_seq_len=8)
    assert pieces.encode_many(["good film", "[MASK] plot"]) == [
        teacher.tokenizer.convert_tokens_to_ids(["good", "film"]), teacher.tokenizer.convert_tokens_to_ids(
            ["[MASK]", "plot"])]                                    # the teacher's pieces, no [CLS]/[SEP]


# ----------------------------------------------------------------------------
# The transfer set
# ----------------------------------------------------------------------------


def test_without_the_default_pos_file_the_error_says_to_pass_one(monkeypatch, tmp_path):
    monkeypatch.setattr(distillation, "DEFAULT_POS_FILE", tmp_path / "absent" / "eng.train")
    with pytest.raises(distillation.MiniBertError, match="absent: pass --pos-file FILE"):
        distillation.pos_lexicon()


SHARED_SST2 = REPO.parent / "shared" / "data" / "sst2" / "train.tsv"


@pytest.mark.shared_data
@pytest.mark.skipif(not distillation.DEFAULT_POS_FILE.is_file() or not SHARED_SST2.is_file(),
                    reason="needs ../shared/data/conll2003/eng.train and sst2/train.tsv, absent here")
def test_real_sst2_sentences_are_augmented_with_the_default_conll_lexicon(setup, tmp_path):
    assert distillation.DEFAULT_POS_FILE == REPO.parent / "shared" / "data" / "conll2003" / "eng.train"
    task = make_task("sst2")
    examples = task.read(SHARED_SST2)[:100]
    settings = DistillationSettings(n_iter=3).resolved(task, True)
    transfer = distillation.make_transfer_set(examples, distillation.pos_lexicon(), settings)
    augmented = transfer[100:]
    assert transfer[:100] == examples and 150 < len(augmented) <= 300 and all(e.label is None for e in augmented)
    assert any("[MASK]" in e.text_a for e in augmented)
    tokenizer = WordTokenizer(build_vocabulary([e.text_a for e in transfer]), 128)
    masked = next(e.text_a for e in augmented if "[MASK]" in e.text_a)
    assert tokenizer.mask_id in tokenizer.encode_many([masked])[0]        # "[MASK]" is one word, id 2


# ----------------------------------------------------------------------------
# The teacher-logit cache
# ----------------------------------------------------------------------------


def test_teacher_logits_are_cached_and_recomputed_when_teacher_data_or_settings_change(setup, tmp_path, monkeypatch):
    calls = []
    real = distillation.teacher_logits

    def counting(teacher, examples, *args, **kwargs):
        calls.append(len(examples))
        return real(teacher, examples, *args, **kwargs)
    monkeypatch.setattr(distillation, "teacher_logits", counting)
    train_file = tmp_path / "train.tsv"
    shutil.copy(setup / "train.tsv", train_file)
    settings = DistillationSettings(n_iter=2, pos_file=str(setup / "pos.txt"), cache_dir=str(tmp_path / "cache"))
    settings = settings.resolved(make_task("sst2"), True)

    def run(teacher_folder=setup / "teacher", settings=settings):
        teacher = distillation.load_teacher(teacher_folder)
        examples = teacher.task.read(train_file)
        return distillation.transfer_set_with_logits(teacher, examples, train_file, settings, progress=False)

    transfer, logits, hit = run()
    assert not hit and len(calls) == 1 and calls[0] == len(transfer) == len(logits) > 48   # 48 + augmented
    again, again_logits, hit = run()
    assert hit and len(calls) == 1                                   # the teacher was not called again
    assert np.array_equal(again_logits, logits)
    assert [(e.text_a, e.label, e.line) for e in again] == [(e.text_a, e.label, e.line) for e in transfer]

    run(settings=dataclass_replace(settings, n_iter=3))              # other augmentation settings
    assert len(calls) == 2
    run(settings=dataclass_replace(settings, augment=False))         # no augmentation: the training set alone
    assert len(calls) == 3 and calls[-1] == 48
    other_teacher = make_teacher(tmp_path / "teacher2", setup / "base", "sst2", seed=1)   # another head
    run(teacher_folder=other_teacher)
    assert len(calls) == 4
    write_sst2(train_file, sentiment_rows(48, seed=5))               # other data
    run()
    assert len(calls) == 5
    run()
    assert len(calls) == 5                                           # ... cached in turn
    for cache_file in (tmp_path / "cache").glob("*.npz"):            # a damaged cache file is recomputed, not an error
        cache_file.write_bytes(b"not a zip")
    run()
    assert len(calls) == 6


def dataclass_replace(settings, **changes):
    import dataclasses
    return dataclasses.replace(settings, **changes)


# ----------------------------------------------------------------------------
# The student folder
# ----------------------------------------------------------------------------


def test_a_saved_student_loads_back_with_identical_logits(setup, tmp_path):
    words = build_vocabulary(["a good film", "a bad plot"])
    teacher = distillation.load_teacher(setup / "teacher")
    cases = [("sst2", WordTokenizer(words, 16)), ("mrpc", PieceTokenizer(teacher.tokenizer, 16))]
    for task_name, tokenizer in cases:
        task = make_task(task_name)
        torch.manual_seed(0)
        config = StudentConfig(tokenizer.vocab_size, 2, embedding_dim=8, hidden_size=4, fc_size=6,
                               pair=task_name != "sst2", pooling="max", padding_id=tokenizer.pad_id)
        model = BiLSTMClassifier(config).eval()
        save_student(model, tokenizer, task, tmp_path / task_name, {"note": "test"})
        loaded, loaded_tokenizer, loaded_task = load_student(tmp_path / task_name)
        assert loaded_task.name == task_name and loaded_task.labels == task.labels
        assert loaded_tokenizer.kind == tokenizer.kind and loaded_tokenizer.vocab_size == tokenizer.vocab_size
        examples = [ClassificationExample("a good film", "a bad plot", "1", None, 2),
                    ClassificationExample("bad", "good film , a plot", "0", None, 3)]
        features = student_features(task, examples, tokenizer)
        assert [f["input_ids"].tolist() for f in student_features(loaded_task, examples, loaded_tokenizer)] == \
            [f["input_ids"].tolist() for f in features]
        batch = distillation.collate_student(features, tokenizer.pad_id)
        with torch.no_grad():
            assert torch.equal(student_logits(model, batch), student_logits(loaded, batch))


def test_a_pair_task_is_distilled_with_a_siamese_student(setup, tmp_path):
    rows = [("1", "a good film", "a great film"), ("0", "the plot was bad", "it was a lovely show"),
            ("1", "very sad story", "a sad story"), ("0", "an ugly show", "the film was fine")] * 4
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"] + [f"{q}\t{i}\t{i + 100}\t{a}\t{b}"
                                                               for i, (q, a, b) in enumerate(rows)]
    (tmp_path / "mrpc.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    make_teacher(tmp_path / "teacher", setup / "base", "mrpc")
    settings = DistillationSettings(n_iter=2, pos_file=str(setup / "pos.txt"), cache_dir=str(tmp_path / "cache"),
                                    embedding_dim=8, hidden_size=4, fc_size=8, epochs=2, batch_size=8, alpha=0.5)
    summary = distillation.distill(None, tmp_path / "mrpc.tsv", tmp_path / "mrpc.tsv", tmp_path / "student",
                                   settings, teacher_folder=tmp_path / "teacher", device="cpu", progress=False)
    assert summary["task"] == "mrpc" and set(summary["best"]) == {"accuracy", "f1"}
    assert summary["transfer_examples"] > summary["train_examples"] == 16
    logged = [record for record in summary["history"] if "distill_loss" in record]
    assert logged and all("gold_loss" in record for record in logged)   # alpha 0.5: both terms
    model, _, task = load_student(tmp_path / "student")
    assert model.config.pair and task.name == "mrpc"


# ----------------------------------------------------------------------------
# The command line
# ----------------------------------------------------------------------------


def test_distill_writes_a_student_folder_and_the_results(distilled, setup):
    folder, results = distilled
    assert {"student.safetensors", "student.json", "vocab.txt"} <= {p.name for p in folder.iterdir()}
    record = json.loads((folder / "student.json").read_text())
    assert record["task"] == "sst2" and record["labels"] == ["0", "1"] and record["tokenization"] == "words"
    assert record["student"]["hidden_size"] == 8 and record["distilled"] is True
    assert record["metrics"]["accuracy"] == results["accuracy"] == max(e["accuracy"] for e in results["epochs_history"])
    assert results["parameters"] == BiLSTMClassifier(StudentConfig.from_dict(record["student"], "x")).num_parameters()
    for key in ("teacher_accuracy", "train_seconds", "teacher_parameters", "transfer_examples"):
        assert key in results
    assert results["transfer_examples"] > results["train_examples"] == 48
    assert results["settings"]["alpha"] == 0.0 and results["settings"]["n_iter"] == 2


def test_a_second_run_reuses_the_cached_teacher_logits(distilled, setup, tmp_path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(distillation, "teacher_logits", lambda *a, **k: calls.append(1))
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "again", "--epochs",
                                                                           "1", "--json", tmp_path / "r.json"))
    assert code == 0, captured.err
    assert calls == [] and json.loads((tmp_path / "r.json").read_text())["cache_hit"] is True


def test_predictions_have_finetune_formats(distilled, setup, tmp_path, capsys):
    folder, _ = distilled
    code, _ = run_script_in_process(capsys, "distill.py", "--student", folder, "--predict", setup / "dev.tsv",
                                    "--output", tmp_path / "student.jsonl", "--quiet")
    assert code == 0
    code, _ = run_script_in_process(capsys, "finetune.py", "--model", setup / "teacher", "--predict",
                                    setup / "dev.tsv", "--output", tmp_path / "teacher.jsonl", "--quiet")
    assert code == 0
    ours = [json.loads(line) for line in (tmp_path / "student.jsonl").read_text().splitlines()]
    theirs = [json.loads(line) for line in (tmp_path / "teacher.jsonl").read_text().splitlines()]
    assert len(ours) == len(theirs) == 24
    assert [set(line) for line in ours] == [set(line) for line in theirs] == [{"label", "probs"}] * 24
    assert all(len(line["probs"]) == 2 and abs(sum(line["probs"]) - 1) < 1e-4 for line in ours)
    assert all(line["label"] == str(int(np.argmax(line["probs"]))) for line in ours)


def test_evaluation_json_has_finetune_metric_names(distilled, setup, tmp_path, capsys):
    folder, results = distilled
    code, captured = run_script_in_process(capsys, "distill.py", "--student", folder, "--eval", setup / "dev.tsv",
                                           "--json", tmp_path / "student.json", "--quiet")
    assert code == 0 and "accuracy" in captured.out
    code, _ = run_script_in_process(capsys, "finetune.py", "--model", setup / "teacher", "--eval",
                                    setup / "dev.tsv", "--json", tmp_path / "teacher.json", "--quiet")
    ours, theirs = (json.loads((tmp_path / name).read_text()) for name in ("student.json", "teacher.json"))
    assert set(ours) == set(theirs) == {"task", "evaluated_on", "models", "accuracy"}
    assert ours["accuracy"] == pytest.approx(results["accuracy"])     # the best epoch's, read back


def test_no_teacher_trains_the_plain_bilstm_on_gold_labels(setup, tmp_path, capsys):
    code, captured = run_script_in_process(
        capsys, "distill.py", "--task", "sst2", "--train", setup / "train.tsv", "--eval", setup / "dev.tsv",
        "--output", tmp_path / "plain", "--no-teacher", "--epochs", "2", "--cache-dir", tmp_path / "cache",
        *TINY_STUDENT, "--json", tmp_path / "plain.json", "--quiet")
    assert code == 0, captured.err
    results = json.loads((tmp_path / "plain.json").read_text())
    assert results["distilled"] is False and results["transfer_examples"] == results["train_examples"] == 48
    assert results["settings"]["alpha"] == 1.0 and "teacher_accuracy" not in results
    logged = [record for record in results["history"] if "gold_loss" in record]
    assert logged and not any("distill_loss" in record for record in logged)
    assert not (tmp_path / "cache").exists()                          # no teacher, nothing cached


@pytest.mark.parametrize("extra", [[], ["--no-teacher"]])
def test_embeddings_teacher_reads_the_teachers_pieces_and_starts_from_its_embeddings(setup, tmp_path, capsys, extra):
    code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / "s", "--embeddings",
                                                                           "teacher", "--epochs", "1", *extra))
    assert code == 0, captured.err
    record = json.loads((tmp_path / "s" / "student.json").read_text())
    assert record["tokenization"] == "teacher" and record["student"]["embedding_dim"] == 16
    assert record["embeddings_start"] == "the teacher's word-piece embeddings (32-d, randomly projected to 16-d)"
    assert record["distilled"] is not bool(extra)
    model, tokenizer, _ = load_student(tmp_path / "s")
    assert tokenizer.vocab_size == load_tokenizer(setup / "teacher").vocab_size == model.config.vocab_size
    code, _ = run_script_in_process(capsys, "distill.py", "--student", tmp_path / "s", "--predict",
                                    setup / "dev.tsv", "--output", tmp_path / "p.jsonl", "--quiet")
    assert code == 0 and len((tmp_path / "p.jsonl").read_text().splitlines()) == 24


def test_a_killed_and_resumed_run_ends_with_the_same_weights(setup, tmp_path, capsys):
    def distil(name, *extra):
        code, captured = run_script_in_process(capsys, "distill.py", *cli_args(setup, tmp_path / name, *extra))
        assert code == 0, captured.err
    distil("straight")
    distil("resumed", "--max-minutes", "1e-9")                        # stops after its first step
    assert torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)["step"] == 1
    distil("resumed", "--resume")
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "checkpoint.pt", weights_only=True)
    assert a["step"] == b["step"] > 1
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


@pytest.mark.parametrize("make_args,fragment", [
    (lambda r, t: ["--teacher", r / "ner", "--train", r / "train.tsv", "--output", t / "o"],
     "a conll2003 model; distillation needs a sentence classifier"),
    (lambda r, t: ["--teacher", r / "base", "--train", r / "train.tsv", "--output", t / "o"],
     "not a finetune.py classifier folder"),
    (lambda r, t: ["--teacher", r / "missing", "--train", r / "train.tsv", "--output", t / "o"], "no such folder"),
    (lambda r, t: ["--teacher", r / "teacher", "--task", "snli", "--train", r / "train.tsv", "--output", t / "o"],
     "--task snli: the teacher"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "nope.tsv", "--output", t / "o"], "nope.tsv"),
    (lambda r, t: ["--task", "sst2", "--train", r / "train.tsv", "--output", t / "o"], "give --teacher DIR"),
    (lambda r, t: ["--task", "sst2", "--train", r / "train.tsv", "--output", t / "o", "--no-teacher", "--alpha",
                   "0.5"], "gold labels only"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--pos-file",
                   r / "nope.txt"], "--pos-file"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--embeddings",
                   r / "vectors.txt"], "expected random, teacher or a word-vectors file"),
    (lambda r, t: ["--teacher", r / "teacher", "--no-teacher", "--task", "sst2", "--train", r / "train.tsv",
                   "--output", t / "o"], "would only serve --embeddings teacher"),
    (lambda r, t: ["--student", r / "teacher", "--eval", r / "dev.tsv"], "not a distill.py student folder"),
    (lambda r, t: ["--student", r / "teacher", "--eval", r / "dev.tsv", "--predict", r / "dev.tsv"], "give one of"),
    (lambda r, t: ["--teacher", r / "teacher", "--train", r / "train.tsv", "--output", t / "o", "--alpha", "2"],
     "--alpha"),
])
def test_bad_input_is_a_one_line_error(setup, tmp_path, capsys, make_args, fragment):
    code, captured = run_script_in_process(capsys, "distill.py", *make_args(setup, tmp_path), "--cache-dir",
                                           tmp_path / "cache", "--quiet")
    assert code == 1
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment.lower() in lines[0].lower(), captured.err
