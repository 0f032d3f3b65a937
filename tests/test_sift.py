"""SiFT (minibert/sift.py): the hook leaves the clean model alone, the
perturbation's initial scale, the ascent step and the loss against hand
computations on a tiny model, frozen parameters during the ascent, DDP and
bf16, the other tasks, and finetune.py --sift end to end."""

import json
import math

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import error_line, run_script_in_process
from minibert import sift
from minibert.checkpoints import save_pretrained
from minibert.support import MiniBertError
from minibert.finetuning import TaskModel
from minibert.model import BertModel
from minibert.heads import IGNORE_INDEX
from minibert.sift import SiftConfig, SiftObjective, initial_delta, symmetric_kl
from minibert.tasks.classification import ClassificationTask
from minibert.tasks.ner import NerTask
from minibert.tasks.squad import SquadTask
from tiny_models import (FILLER, NEGATIVE, POSITIVE, make_readable, random_batch, sentiment_rows, tiny_config,
                         write_sst2, write_vocab)

VOCAB = 40
HEAD_STD = 0.5


def tiny_task_model(task=None, model_type="bert", seed=0, **overrides):
    """A readable random encoder and a head with large weights, so the
    outputs are far from uniform and the divergences are not tiny."""
    task = task or ClassificationTask("sst2")
    torch.manual_seed(seed)
    config = tiny_config(VOCAB, model_type, **overrides)
    encoder = make_readable(BertModel(config, with_mlm_head=False, with_pair_head=False), seed)
    head = task.make_head(config)
    for parameter in head.parameters():
        nn.init.normal_(parameter, std=HEAD_STD)
    return TaskModel(encoder, head, task.uses_pooler), task


def sst2_batch(seed=0):
    input_ids, attention_mask, token_type_ids = random_batch(VOCAB, batch=3, length=11, seed=seed)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
            "labels": torch.tensor([0, 1, 1])}


def normalised_by_hand(model, batch):
    """LN0 of the embedding sum: each token's vector to mean 0, variance 1 (eps 1e-7)."""
    e = model.base_model.embeddings
    T = batch["input_ids"].shape[1]
    x = (e.word_embeddings.weight[batch["input_ids"]] + e.position_embeddings.weight[:T]
         + e.token_type_embeddings.weight[batch["token_type_ids"]])                        # (B, T, E)
    mean = x.mean(-1, keepdim=True)
    variance = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(variance + 1e-7)


def logits_reading(model, batch, layer_norm_input):
    """The TaskModel's logits with the embedding LayerNorm reading
    `layer_norm_input` instead of the embedding sum: the embeddings' forward
    replaced by hand (no SiFT hook involved)."""
    e = model.base_model.embeddings
    ln = e.layer_norm

    def replaced(input_ids, token_type_ids):
        x = e.dropout(F.layer_norm(layer_norm_input, ln.normalized_shape, ln.weight, ln.bias, ln.eps))
        return x if e.projection is None else e.projection(x)

    e.forward = replaced
    try:
        return sift.forward(model, batch)
    finally:
        del e.forward


def ascent_by_hand(model, batch, clean_logits, x_hat, delta, step_size):
    """delta + eta g / (1e-6 + max_e |g|), g the gradient of sum_rows CE(p, q(delta))
    (the only SKL term whose gradient reaches delta when p is a constant)."""
    delta = delta.clone().requires_grad_(True)
    p = clean_logits.detach().softmax(-1)
    log_q = logits_reading(model, batch, x_hat + delta).log_softmax(-1)
    (g,) = torch.autograd.grad(-(p * log_q).sum(), delta)
    return (delta + step_size * g / (1e-6 + g.abs().amax(-1, keepdim=True))).detach(), g


# ----------------------------------------------------------------------------
# The hook
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["bert", "albert"])
def test_clean_forward_is_exactly_unchanged_with_the_hook_installed(model_type):
    model, task = tiny_task_model(model_type=model_type)
    batch = sst2_batch()
    model.eval()
    before = sift.forward(model, batch)
    model.train()
    torch.manual_seed(7)
    before_with_dropout = sift.forward(model, batch)

    objective = SiftObjective(task)
    perturbation = objective.attach(model)
    assert objective.attach(model) is perturbation                          # installed once
    torch.manual_seed(7)
    assert torch.equal(sift.forward(model, batch), before_with_dropout)     # the hook draws nothing
    model.eval()
    assert torch.equal(sift.forward(model, batch), before)                  # hook off
    with perturbation.capturing():
        assert torch.equal(sift.forward(model, batch), before)              # capturing
    objective.losses(model, batch)
    assert torch.equal(sift.forward(model, batch), before)                  # off again after a SiFT step
    objective.remove_hooks()
    assert not model.base_model.embeddings.layer_norm._forward_pre_hooks


def test_the_hook_captures_the_normalised_embedding_sum_and_feeds_it_plus_delta():
    model, task = tiny_task_model()
    model.eval()
    batch = sst2_batch()
    perturbation = SiftObjective(task).attach(model)
    seen = []
    model.base_model.embeddings.layer_norm.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]))
    with perturbation.capturing():
        sift.forward(model, batch)
    x_hat = normalised_by_hand(model, batch)
    assert torch.allclose(perturbation.normalized, x_hat, atol=1e-5)
    assert torch.allclose(x_hat.mean(-1), torch.zeros(3, 11), atol=1e-5)
    assert torch.allclose(x_hat.var(-1, unbiased=False), torch.ones(3, 11), atol=1e-4)
    delta = 0.01 * torch.randn(x_hat.shape)
    with perturbation.perturbed(delta):
        perturbed = sift.forward(model, batch)
    assert torch.equal(seen[-1], perturbation.normalized + delta)           # what the LayerNorm read
    assert torch.allclose(perturbed, logits_reading(model, batch, x_hat + delta), atol=1e-5)


def test_the_perturbed_input_is_scale_invariant():
    """Embedding tables 10 times larger: the same normalised input, so the
    same perturbation means the same thing (the point of SiFT, [DeBERTa] 3.3)."""
    model, task = tiny_task_model()
    model.eval()
    batch = sst2_batch()
    perturbation = SiftObjective(task).attach(model)
    with perturbation.capturing():
        sift.forward(model, batch)
    small = perturbation.normalized
    with torch.no_grad():
        for table in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            getattr(model.base_model.embeddings, table).weight.mul_(10)
    with perturbation.capturing():
        sift.forward(model, batch)
    assert torch.allclose(perturbation.normalized, small, atol=1e-5)


def test_a_model_without_embeddings_layer_norm_is_a_one_line_error():
    with pytest.raises(MiniBertError, match="no embeddings.layer_norm"):
        SiftObjective(ClassificationTask("sst2")).attach(nn.Linear(3, 2))


# ----------------------------------------------------------------------------
# Initial perturbation, ascent step, symmetric KL
# ----------------------------------------------------------------------------


def test_initial_perturbation_is_normal_with_std_sigma_clipped_at_two_sigma():
    torch.manual_seed(0)
    sigma = 0.03
    delta = initial_delta((64, 128, 32), sigma)                 # 262,144 values, one per token and dimension
    assert delta.dtype == torch.float32 and delta.shape == (64, 128, 32)
    Phi2 = 0.5 * (1 + math.erf(2 / math.sqrt(2)))               # P(z < 2)
    phi2 = math.exp(-2) / math.sqrt(2 * math.pi)                # density at 2
    clipped_variance = (2 * Phi2 - 1) - 4 * phi2 + 8 * (1 - Phi2)   # E[clip(z, -2, 2)^2], about 0.9205
    assert float(delta.std()) == pytest.approx(sigma * math.sqrt(clipped_variance), rel=0.01)
    assert float(delta.std(-1).mean()) == pytest.approx(sigma * math.sqrt(clipped_variance), rel=0.02)  # per token
    assert abs(float(delta.mean())) < 1e-3 * sigma * 100
    assert float(delta.abs().max()) == pytest.approx(2 * sigma)
    assert float((delta.abs() >= 2 * sigma * (1 - 1e-6)).float().mean()) == pytest.approx(2 * (1 - Phi2), abs=0.003)


@pytest.mark.parametrize("model_type", ["bert", "albert"])
def test_the_ascent_step_moves_delta_by_eta_times_the_per_token_max_normalised_gradient(model_type):
    model, task = tiny_task_model(model_type=model_type)
    model.eval()
    batch = sst2_batch()
    step_size = 0.05
    objective = SiftObjective(task, SiftConfig(step_size=step_size))
    perturbation = objective.attach(model)
    with perturbation.capturing():
        clean = sift.forward(model, batch)
    x_hat = perturbation.normalized                  # = normalised_by_hand (checked above), to the last bit
    delta0 = 0.1 * torch.randn(x_hat.shape, generator=torch.Generator().manual_seed(1))

    delta1 = objective.ascend(model, batch, clean, delta0)

    expected, g = ascent_by_hand(model, batch, clean, x_hat, delta0, step_size)
    assert delta1.dtype == torch.float32 and not delta1.requires_grad
    assert torch.allclose(delta1, expected, atol=1e-5)   # two backward runs: summation order differs by CPU
    moved = (delta1 - delta0) / step_size                                   # g / (1e-6 + max|g|)
    real = batch["attention_mask"].bool()
    largest = g.abs().amax(-1)[real]
    assert torch.allclose(moved.abs().amax(-1)[real], largest / (1e-6 + largest), atol=1e-4)  # at most eta
    assert float(moved.abs().amax(-1)[real].min()) > 0.9                    # ... and nearly eta on every token
    assert torch.equal(delta1[~real], delta0[~real])                        # padding gets no gradient
    cosine = F.cosine_similarity(moved[real], g[real], dim=-1)
    assert torch.allclose(cosine, torch.ones_like(cosine), atol=1e-5)       # along the gradient, per token

    def divergence(delta):
        with torch.no_grad():
            return float(symmetric_kl(logits_reading(model, batch, x_hat + delta), clean).sum())
    assert divergence(delta1) > divergence(delta0)                          # an ascent step


def test_the_ascent_step_leaves_parameter_gradients_alone_and_unfreezes_them():
    model, task = tiny_task_model()
    model.train()
    batch = sst2_batch()
    objective = SiftObjective(task)
    perturbation = objective.attach(model)
    with perturbation.capturing():
        clean = sift.forward(model, batch)
    objective.ascend(model, batch, clean, 0.01 * torch.randn(perturbation.normalized.shape))
    assert all(p.grad is None for p in model.parameters())                  # nothing accumulated
    assert all(p.requires_grad for p in model.parameters())                 # frozen only during the step
    task.losses(clean, batch)["classification"][0].backward()               # the clean graph still trains
    assert all(p.grad is not None for p in model.parameters())


def test_a_non_finite_gradient_skips_the_ascent_step():
    delta = torch.ones(1, 2, 3)
    grad = torch.tensor([[[1.0, float("nan"), 0.0], [1.0, 2.0, 3.0]]])
    assert torch.equal(sift.ascent_step(delta, grad, 0.1), delta)
    assert torch.allclose(sift.ascent_step(delta, torch.tensor([[[1.0, -2.0, 0.0], [0.0, 0.0, 4.0]]]), 0.1),
                          torch.tensor([[[1.05, 0.9, 1.0], [1.0, 1.0, 1.1]]]), atol=1e-6)


def test_symmetric_kl_is_kl_both_ways_with_the_official_gradients():
    rng = np.random.default_rng(0)
    clean_np, perturbed_np = 2 * rng.standard_normal((5, 4)), 2 * rng.standard_normal((5, 4))
    clean = torch.tensor(clean_np, dtype=torch.float32, requires_grad=True)
    perturbed = torch.tensor(perturbed_np, dtype=torch.float32, requires_grad=True)
    value = symmetric_kl(perturbed, clean)

    def softmax(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    p, q = softmax(clean_np), softmax(perturbed_np)
    expected = (p * np.log(p / q)).sum(-1) + (q * np.log(q / p)).sum(-1)    # KL(p||q) + KL(q||p)
    assert np.allclose(value.detach().numpy(), expected, atol=1e-5)
    value.sum().backward()
    assert np.allclose(perturbed.grad.numpy(), q - p, atol=1e-6)            # the official code's gradients
    assert np.allclose(clean.grad.numpy(), p - q, atol=1e-6)
    assert torch.allclose(symmetric_kl(clean, perturbed), value, atol=1e-6)  # symmetric
    assert torch.allclose(symmetric_kl(clean, clean), torch.zeros(5), atol=1e-6)


# ----------------------------------------------------------------------------
# The whole objective
# ----------------------------------------------------------------------------


def test_parameter_gradients_equal_the_task_loss_plus_lambda_times_the_adversarial_loss_by_hand():
    model, task = tiny_task_model()
    model.eval()                                              # no dropout: the hand path draws the same delta
    batch = sst2_batch()
    config = SiftConfig(lambda_=2.0, init_scale=0.02, step_size=0.05)
    objective = SiftObjective(task, config)
    torch.manual_seed(5)
    terms = objective.losses(model, batch)
    counts = objective.counts(batch)
    assert counts == {"classification": 3, "sift": 3} and set(terms) == set(counts)
    loss = sum(loss_sum / counts[term] for term, (loss_sum, _) in terms.items())   # as training.training_step sums
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    objective.remove_hooks()

    torch.manual_seed(5)
    clean = sift.forward(model, batch)
    x_hat = normalised_by_hand(model, batch).detach()
    delta0 = (torch.randn(x_hat.shape) * 0.02).clamp(-0.04, 0.04)
    delta1, _ = ascent_by_hand(model, batch, clean, x_hat, delta0, 0.05)
    adversarial = logits_reading(model, batch, x_hat + delta1)
    log_p, log_q = clean.log_softmax(-1), adversarial.log_softmax(-1)
    p, q = log_p.exp().detach(), log_q.exp().detach()
    skl = (p * (log_p.detach() - log_q)).sum(-1) + (q * (log_q.detach() - log_p)).sum(-1)   # (B,)
    hand = F.cross_entropy(clean, batch["labels"]) + 2.0 * skl.mean()
    hand.backward()

    assert float(terms["sift"][0].detach()) / 3 == pytest.approx(2.0 * float(skl.mean().detach()), rel=1e-4)
    assert float(skl.mean().detach()) > 1e-4                           # a real adversarial term, not a zero
    hand_grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)

    def distance(a, b):                                       # relative, over the whole model
        return math.sqrt(sum(float((a[n] - b[n]).pow(2).sum()) for n in a) /
                         sum(float(b[n].pow(2).sum()) for n in b))
    assert distance(grads, hand_grads) < 1e-5
    # Had the ascent step's backward reached the parameters, their gradients
    # would hold its gradient too: far beyond that tolerance.
    p_clean = clean.detach().softmax(-1)
    leak = -(p_clean * logits_reading(model, batch, x_hat + delta0).log_softmax(-1)).sum()
    leak.backward()
    leaked = {name: hand_grads[name] + (0 if p.grad is None else p.grad) for name, p in model.named_parameters()}
    assert distance(leaked, hand_grads) > 1e-3


def test_losses_through_a_ddp_wrapper_give_the_plain_models_gradients(tmp_path):
    """The model commands.trainer.train passes under torchrun is a DistributedDataParallel
    wrapper: the same losses and gradients, and a second step does not trip
    DDP's reducer (it would if the ascent step had fired its gradient hooks)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    batch = sst2_batch()

    def one_step(network, model, objective, seed):
        torch.manual_seed(seed)
        terms = objective.losses(network, batch)
        counts = objective.counts(batch)
        sum(s / counts[t] for t, (s, _) in terms.items()).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return grads

    plain, task = tiny_task_model()
    plain.train()
    expected = [one_step(plain, plain, SiftObjective(task), seed) for seed in (1, 2)]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        model, task = tiny_task_model()
        model.train()
        network = DistributedDataParallel(model)
        objective = SiftObjective(task)
        got = [one_step(network, model, objective, seed) for seed in (1, 2)]
    finally:
        dist.destroy_process_group()
    for step_expected, step_got in zip(expected, got):
        for a, b in zip(step_expected, step_got):
            assert torch.allclose(a, b, atol=1e-6)


def test_a_step_under_bf16_autocast_keeps_delta_float32_and_gives_finite_gradients(monkeypatch):
    model, task = tiny_task_model()
    model.train()
    batch = sst2_batch()
    seen = []
    original = sift.ascent_step
    monkeypatch.setattr(sift, "ascent_step", lambda delta, grad, eta: seen.append((delta, grad)) or
                        original(delta, grad, eta))
    objective = SiftObjective(task)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.eval()
        clean = sift.forward(model, batch)
        objective.attach(model)
        assert torch.equal(sift.forward(model, batch), clean)     # the hook changes nothing under autocast
        model.train()
        terms = objective.losses(model, batch)
    (delta, grad), = seen
    assert delta.dtype == torch.float32 and grad.dtype == torch.float32 and torch.isfinite(grad).all()
    loss = sum(s / 3 for s, _ in terms.values())
    assert torch.isfinite(loss) and float(terms["sift"][0].detach()) >= 0
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def ner_batch():
    input_ids, attention_mask, token_type_ids = random_batch(VOCAB, batch=3, length=11, seed=2)
    labels = torch.randint(0, 3, (3, 11), generator=torch.Generator().manual_seed(3))
    labels[attention_mask == 0] = IGNORE_INDEX
    labels[:, 0] = IGNORE_INDEX                      # [CLS]
    labels[:, 2::3] = IGNORE_INDEX                   # continuation pieces
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
            "labels": labels}


def squad_batch():
    input_ids, attention_mask, token_type_ids = random_batch(VOCAB, batch=3, length=11, seed=2)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
            "start_positions": torch.tensor([2, 5, 0]), "end_positions": torch.tensor([3, 6, 0])}


def test_token_tasks_compare_labelled_tokens_and_squad_compares_positions_without_padding():
    batch = ner_batch()
    logits = torch.randn(3, 11, 3)
    rows, weight = NerTask(labels=["O", "B-PER", "I-PER"]).distributions(logits, batch)
    assert weight == 1.0 and rows.shape == (int((batch["labels"] != IGNORE_INDEX).sum()), 3)
    assert torch.equal(rows, logits[batch["labels"] != IGNORE_INDEX])

    squad = SquadTask()
    batch = squad_batch()
    logits = torch.randn(3, 11, 2)
    rows, weight = squad.distributions(logits, batch)
    assert weight == 0.5 and rows.shape == (6, 11)                          # start and end, over positions
    assert torch.equal(rows[:3, :4], logits[:, :4, 0]) and torch.equal(rows[3:, :4], logits[:, :4, 1])
    assert float(rows.softmax(-1)[2, 4:].sum()) == 0.0                      # padding: no probability
    other = logits.clone()
    other[2, 4:] += 5.0                                                     # change only padding positions
    other_rows, _ = squad.distributions(other, batch)
    assert torch.equal(symmetric_kl(other_rows, rows)[[2, 5]], torch.zeros(2))
    assert torch.isfinite(symmetric_kl(other_rows, rows)).all()


@pytest.mark.parametrize("task,batch,term", [(NerTask(labels=["O", "B-PER", "I-PER"]), ner_batch(), "ner"),
                                             (SquadTask(), squad_batch(), "span")])
def test_sift_trains_token_and_span_tasks(task, batch, term):
    model, task = tiny_task_model(task)
    model.train()
    objective = SiftObjective(task)
    terms = objective.losses(model, batch)
    counts = objective.counts(batch)
    assert set(terms) == set(counts) == {term, "sift"} and counts["sift"] == counts[term]
    assert float(terms["sift"][0].detach()) > 0
    sum(s / counts[t] for t, (s, _) in terms.items()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_sift_settings_are_checked():
    assert SiftConfig() == SiftConfig(lambda_=5.0, init_scale=1e-2, step_size=1e-4)   # the official defaults
    for bad in (dict(lambda_=0), dict(init_scale=-1.0), dict(step_size=float("nan")), dict(lambda_="5")):
        with pytest.raises(MiniBertError, match="SiFT setting"):
            SiftConfig(**bad)


# ----------------------------------------------------------------------------
# finetune.py --sift
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_sst2(tmp_path_factory):
    root = tmp_path_factory.mktemp("sift")
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)
    save_pretrained(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False), root / "base")
    return root, write_sst2(root / "train.tsv", sentiment_rows(320, seed=0)), write_sst2(root / "dev.tsv",
                                                                                        sentiment_rows(64, seed=1))


def test_finetune_with_sift_learns_the_toy_task_and_records_the_settings(toy_sst2, capsys):
    root, train, dev = toy_sst2
    out = root / "sift-run"
    code, captured = run_script_in_process(
        capsys, "finetune.py", "--task", "sst2", "--model", root / "base", "--train", train, "--eval", dev,
        "--epochs", "3", "--batch-size", "32", "--max-seq-len", "32", "--lr", "1e-2", "--sift",
        "--sift-lambda", "2", "--sift-step-size", "1e-3", "--output", out, "--json", root / "summary.json", "--quiet")
    assert code == 0, captured.err
    record = json.loads((out / "task.json").read_text())
    assert record["sift"] == {"lambda": 2.0, "init_scale": 0.01, "step_size": 0.001, "loss": "symmetric-kl",
                              "ascent_steps": 1, "perturbed": SiftConfig().to_dict()["perturbed"]}
    summary = json.loads((root / "summary.json").read_text())
    logged = [r for r in summary["history"] if "classification_loss" in r]
    assert len(logged) == 3 and all("sift_loss" in r and r["sift_loss"] > 0 for r in logged)
    assert logged[-1]["classification_loss"] < 0.5 * logged[0]["classification_loss"]     # the loss falls
    assert summary["best"]["accuracy"] >= 90.0
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", out, "--eval", dev, "--quiet")
    assert code == 0 and "accuracy" in captured.out                         # the folder loads as any other


@pytest.mark.parametrize("extra,fragment", [
    (["--sift", "--sift-lambda", "0"], "argument --sift-lambda: expected a number > 0"),
    (["--sift", "--sift-init-scale", "-0.1"], "argument --sift-init-scale: expected a number > 0"),
    (["--sift", "--sift-step-size", "nan"], "argument --sift-step-size: expected a number > 0"),
    (["--sift-lambda", "2"], "--sift-lambda needs --sift"),
    (["--sift-step-size", "1e-3"], "--sift-step-size needs --sift"),
])
def test_bad_sift_flags_are_usage_errors(toy_sst2, capsys, extra, fragment):
    root, train, _ = toy_sst2
    code, captured = run_script_in_process(capsys, "finetune.py", "--task", "sst2", "--model", root / "base",
                                           "--train", train, "--output", root / "never", *extra, "--quiet")
    assert code == 2 and fragment in error_line(code, captured), captured.err
    assert not (root / "never" / "task.json").exists()


def test_sift_without_fine_tuning_is_a_usage_error(toy_sst2, capsys):
    root, _, dev = toy_sst2
    code, captured = run_script_in_process(capsys, "finetune.py", "--model", root / "base", "--eval", dev, "--sift")
    assert code == 2 and "--sift is a way of fine-tuning" in error_line(code, captured)


# ---- coursework exercise: sift-perturbation -----------------------------------------------------


def test_exercise_sift_perturbation_moves_each_token_by_at_most_eta():
    delta = torch.tensor([[[0.5, 0.0, -0.5], [0.0, 0.0, 0.0]]])
    grad = torch.tensor([[[3.0, -6.0, 0.0], [1e-3, 2e-3, -4e-3]]])
    new = sift.ascent_step(delta, grad, 0.1)
    expected = torch.tensor([[[0.5 + 0.1 * 3 / (1e-6 + 6), -0.1 * 6 / (1e-6 + 6), -0.5],
                              [0.1 * 1e-3 / (1e-6 + 4e-3), 0.1 * 2e-3 / (1e-6 + 4e-3), -0.1 * 4e-3 / (1e-6 + 4e-3)]]])
    torch.testing.assert_close(new, expected, rtol=1e-5, atol=1e-7)
    # the token's largest coordinate moves by (almost exactly) eta, whatever the gradient's scale
    assert (new - delta).abs().amax(-1)[0].tolist() == pytest.approx([0.1, 0.1], rel=1e-3)


def test_exercise_sift_perturbation_skips_a_non_finite_gradient():
    delta = torch.tensor([[[0.25, -0.25]]])
    for bad in (float("nan"), float("inf")):
        torch.testing.assert_close(sift.ascent_step(delta, torch.tensor([[[1.0, bad]]]), 0.1), delta, rtol=0, atol=0)
