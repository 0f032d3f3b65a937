"""minibert/training.py on its own: the loop that pretraining, fine-tuning and
distillation all run, on a tiny BERT with a toy objective (no corpus, no
tokenizer, no transformers).

What it must get right ([BERT] A.2; Google's optimization.py): the learning
rate warms up then decays linearly (over steps, or over a time budget, where
it ends at 0 when the budget does and a resumed run continues the same
schedule from the progress it recorded), AdamW decays only the weight matrices
(and so does BERT's own Adam, which differs from AdamW by the bias correction only),
the gradient is clipped to its maximum norm, micro-batches accumulate to
exactly one big batch, a checkpoint resumes bit for bit, and the run stops
early and evaluates when it is told to.
"""

import copy
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minibert.model import BertModel
from minibert.support import MiniBertError
from minibert.commands.trainer import (BudgetClock, Context, TrainingConfig, evaluation_line, load_checkpoint,
                                    progress_postfix, rows_for_rank, train)
from minibert.training import (SCHEDULES, AdamW, BertAdam, adamw_update, make_optimizer,
                               parameter_groups, progress_schedule, rise_then_fall, training_step,
                               warmup_then_linear_decay)
from helpers import FakeClock
from tiny_models import BagOfWordsClassifier, random_batch, small_config

CPU = Context(torch.device("cpu"))


class PredictEachToken:
    """A toy objective: each real token predicts its own id through the MLM
    head. Like every objective the loop runs, it returns loss *sums* and the
    number of items each averages over; the loop divides."""

    def counts(self, batch):
        return {"tokens": batch["attention_mask"].sum()}

    def losses(self, model, batch):
        logits = model(batch["input_ids"], batch["attention_mask"]).mlm_logits
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss_sum = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        correct = ((logits.argmax(-1) == labels) & (labels != -100)).sum()
        return {"tokens": (loss_sum, correct)}


def tiny_model(seed=0, dropout=0.0):
    torch.manual_seed(seed)
    config = small_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return BertModel(config, with_pooler=False, with_pair_head=False)


def toy_batches(count, rows=2, length=6, seed=0):
    """`count` micro-batches of random tokens; the last row of each is padded after 4 tokens."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        input_ids = torch.randint(5, 40, (rows, length), generator=generator)
        attention_mask = torch.ones(rows, length, dtype=torch.long)
        attention_mask[-1, 4:] = 0
        batches.append({"input_ids": input_ids.masked_fill(attention_mask == 0, 0), "attention_mask": attention_mask})
    return batches


def run(model, batches, path, **settings):
    """train() with a tiny configuration; `evaluate`, `resume`, `run_config` and
    `optimizer_factory` go to train(), the rest to TrainingConfig."""
    options = {k: settings.pop(k) for k in ("evaluate", "resume", "run_config", "optimizer_factory", "clock")
               if k in settings}
    config = TrainingConfig(**{"total_steps": 6, "learning_rate": 1e-2, "warmup_steps": 2, **settings})
    return train(model, batches, PredictEachToken(), config, CPU, path, progress=False, **options)


def plain_sgd(model):
    """lr 1 and no schedule: each step moves the weights by exactly minus the (clipped) gradient."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)


# ----------------------------------------------------------------------------
# The learning-rate schedule
# ----------------------------------------------------------------------------


def rates_of_schedule(peak, warmup_steps, total_steps, steps):
    """The learning rate each of `steps` optimizer steps uses under
    warmup_then_linear_decay (a plain function, no fixture: the coursework's
    lr-schedule test calls it too)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=peak)
    schedule = warmup_then_linear_decay(optimizer, warmup_steps=warmup_steps, total_steps=total_steps)
    rates = []
    for _ in range(steps):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return rates


def test_learning_rate_warms_up_linearly_then_decays_linearly_to_zero():
    rates = rates_of_schedule(1.0, warmup_steps=2, total_steps=6, steps=6)
    assert rates == pytest.approx([0.5, 1.0, 1.0, 0.75, 0.5, 0.25])


def test_without_warm_up_the_rate_starts_at_its_peak_and_falls_by_one_quarter_per_step():
    rates = rates_of_schedule(0.2, warmup_steps=0, total_steps=4, steps=4)
    # step s of 4 uses 0.2 * (4 - s) / 4
    assert rates == pytest.approx([0.2, 0.15, 0.1, 0.05])


def test_the_loop_logs_the_rate_of_the_next_step_after_each_step(tmp_path):
    summary = run(tiny_model(), toy_batches(6), tmp_path / "checkpoint.pt", log_every=1)
    # after step s (1-based) the schedule stands at s: warm-up 2, then 0.01 * (6 - s) / 4
    assert [record["lr"] for record in summary["history"]] == pytest.approx(
        [0.01, 0.01, 0.0075, 0.005, 0.0025, 0.0])


# ----------------------------------------------------------------------------
# The same rule over progress, on the step clock and on a time budget
# ----------------------------------------------------------------------------


def test_each_shape_rises_from_its_start_to_the_peak_and_falls_to_zero_at_the_end():
    # f(p) = min(s + (1 - s) p / w, (1 - p) / (1 - w))
    assert [rise_then_fall(p, 0.25) for p in (0, 0.125, 0.25, 0.625, 1)] == pytest.approx([0, 0.5, 1, 0.5, 0])
    assert [rise_then_fall(p, 0.5) for p in (0, 0.25, 0.5, 0.75, 1)] == pytest.approx([0, 0.5, 1, 0.5, 0])
    assert [rise_then_fall(p, 0.75, 0.25) for p in (0, 0.375, 0.75, 0.875, 1)] == pytest.approx(
        [0.25, 0.625, 1, 0.5, 0])
    assert [rise_then_fall(p, 0.0) for p in (0, 0.5, 1)] == pytest.approx([1, 0.5, 0])   # no warm-up
    assert SCHEDULES["one-cycle"] == (0.0, 0.5) and SCHEDULES["triangle"] == (0.25, 0.75)


def test_berts_step_schedule_is_the_rule_on_the_step_clock_its_warm_up_counting_the_step_being_taken():
    total, warmup = 10, 4
    rates = rates_of_schedule(1.0, warmup_steps=warmup, total_steps=total, steps=total)
    w = warmup / total
    assert rates[warmup:] == pytest.approx([rise_then_fall(step / total, w) for step in range(warmup, total)])
    assert rates[:warmup] == pytest.approx([rise_then_fall((step + 1) / total, w) for step in range(warmup)])


def test_other_shapes_on_the_step_clock_run_over_step_over_total_steps(tmp_path):
    summary = run(tiny_model(), toy_batches(4), tmp_path / "checkpoint.pt", total_steps=4, schedule="one-cycle",
                  log_every=1)
    # after step s the rate is 0.01 * f(s / 4): up to the peak at s = 2, down to 0 at s = 4
    assert [record["lr"] for record in summary["history"]] == pytest.approx([0.005, 0.01, 0.005, 0.0])


def rates_on_budget(clock, budget_seconds, steps, schedule="linear", warmup=0.0, groups=2):
    """The rate of each of `steps` steps on a BudgetClock, and the progress after each."""
    optimizer = torch.optim.SGD([{"params": [torch.nn.Parameter(torch.zeros(1))]} for _ in range(groups)], lr=1.0)
    budget = BudgetClock(budget_seconds, clock=clock)
    schedule = progress_schedule(optimizer, budget.tick, schedule, warmup)
    rates, progress = [], []
    for _ in range(steps):
        assert len({group["lr"] for group in optimizer.param_groups}) == 1       # one reading for every group
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
        progress.append(budget.progress)
    return rates, progress, optimizer.param_groups[0]["lr"]


def test_on_a_budget_the_rate_is_the_rule_at_the_time_spent_and_reaches_zero_when_the_budget_ends():
    # 10 s a step (one clock reading each, whatever the parameter groups), a budget of 80 s, warm-up 25%
    rates, progress, last = rates_on_budget(FakeClock(10), 80, steps=8, warmup=0.25)
    assert progress == pytest.approx([(s + 1) / 8 for s in range(8)])
    assert rates == pytest.approx([rise_then_fall(s / 8, 0.25) for s in range(8)])
    assert rates[:3] == pytest.approx([0, 0.5, 1])
    assert progress[-1] == 1 and last == 0.0            # the floor, exactly when the budget ends
    for shape in ("one-cycle", "triangle"):
        assert rates_on_budget(FakeClock(10), 80, steps=8, schedule=shape)[2] == 0.0


def test_the_budget_is_time_so_slower_steps_reach_the_floor_in_fewer_of_them():
    _, progress, last = rates_on_budget(FakeClock(20), 80, steps=4, schedule="one-cycle")
    assert progress == pytest.approx([0.25, 0.5, 0.75, 1.0]) and last == 0.0


def test_a_schedule_that_is_not_known_or_leaves_no_time_to_decay_is_a_minibert_error():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.raises(MiniBertError, match="schedule 'cosine': expected one of linear, one-cycle, triangle"):
        progress_schedule(optimizer, lambda step: 0.0, "cosine")
    with pytest.raises(MiniBertError, match=r"warmup 1: expected a fraction of the run in \[0, 1\)"):
        progress_schedule(optimizer, lambda step: 0.0, "linear", 1)
    with pytest.raises(MiniBertError, match="budget_seconds 0: expected a time > 0"):
        BudgetClock(0)


def test_a_run_on_a_budget_stops_when_it_is_spent_with_the_rate_at_zero(tmp_path, capsys):
    path = tmp_path / "checkpoint.pt"
    summary = run(tiny_model(), toy_batches(10), path, total_steps=None, budget_minutes=1.0, warmup_fraction=0.2,
                  log_every=1, clock=FakeClock(10))         # 10 s a step: 6 steps
    assert summary["end_step"] == 6 and summary["finished"] and summary["budget_seconds_used"] == 60
    assert [record["lr"] for record in summary["history"]] == pytest.approx(
        [0.01 * rise_then_fall(s / 6, 0.2) for s in range(1, 7)])
    assert summary["history"][-1]["lr"] == 0.0
    assert load_checkpoint(path)["step"] == 6 and load_checkpoint(path)["budget_seconds_used"] == 60
    assert "the budget of 1 minutes is spent at step 6: the learning rate is at its floor, 0" in capsys.readouterr().out
    with pytest.raises(MiniBertError, match=r"has spent its whole budget \(1 of 1 minutes\): no time is left"):
        run(tiny_model(), toy_batches(10), path, total_steps=None, budget_minutes=1.0, resume=True,
            clock=FakeClock(10))


def test_a_resumed_run_continues_the_schedule_from_the_progress_its_checkpoint_recorded(tmp_path):
    settings = dict(total_steps=None, budget_minutes=1.0, warmup_fraction=0.2, log_every=1, seed=7)
    batches = toy_batches(10)
    straight = tiny_model(dropout=0.1)
    uninterrupted = run(straight, batches, tmp_path / "straight.pt", clock=FakeClock(10), **settings)

    path = tmp_path / "stopped.pt"
    first = run(tiny_model(dropout=0.1), batches, path, max_minutes=0.0, clock=FakeClock(10), **settings)
    assert first["end_step"] == 1 and not first["finished"]
    assert load_checkpoint(path)["budget_seconds_used"] == 10
    # Resumed an hour later on another clock: the time between the two is not counted, the schedule goes on
    # from 10 s of 60, so each step has the rate the uninterrupted run gave it at the same progress.
    resumed = tiny_model(seed=99, dropout=0.1)
    second = run(resumed, batches, path, resume=True, clock=FakeClock(10, start=3600), **settings)
    assert second["start_step"] == 1 and second["end_step"] == 6 and second["budget_seconds_used"] == 60
    assert [r["lr"] for r in first["history"] + second["history"]] == pytest.approx(
        [r["lr"] for r in uninterrupted["history"]])
    # On a fake clock the steps take the same time in both runs, so here the weights agree bit for bit too
    # (on a real clock they cannot: the progress at each step differs between the two).
    for name, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name


def test_a_checkpoint_resumes_only_on_the_clock_it_was_made_on(tmp_path):
    path = tmp_path / "checkpoint.pt"
    run(tiny_model(), toy_batches(10), path, total_steps=2)
    with pytest.raises(MiniBertError, match="made without a time budget \\(--budget-minutes\\), this run has one"):
        run(tiny_model(), toy_batches(10), path, total_steps=None, budget_minutes=1.0, resume=True,
            clock=FakeClock(10))


# ----------------------------------------------------------------------------
# AdamW
# ----------------------------------------------------------------------------


def test_adamw_decays_weight_matrices_but_not_layer_norms_or_biases():
    model = BertModel(small_config())
    optimizer = make_optimizer(model, learning_rate=1e-3, weight_decay=0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    decay, no_decay = ({names[id(p)] for p in group["params"]} for group in optimizer.param_groups)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.01, 0.0]
    assert "encoder.layers.0.attention.query.weight" in decay and "embeddings.word_embeddings.weight" in decay
    assert "encoder.layers.0.attention.query.bias" in no_decay
    assert "encoder.layers.0.feed_forward_layer_norm.weight" in no_decay and "mlm_head.bias" in no_decay
    assert decay | no_decay == set(names.values()) and not decay & no_decay


def test_adamw_weight_decay_is_decoupled_from_the_gradient():
    # With a zero gradient Adam's step is 0 / (0 + eps) = 0, so all that moves
    # a weight is the decoupled decay: w <- w * (1 - lr * weight_decay) = 0.95 w.
    model = tiny_model()
    optimizer = make_optimizer(model, learning_rate=0.1, weight_decay=0.5)
    before = copy.deepcopy(model.state_dict())
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    after = model.state_dict()
    assert torch.allclose(after["encoder.layers.0.attention.query.weight"],
                          0.95 * before["encoder.layers.0.attention.query.weight"])
    assert torch.equal(after["encoder.layers.0.attention.query.bias"], before["encoder.layers.0.attention.query.bias"])
    assert torch.equal(after["embeddings.layer_norm.weight"], before["embeddings.layer_norm.weight"])


def test_bert_adam_takes_two_steps_worked_by_hand():
    # Google's AdamWeightDecayOptimizer, lr 0.1, betas (0.9, 0.999), eps 1e-6, weight decay 0.1,
    # one weight x = 1 with gradients 2, then 1. No bias correction: m and v are used as they are.
    #   step 1: m = 0.1 * 2 = 0.2              v = 0.001 * 4 = 0.004
    #           update = 0.2 / (sqrt(0.004) + 1e-6) + 0.1 * 1 = 3.1622277 + 0.1 = 3.2622277
    #           x = 1 - 0.1 * 3.2622277 = 0.6737772
    #   step 2: m = 0.9 * 0.2 + 0.1 * 1 = 0.28  v = 0.999 * 0.004 + 0.001 * 1 = 0.004996
    #           update = 0.28 / (sqrt(0.004996) + 1e-6) + 0.1 * 0.6737772 = 4.0287045
    #           x = 0.6737772 - 0.1 * 4.0287045 = 0.2709068
    x = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    optimizer = BertAdam([x], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1)
    expected = [(0.2, 0.004, 0.6737772339041066), (0.28, 0.004996, 0.2709067814873578)]
    for gradient, (m, v, weight) in zip((2.0, 1.0), expected):
        x.grad = torch.tensor([gradient], dtype=torch.float64)
        optimizer.step()
        state = optimizer.state[x]
        assert state["m"].item() == pytest.approx(m, abs=1e-12) and state["v"].item() == pytest.approx(v, abs=1e-12)
        assert x.item() == pytest.approx(weight, abs=1e-12)


TRAJECTORIES = Path(__file__).parent / "fixtures" / "adamw_trajectories.json"


@pytest.mark.parametrize("variant", ["adamw", "google"])
def test_exercise_adamw_update_follows_the_stored_trajectory(variant):
    # Five steps on one parameter (tests/fixtures/make_adamw_trajectories.py wrote them:
    # torch.optim.AdamW with bias correction, Google's equations without).
    record = json.loads(TRAJECTORIES.read_text())
    x = torch.tensor(record["x0"], dtype=torch.float64)
    m, v = torch.zeros_like(x), torch.zeros_like(x)
    for t, (g, expected) in enumerate(zip(record["gradients"], record[variant]), start=1):
        adamw_update(x, torch.tensor(g, dtype=torch.float64), m, v, t, record["lr"], tuple(record["betas"]),
                     record["eps"], record["weight_decay"], bias_correction=variant == "adamw")
        for name, value in (("m", m), ("v", v), ("x", x)):
            torch.testing.assert_close(value, torch.tensor(expected[name], dtype=torch.float64), rtol=0, atol=1e-12,
                                       msg=lambda text, name=name, t=t: f"{name} after step {t}: {text}")


def test_exercise_adamw_update_matches_torch_adamw_on_a_model():
    ours, theirs = BagOfWordsClassifier(seed=0), BagOfWordsClassifier(seed=0)
    optimizers = (AdamW(parameter_groups(ours, 0.01), lr=1e-3), torch.optim.AdamW(parameter_groups(theirs, 0.01),
                                                                                    lr=1e-3, eps=1e-6))
    for step in range(3):
        input_ids, attention_mask, token_type_ids = random_batch(40, seed=step)
        for model in (ours, theirs):
            torch.manual_seed(step)                                   # the same dropout in both
            model(input_ids, attention_mask, token_type_ids).pow(2).mean().backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda text, name=name: f"{name}: {text}")


def test_bert_adam_differs_from_adamw_at_step_one_exactly_by_the_bias_correction():
    # Both start from m = v = 0, so after one step m = (1 - beta1) g and v = (1 - beta2) g^2.
    # AdamW divides them by 1 - beta1 and 1 - beta2 (bias correction) before the same update;
    # BERT's Adam does not: its first step is about (1 - beta1) / sqrt(1 - beta2) = 3.16 times AdamW's.
    lr, weight_decay, eps, (beta1, beta2) = 0.01, 0.5, 1e-6, (0.9, 0.999)
    x0 = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    g = torch.tensor([0.3, -0.05, 2.0, 0.0], dtype=torch.float64)
    m, v = (1 - beta1) * g, (1 - beta2) * g * g
    decay = lr * weight_decay * x0                          # identical in both: decoupled, from x before the step
    moved = {}
    for name, make in (("adamw", torch.optim.AdamW), ("bert-adam", BertAdam)):
        x = torch.nn.Parameter(x0.clone())
        optimizer = make([x], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
        x.grad = g.clone()
        optimizer.step()
        moved[name] = (x0 - x).detach()
    corrected = lr * (m / (1 - beta1)) / ((v / (1 - beta2)).sqrt() + eps) + decay
    uncorrected = lr * m / (v.sqrt() + eps) + decay
    assert torch.allclose(moved["adamw"], corrected, rtol=0, atol=1e-15)
    assert torch.allclose(moved["bert-adam"], uncorrected, rtol=0, atol=1e-15)
    ratio = (moved["bert-adam"] - decay)[:3] / (moved["adamw"] - decay)[:3]   # g = 0 moves neither
    assert ratio.tolist() == pytest.approx([0.1 / math.sqrt(0.001)] * 3, rel=1e-3)     # 3.162...


def test_bert_adam_decays_the_same_parameters_as_adamw():
    model = BertModel(small_config())
    adamw = make_optimizer(model, learning_rate=1e-3, weight_decay=0.01)
    bert_adam = make_optimizer(model, learning_rate=1e-3, weight_decay=0.01, optimizer="bert-adam")
    assert isinstance(bert_adam, BertAdam) and isinstance(adamw, torch.optim.AdamW)
    for a, b in zip(adamw.param_groups, bert_adam.param_groups):
        assert a["weight_decay"] == b["weight_decay"] and [id(p) for p in a["params"]] == [id(p) for p in b["params"]]
    with pytest.raises(MiniBertError, match="^optimizer 'adam': expected one of adamw, bert-adam"):
        make_optimizer(model, learning_rate=1e-3, optimizer="adam")


def test_the_loop_trains_with_bert_adam_and_refuses_to_resume_it_with_adamw(tmp_path):
    path = tmp_path / "checkpoint.pt"
    summary = run(tiny_model(), toy_batches(6), path, total_steps=3, log_every=1, optimizer="bert-adam")
    assert summary["history"][-1]["tokens_loss"] < summary["history"][0]["tokens_loss"]
    state = load_checkpoint(path)
    assert state["optimizer_name"] == "BertAdam" and {"m", "v"} <= set(next(iter(state["optimizer"]["state"].values())))
    with pytest.raises(MiniBertError, match=r"holds the state of another optimizer \(BertAdam\) than this run's "
                                            r"\(AdamW\)"):
        run(tiny_model(), toy_batches(6), path, resume=True, total_steps=6)


# ----------------------------------------------------------------------------
# One step: the loss it averages, clipping, accumulation
# ----------------------------------------------------------------------------


def gradient_of_first_step(model, batch):
    """The gradient train() takes at step 1: loss sum over the step's tokens / their number."""
    model = copy.deepcopy(model).train()
    (loss_sum, correct), = PredictEachToken().losses(model, batch).values()
    n = int(batch["attention_mask"].sum())
    (loss_sum / n).backward()
    return {name: p.grad for name, p in model.named_parameters()}, loss_sum.item() / n, correct.item() / n


def test_the_logged_loss_and_accuracy_are_averages_over_the_tokens_of_the_step(tmp_path):
    model, batches = tiny_model(), toy_batches(1)
    _, loss, accuracy = gradient_of_first_step(model, batches[0])
    summary = run(model, batches, tmp_path / "checkpoint.pt", total_steps=1, log_every=1)
    record = summary["history"][0]
    assert record["tokens_loss"] == pytest.approx(loss) and record["tokens_accuracy"] == pytest.approx(100 * accuracy)


@pytest.mark.parametrize("max_grad_norm", [0.01, 0.0])
def test_the_gradient_is_clipped_to_max_grad_norm_and_keeps_its_direction(tmp_path, max_grad_norm):
    model, batches = tiny_model(), toy_batches(1)
    gradient, _, _ = gradient_of_first_step(model, batches[0])
    norm = torch.cat([g.flatten() for g in gradient.values()]).norm().item()
    assert norm > 10 * 0.01                                   # so a limit of 0.01 really clips
    before = copy.deepcopy(model.state_dict())
    run(model, batches, tmp_path / "checkpoint.pt", total_steps=1, max_grad_norm=max_grad_norm,
        optimizer_factory=plain_sgd)
    scale = max_grad_norm / norm if max_grad_norm else 1.0    # 0 means: do not clip
    for name, p in model.named_parameters():
        moved = before[name] - p.detach()
        assert torch.allclose(moved, scale * gradient[name], atol=1e-6), name
    moved_norm = torch.cat([(before[n] - p.detach()).flatten() for n, p in model.named_parameters()]).norm()
    assert moved_norm.item() == pytest.approx(max_grad_norm if max_grad_norm else norm, rel=1e-3)


def test_two_accumulated_micro_batches_equal_one_batch_of_both(tmp_path):
    small = toy_batches(6, rows=2)
    big = [{k: torch.cat([small[2 * i][k], small[2 * i + 1][k]]) for k in small[0]} for i in range(3)]
    accumulated, one_batch = tiny_model(), tiny_model()
    start = copy.deepcopy(one_batch.state_dict())
    run(accumulated, small, tmp_path / "a.pt", total_steps=3, grad_accum_steps=2)
    run(one_batch, big, tmp_path / "b.pt", total_steps=3, grad_accum_steps=1)
    for (name, p), q in zip(accumulated.named_parameters(), one_batch.parameters()):
        assert (p - q).abs().max() < 1e-6, name
    assert not torch.equal(one_batch.state_dict()["encoder.layers.0.attention.query.weight"],
                           start["encoder.layers.0.attention.query.weight"])      # it did train


# ----------------------------------------------------------------------------
# Checkpoints: resuming bit for bit
# ----------------------------------------------------------------------------


class Killed(Exception):
    """The process died here (what SIGKILL does to a real run)."""


class KilledAt:
    """Batches whose run is killed when the loop asks for micro-batch `index`."""

    def __init__(self, batches, index):
        self.batches, self.index = batches, index

    def __getitem__(self, i):
        if i >= self.index:
            raise Killed(f"killed before micro-batch {i}")
        return self.batches[i]


def test_a_run_killed_and_resumed_ends_with_exactly_the_weights_of_an_uninterrupted_one(tmp_path):
    # Dropout on and two micro-batches per step, so that resuming must restore
    # the optimizer, the schedule and the dropout seeds as well as the weights.
    settings = dict(total_steps=6, grad_accum_steps=2, seed=7)
    batches = toy_batches(12)
    straight = tiny_model(dropout=0.1)
    run(straight, batches, tmp_path / "straight.pt", **settings)

    path = tmp_path / "killed.pt"
    with pytest.raises(Killed):
        run(tiny_model(dropout=0.1), KilledAt(batches, 3 * 2), path, checkpoint_every=1, **settings)
    assert load_checkpoint(path)["step"] == 3
    resumed = tiny_model(seed=99, dropout=0.1)               # other weights: the checkpoint must replace them
    summary = run(resumed, batches, path, resume=True, **settings)
    assert summary["start_step"] == 3 and summary["end_step"] == 6
    for name, value in straight.state_dict().items():
        assert torch.equal(resumed.state_dict()[name], value), name


def test_resuming_with_a_changed_flag_names_the_flag_and_both_values(tmp_path):
    path = tmp_path / "checkpoint.pt"
    settings = {"--lr": 0.01, "--train": "t.tsv (10 bytes, sha256 ab)"}
    run(tiny_model(), toy_batches(6), path, total_steps=2, run_config={"seed": 0, "flags": settings})
    for flag, value in (("--lr", 0.02), ("--train", "t.tsv (11 bytes, sha256 cd)")):
        with pytest.raises(MiniBertError, match=re.escape(f"with {flag} {settings[flag]!r}, this run has {flag} "
                                                          f"{value!r}")):
            run(tiny_model(), toy_batches(6), path, resume=True, total_steps=2,
                run_config={"seed": 0, "flags": {**settings, flag: value}})
    # a flag the checkpoint did not record (an older checkpoint) is not compared
    run(tiny_model(), toy_batches(6), path, resume=True, total_steps=2,
        run_config={"seed": 0, "flags": {**settings, "--new-flag": 1}})


def test_resuming_with_another_optimizer_is_a_minibert_error(tmp_path):
    path = tmp_path / "checkpoint.pt"
    run(tiny_model(), toy_batches(6), path, total_steps=2, optimizer_factory=plain_sgd)
    with pytest.raises(MiniBertError, match="holds the state of another optimizer"):
        run(tiny_model(), toy_batches(6), path, resume=True, total_steps=2)        # AdamW: no 'betas' saved


def test_a_loss_that_becomes_nan_stops_the_run_naming_the_step_and_saves_nothing(tmp_path):
    path = tmp_path / "checkpoint.pt"
    with pytest.raises(MiniBertError, match=r"training stopped at step \d+: .*try a lower learning rate"):
        run(tiny_model(), toy_batches(6), path, learning_rate=1e30, warmup_steps=0, max_grad_norm=0.0)
    assert not path.exists()


def test_weights_that_became_nan_are_never_saved(tmp_path):
    path = tmp_path / "checkpoint.pt"

    class Poisoning(torch.optim.SGD):            # a step that leaves NaN weights behind a finite loss
        def step(self, closure=None):
            super().step(closure)
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(float("nan"))

    def poison(model):
        optimizer = Poisoning(model.parameters(), lr=1.0)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    with pytest.raises(MiniBertError, match="training stopped at step 1: .* holds NaN or infinite values"):
        run(tiny_model(), toy_batches(6), path, total_steps=1, optimizer_factory=poison)
    assert not path.exists()


def test_resuming_with_other_settings_or_without_a_checkpoint_is_a_minibert_error(tmp_path):
    path = tmp_path / "checkpoint.pt"
    with pytest.raises(MiniBertError, match="--resume: no checkpoint at"):
        run(tiny_model(), toy_batches(6), path, resume=True)
    run(tiny_model(), toy_batches(6), path, run_config={"seed": 0, "batch_size": 2})
    with pytest.raises(MiniBertError, match="was made with batch_size=2, this run has 4"):
        run(tiny_model(), toy_batches(6), path, resume=True, run_config={"seed": 0, "batch_size": 4})
    other_model = BertModel(small_config(hidden_size=16), with_pooler=False, with_pair_head=False)
    with pytest.raises(MiniBertError, match="does not fit this model"):
        run(other_model, toy_batches(6), path, resume=True)


def test_a_damaged_checkpoint_is_a_one_line_minibert_error(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"half a checkpoint")
    with pytest.raises(MiniBertError, match="checkpoint.pt: cannot read training checkpoint"):
        load_checkpoint(path)


# ----------------------------------------------------------------------------
# Stopping early and evaluating
# ----------------------------------------------------------------------------


def test_evaluate_runs_every_eval_every_steps_and_after_the_last(tmp_path):
    calls = []

    def evaluate(model):
        calls.append(model.training)
        return {"score": float(len(calls))}

    summary = run(tiny_model(), toy_batches(7), tmp_path / "checkpoint.pt", total_steps=7, eval_every=3,
                  evaluate=evaluate)
    held_out = [(r["step"], r["heldout_score"]) for r in summary["history"] if "heldout_score" in r]
    assert held_out == [(3, 1.0), (6, 2.0), (7, 3.0)]
    assert summary["heldout"] == {"score": 3.0}


def test_an_evaluation_line_names_the_set_with_counts_as_integers_and_percentages_to_two_decimals():
    metrics = {"f1": 0.0, "accuracy": 87.5, "masked_loss": 2.345678, "masked_tokens": 39699, "per_type": {}}
    assert evaluation_line(30, "dev.tsv", metrics) == ("step 30: dev.tsv f1 0.00, dev.tsv accuracy 87.50, "
                                                       "dev.tsv masked_loss 2.346, dev.tsv masked_tokens 39,699")


def test_the_progress_line_shows_accuracy_in_percent_and_tokens_per_second_as_a_whole_number():
    record = {"step": 20, "lr": 9.5e-05, "tokens_per_second": 1968.7, "mlm_loss": 7.12345, "mlm_accuracy": 1.6327}
    assert progress_postfix(record) == {"lr": "9.5e-05", "tokens_per_second": "1,969", "mlm_loss": "7.12",
                                        "mlm_accuracy": "1.63%"}


def test_the_evaluation_line_is_printed_under_the_configured_name(tmp_path, capsys):
    run(tiny_model(), toy_batches(2), tmp_path / "checkpoint.pt", total_steps=2, eval_every=2,
        evaluate=lambda model: {"accuracy": 50.0}, eval_name="dev.tsv")
    assert "step 2: dev.tsv accuracy 50.00" in capsys.readouterr().out.splitlines()


def test_max_minutes_stops_after_the_step_that_ran_out_of_time_with_a_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.pt"
    steps_evaluated = []
    summary = run(tiny_model(), toy_batches(6), path, max_minutes=0.0, eval_every=100,
                  evaluate=lambda model: steps_evaluated.append(1) or {"score": 0.0})
    assert summary["end_step"] == 1 and load_checkpoint(path)["step"] == 1
    assert steps_evaluated == [1]                                      # evaluated before stopping


def test_each_process_takes_every_world_size_th_row_from_its_rank():
    batch = {"input_ids": torch.arange(5)}
    assert rows_for_rank(batch, Context(torch.device("cpu"), rank=0, world_size=2))["input_ids"].tolist() == [0, 2, 4]
    assert rows_for_rank(batch, Context(torch.device("cpu"), rank=1, world_size=2))["input_ids"].tolist() == [1, 3]
    assert rows_for_rank(batch, CPU) is batch


# ----------------------------------------------------------------------------
# Exercise of assignment 2 (docs/coursework.md)
# ----------------------------------------------------------------------------


def test_exercise_lr_schedule():
    rates = rates_of_schedule(1.0, warmup_steps=4, total_steps=10, steps=12)
    # up over 4 steps (1/4, 2/4, 3/4, 1), then down by 1/6 a step to 0 at step 10, and 0 after
    expected = [0.25, 0.5, 0.75, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0, 0.0]
    assert rates == pytest.approx(expected)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-4)
    warmup_then_linear_decay(optimizer, warmup_steps=0, total_steps=4)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(2e-4)      # no warm-up: the full rate at step 0


def test_exercise_training_step_is_the_mean_cross_entropy_clipped_then_one_step():
    from minibert.finetuning import Objective
    from minibert.tasks.classification import ClassificationTask
    model = BagOfWordsClassifier(seed=3)          # a stand-in: this exercise needs none of the model's
    copy_of_model = copy.deepcopy(model)
    input_ids, attention_mask, token_type_ids = random_batch(40, batch=3, length=11, seed=4)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
             "labels": torch.tensor([0, 1, 1])}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    torch.manual_seed(0)
    stats = training_step(model, [batch], Objective(ClassificationTask("sst2")), optimizer, scheduler,
                          max_grad_norm=0.01)
    # By hand on the copy: the same dropout draws, L = mean -log p(gold), gradients scaled to norm 0.01.
    copy_of_model.train()
    torch.manual_seed(0)
    logits = copy_of_model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    expected_loss = -logits.float().log_softmax(-1)[torch.arange(3), batch["labels"]].mean()
    expected_loss.backward()
    gradients = [p.grad for p in copy_of_model.parameters()]
    norm = torch.sqrt(sum((g ** 2).sum() for g in gradients))
    assert norm > 0.01                                             # so clipping matters here
    loss_sum, correct = stats["classification"]
    assert loss_sum.item() / 3 == pytest.approx(expected_loss.item(), rel=1e-6)
    assert int(correct) == int((logits.argmax(-1) == batch["labels"]).sum())
    for (name, after), before, g in zip(model.named_parameters(), copy_of_model.parameters(), gradients):
        torch.testing.assert_close(after, before - 0.5 * g * (0.01 / (norm + 1e-6)), rtol=1e-4, atol=1e-7,
                                   msg=lambda text, name=name: f"{name} after the step: {text}")
        assert after.grad is None                                  # the step leaves no gradient behind
    assert scheduler.get_last_lr() == [0.25]                       # the schedule moved on by one step


def test_exercise_training_step_adds_micro_batches_up_to_one_batch_twice_as_large():
    from minibert.finetuning import Objective
    from minibert.tasks.classification import ClassificationTask
    objective = Objective(ClassificationTask("sst2"))
    input_ids, attention_mask, token_type_ids = random_batch(40, batch=4, length=9, seed=6)
    whole = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
             "labels": torch.tensor([0, 1, 1, 0])}
    halves = [{k: v[:2] for k, v in whole.items()}, {k: v[2:] for k, v in whole.items()}]
    results = []
    for micro_batches in ([whole], halves):
        model = BagOfWordsClassifier(seed=3).eval()               # no dropout: the two must agree
        model.train = lambda mode=True, model=model: model       # keep it in eval mode through the step
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        training_step(model, micro_batches, objective, optimizer, scheduler, max_grad_norm=0)
        results.append([p.detach().clone() for p in model.parameters()])
    for one, two in zip(*results):
        torch.testing.assert_close(one, two, rtol=1e-5, atol=1e-7)


def test_a_resume_with_another_model_config_names_only_the_fields_that_differ(tmp_path):
    from minibert.commands.trainer import check_same_run
    saved = {"model_config": {**small_config().to_dict()}, "batch_size": 2}
    changed = {"model_config": {**small_config(hidden_size=16, num_hidden_layers=3).to_dict()}, "batch_size": 2}
    with pytest.raises(MiniBertError) as caught:
        check_same_run(tmp_path / "checkpoint.pt", saved, changed)
    assert str(caught.value) == (f"--resume: {tmp_path / 'checkpoint.pt'} was made with the model_config "
                                 f"hidden_size=8, num_hidden_layers=2, this run has hidden_size=16, "
                                 f"num_hidden_layers=3; resume with the same settings, or start a new run in "
                                 f"another folder")
