"""minibert/distillation.py (Tang et al. 2019) on tiny models and tiny data,
in seconds: THE loss by hand, the student learns a teacher's logits, its
embeddings' starting points, the transfer set."""

import math

import numpy as np
import pytest
import torch

from distill_helpers import one_thread
from helpers import REPO
from minibert import distillation
from minibert.augment import PosLexicon
from minibert.distillation import DistillationObjective, distillation_loss, student_features, student_logits
from minibert.finetuning import LengthGroupedBatches
from minibert.heads import IGNORE_INDEX
from minibert.lstm import BiLSTMClassifier
from minibert.distillation import DistillationSettings, WordTokenizer, build_vocabulary, optimizer_factory
from minibert.lstm import StudentConfig
from minibert.support.student_files import collate_student, pos_file_path
from minibert.tasks import make_task
from minibert.support.task_files import ClassificationExample
from minibert.commands.trainer import Context, TrainingConfig, train

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread)


# ----------------------------------------------------------------------------
# THE loss
# ----------------------------------------------------------------------------


def test_the_loss_of_one_example_worked_by_hand():
    # z^(S) = (1, 0), z^(B) = (3, 0), gold class 1, alpha 0.25, K = 2:
    # L_CE = -log(e^0 / (e^1 + e^0)) = log(1 + e) = 1.3132617; L_distill = ((1 - 3)^2 + 0^2) / 2 = 2
    # L = 0.25 * 1.3132617 + 0.75 * 2 = 1.8283154
    L, sums = distillation_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[3.0, 0.0]]), torch.tensor([1]), 0.25)
    assert float(L) == pytest.approx(1.8283154, abs=1e-6)
    assert float(sums["gold"]) == pytest.approx(0.25 * math.log(1 + math.e), rel=1e-6)
    assert float(sums["distill"]) == pytest.approx(0.75 * 2, rel=1e-6)


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
    labels = torch.tensor([0, 0, IGNORE_INDEX])                   # the third is an augmented sample: no gold label
    # by hand: CE over the two labelled rows; MSE = mean over rows of the mean over the 2 classes
    ce = (-math.log(math.exp(2) / (math.exp(2) + 1)) - math.log(1 / (1 + math.e))) / 2
    mse = ((1 + 0) / 2 + (0 + 4) / 2 + (0 + 4) / 2) / 3
    expected = alpha * ce + (1 - alpha) * mse
    assert float(distillation_loss(student, teacher, labels, alpha)[0]) == pytest.approx(expected, rel=1e-6)

    # what training.training_step does with the objective: each term's sum over its count, added
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


def mse_to_teacher(model, features):
    model.eval()
    with torch.no_grad():
        batch = collate_student(features, 0)
        return float(torch.nn.functional.mse_loss(student_logits(model, batch), batch["teacher_logits"]))


def test_the_student_learns_to_match_a_fixed_teachers_logits(tmp_path):
    texts, logits = synthetic_transfer_set()
    task = make_task("sst2")          # single sentences, no gold labels: only the teacher's 3 logits count
    examples = [ClassificationExample(t, None, None, None, i + 1) for i, t in enumerate(texts)]
    tokenizer = WordTokenizer(build_vocabulary(texts), max_seq_len=16)
    features = student_features(task, examples, tokenizer, logits)
    torch.manual_seed(0)
    model = BiLSTMClassifier(StudentConfig(tokenizer.vocab_size, 3, embedding_dim=16, hidden_size=16, fc_size=32,
                                           dropout=0.0))
    batches = LengthGroupedBatches(features, batch_size=20, seed=0, pad_id=0, collate=collate_student)
    before = mse_to_teacher(model, features)
    settings = DistillationSettings(optimizer="adadelta", lr=1.0)    # the default optimizer, as distill.py runs it
    config = TrainingConfig(total_steps=15 * len(batches), seed=0, max_grad_norm=0.0, log_every=10**6)
    train(model, batches, DistillationObjective(alpha=0.0), config, Context(torch.device("cpu")),
          tmp_path / "checkpoint.pt", progress=False, optimizer_factory=optimizer_factory(settings))
    after = mse_to_teacher(model, features)
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


def test_batches_carry_ids_masks_gold_labels_and_the_teachers_logits():
    task = make_task("mrpc")
    tokenizer = WordTokenizer(build_vocabulary(["a good film", "bad"]), 8)
    examples = [ClassificationExample("a good film", "bad", "1", None, 2),
                ClassificationExample("bad", "", None, None, 3)]
    logits = np.array([[0.5, -1.0], [2.0, 0.0]], dtype=np.float32)
    batch = collate_student(student_features(task, examples, tokenizer, logits), tokenizer.pad_id)
    # the vocabulary: [PAD] [UNK] [MASK] a bad film good (ties alphabetically)
    assert batch["input_ids"].tolist() == [[3, 6, 5], [4, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["input_ids_b"].tolist() == [[4], [1]]                  # an empty second sentence reads as [UNK]
    assert batch["labels"].tolist() == [1, IGNORE_INDEX]                # the augmented sample has no gold label
    assert batch["teacher_logits"].tolist() == logits.tolist()


# ----------------------------------------------------------------------------
# The student's embeddings
# ----------------------------------------------------------------------------


def test_word_vectors_fill_the_student_words_they_have(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("4 3\nThe 1 2 3\nzebra 9 9 9\nfilm 0.5 0 -1\nthe 7 7 7\n", encoding="utf-8")
    tokenizer = WordTokenizer(["[PAD]", "[UNK]", "[MASK]", "the", "film", "good"], max_seq_len=8)
    settings = DistillationSettings(embeddings=str(path), hidden_size=4).resolved(make_task("sst2"), True)
    model, report = distillation.build_student(make_task("sst2"), tokenizer, settings)
    assert model.config.embedding_dim == 3 and "vectors for 2 of 3 words" in report
    assert model.embedding.weight[4].tolist() == [0.5, 0.0, -1.0]
    assert model.embedding.weight[5].abs().max() <= 0.25             # no vector: random U(-0.25, 0.25)


# ----------------------------------------------------------------------------
# The transfer set
# ----------------------------------------------------------------------------

SHARED_SST2 = REPO.parent / "shared" / "data" / "sst2" / "train.tsv"
SHARED_CONLL = REPO.parent / "shared" / "data" / "conll2003" / "eng.train"


@pytest.mark.shared_data
@pytest.mark.skipif(not SHARED_CONLL.is_file() or not SHARED_SST2.is_file(),
                    reason="needs ../shared/data/conll2003/eng.train and sst2/train.tsv, absent here")
def test_real_sst2_sentences_are_augmented_with_the_default_conll_lexicon():
    task = make_task("sst2")
    examples = task.read(SHARED_SST2)[:100]
    settings = DistillationSettings(n_iter=3).resolved(task, True)
    transfer = distillation.make_transfer_set(examples, PosLexicon.from_file(pos_file_path(str(SHARED_CONLL))), settings)
    augmented = transfer[100:]
    assert transfer[:100] == examples and 150 < len(augmented) <= 300 and all(e.label is None for e in augmented)
    assert any("[MASK]" in e.text_a for e in augmented)
    tokenizer = WordTokenizer(build_vocabulary([e.text_a for e in transfer]), 128)
    masked = next(e.text_a for e in augmented if "[MASK]" in e.text_a)
    assert tokenizer.mask_id in tokenizer.encode_many([masked])[0]        # "[MASK]" is one word, id 2


# ---- coursework exercise: distillation-loss -----------------------------------------------------


def test_exercise_distillation_loss_mixes_cross_entropy_and_logit_distance():
    z_student = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    z_teacher = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    labels = torch.tensor([0, IGNORE_INDEX])             # the second is an augmented sample: no gold label
    loss, sums = distillation_loss(z_student, z_teacher, labels, alpha=0.5)
    # L_distill per example: (1/K) ||z_t - z_s||^2 = 0.5 and 1.0; L_CE on the first only: log(1 + e^-1)
    assert sums["distill"].item() == pytest.approx(0.5 * 1.5)
    assert sums["gold"].item() == pytest.approx(0.5 * math.log(1 + math.exp(-1)))
    assert loss.item() == pytest.approx(0.5 * 1.5 / 2 + 0.5 * math.log(1 + math.exp(-1)) / 1)


def test_exercise_distillation_loss_leaves_out_a_term_of_weight_zero():
    z_student = torch.tensor([[2.0, 0.0, -1.0]])
    z_teacher = torch.tensor([[1.0, 1.0, 1.0]])
    loss, sums = distillation_loss(z_student, z_teacher, torch.tensor([2]), alpha=0.0)
    assert set(sums) == {"distill"} and loss.item() == pytest.approx((1 + 1 + 4) / 3)
    loss, sums = distillation_loss(z_student, z_teacher, torch.tensor([2]), alpha=1.0)
    log_z = math.log(math.exp(2) + 1 + math.exp(-1))
    assert set(sums) == {"gold"} and loss.item() == pytest.approx(log_z + 1, rel=1e-6)


def test_the_papers_squared_l2_term_is_k_times_the_mse_term():
    z_student = torch.tensor([[2.0, 0.0, -1.0]])
    z_teacher = torch.tensor([[1.0, 1.0, 1.0]])
    labels = torch.tensor([IGNORE_INDEX])
    loss, _ = distillation_loss(z_student, z_teacher, labels, alpha=0.0, distill_term="squared-l2")
    assert loss.item() == pytest.approx(1 + 1 + 4)                    # ||z_t - z_s||^2, no 1/K
    loss, _ = distillation_loss(z_student, z_teacher, labels, alpha=0.0)
    assert loss.item() == pytest.approx((1 + 1 + 4) / 3)              # the default: torch's MSE


def test_unlabelled_target_teacher_gives_augmented_samples_the_teachers_argmax_as_label():
    z_student = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    z_teacher = torch.tensor([[0.0, 0.0], [3.0, 1.0]])                 # the teacher says class 0 for the second
    labels = torch.tensor([0, IGNORE_INDEX])
    loss, sums = distillation_loss(z_student, z_teacher, labels, alpha=0.5, unlabelled="teacher")
    ce_first, ce_second = math.log(1 + math.exp(-1)), math.log(1 + math.exp(2))   # -log softmax(z_s)[0] each
    assert sums["gold"].item() == pytest.approx(0.5 * (ce_first + ce_second))
    distill = 0.5 * ((1 + 0) / 2 + (9 + 1) / 2)                        # (1 - alpha) (1/K) ||z_t - z_s||^2, summed
    assert loss.item() == pytest.approx(distill / 2 + 0.5 * (ce_first + ce_second) / 2)   # CE now over both rows
    objective = DistillationObjective(0.5, unlabelled="teacher")
    assert objective.counts({"labels": labels, "teacher_logits": z_teacher}) == {"distill": 2, "gold": 2}
    assert DistillationObjective(0.5).counts({"labels": labels, "teacher_logits": z_teacher}) == {"distill": 2,
                                                                                                  "gold": 1}
