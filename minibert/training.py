"""Training, written once for pretraining, fine-tuning and distillation
([BERT] 3.1 and Appendix A.2; Google's optimization.py).

One optimizer step, `training_step`, is what every run takes:

    forward each micro-batch, its loss summed over items, divided by the
      number of items of the whole step (masked tokens, sentences)
    backward (gradients add up over the micro-batches)
    clip the gradient norm to 1.0
    AdamW (or BERT's own Adam) step, learning-rate schedule step

and the pieces it uses: AdamW written out, the parameter groups (no decay
on biases and LayerNorm), BERT's warm-up then linear decay and the same
rule keyed to a time budget (Izsak et al. 2021; Geiping & Goldstein 2022),
where the clock is the wall clock and not the step. The run
around the step (processes, checkpoints, resume, evaluation, logging) is
minibert/commands/trainer.py.
"""

import torch

from minibert.support import MiniBertError

# ----------------------------------------------------------------------------
# Optimizer and schedule ([BERT] A.2; Google's optimization.py)
# ----------------------------------------------------------------------------

OPTIMIZERS = ("adamw", "bert-adam")   # torch's AdamW (the default), or BERT's own


class AdamW(torch.optim.Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm
    2), written out. For each parameter x with gradient g, at step t = 1, 2, ...:

        m = beta1 m + (1 - beta1) g                 first moment
        v = beta2 v + (1 - beta2) g^2               second moment
        m_hat = m / (1 - beta1^t)                   bias correction: m and v start
        v_hat = v / (1 - beta2^t)                   at 0, so early averages are too small
        x = x - lr (m_hat / (sqrt(v_hat) + eps) + weight_decay x)

    The decay is "decoupled": lr * weight_decay * x comes from x before the
    step and never passes through m and v (Adam's L2 penalty would add
    weight_decay * x to g instead). torch.optim.AdamW computes the same
    numbers (tests check the two trajectories agree).

    `bias_correction=False` gives Google's AdamWeightDecayOptimizer (BERT's
    optimization.py): m and v are NOT divided by 1 - beta^t. Early on m and
    v are then near 0 and the first step is (1 - beta1) / sqrt(1 - beta2) =
    0.1 / 0.0316 = 3.16 times bigger than AdamW's; BERT's warm-up keeps those
    steps small."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=True):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for x in group["params"]:
                if x.grad is None:
                    continue
                state = self.state[x]
                if not state:
                    state["t"], state["m"], state["v"] = 0, torch.zeros_like(x), torch.zeros_like(x)
                state["t"] += 1
                adamw_update(x, x.grad, state["m"], state["v"], state["t"], group["lr"], group["betas"],
                             group["eps"], group["weight_decay"], group["bias_correction"])

    def load_state_dict(self, state_dict):
        """Refuse another optimizer's state (torch's AdamW keeps exp_avg, exp_avg_sq)."""
        for saved in state_dict.get("state", {}).values():
            if not {"t", "m", "v"} <= set(saved):
                raise ValueError(f"this Adam keeps t, m and v; the saved state has {sorted(saved)}")
        super().load_state_dict(state_dict)


def adamw_update(x, g, m, v, t, lr, betas, eps, weight_decay, bias_correction=True):
    """One AdamW step of one parameter, in place: updates the moments m and
    v (tensors shaped like x) with the gradient g, then x (the equations
    above, step t counted from 1)."""
    # exercise: adamw-update
    beta1, beta2 = betas
    m.mul_(beta1).add_(g, alpha=1 - beta1)               # m = beta1 m + (1 - beta1) g
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)        # v = beta2 v + (1 - beta2) g^2
    m_hat, v_hat = m, v
    if bias_correction:
        m_hat = m / (1 - beta1 ** t)
        v_hat = v / (1 - beta2 ** t)
    update = m_hat / (v_hat.sqrt() + eps)
    if weight_decay:
        update = update + weight_decay * x               # decoupled: from x, not through m and v
    x.sub_(lr * update)
    # end exercise


class BertAdam(AdamW):
    """Google's AdamWeightDecayOptimizer: AdamW without bias correction."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, lr, betas, eps, weight_decay, bias_correction=False)


def parameter_groups(model, weight_decay):
    """Decay the weight matrices only: like Google's optimizer, LayerNorm
    parameters and biases are not decayed."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        (no_decay if parameter.ndim == 1 or "layer_norm" in name else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def make_optimizer(model, learning_rate, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-6, optimizer="adamw"):
    """torch's AdamW (the same numbers as AdamW above, faster) or "bert-adam"
    (Google's, without bias correction), with decoupled weight decay on the
    weight matrices only (parameter_groups)."""
    if optimizer not in OPTIMIZERS:
        raise MiniBertError(f"optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
    groups = parameter_groups(model, weight_decay)
    if optimizer == "bert-adam":
        return BertAdam(groups, lr=learning_rate, betas=betas, eps=eps)
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def warmup_then_linear_decay(optimizer, warmup_steps, total_steps):
    """Learning rate rises linearly from 0 over `warmup_steps`, then falls
    linearly to 0 at `total_steps` (BERT's schedule).

    This is rise_then_fall below on the step clock, p = step / total_steps,
    with w = warmup_steps / total_steps: the decay (total_steps - step) /
    (total_steps - warmup_steps) is (1 - p) / (1 - w). Only the warm-up
    counts the step being taken, (step + 1) / warmup_steps, so that the
    first step does not go by at a rate of 0."""
    # exercise: lr-schedule
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    # end exercise


# ----------------------------------------------------------------------------
# A schedule keyed to a time budget (Izsak et al. 2021; Geiping & Goldstein 2022)
# ----------------------------------------------------------------------------
# On a time budget the number of steps is not known in advance: a decay
# planned over guessed steps is cut by the clock with its rate still high.
# Both papers write the schedule over progress p in [0, 1] and read p from
# the wall clock, p = elapsed time / budget, so the rate reaches its floor,
# 0, exactly when the budget ends (Izsak et al.'s time-based schedule,
# academic-budget-bert's TimeScheduler; Cramming's "budget-" schedulers).
# One rule, two clocks: on the step clock p = step / total_steps.

# The rule's two numbers, (s, w): start at s times the peak, peak at p = w.
SCHEDULES = {
    "linear": None,              # (0, the warm-up fraction): BERT's; Izsak et al.'s on the clock, 6% warm-up
    "one-cycle": (0.0, 0.5),     # peak at half-time (Smith & Topin 2019, simplified; Cramming's budget-one-cycle)
    "triangle": (0.25, 0.75),    # Cramming's final recipe (budget-triangle2 in its train/bert-o4.yaml)
}


def rise_then_fall(p, peak_at, start=0.0):
    """The learning rate at progress p in [0, 1], as a fraction of the peak:

        f(p) = min(s + (1 - s) p / w,  (1 - p) / (1 - w))

    a straight line up from s at p = 0 to 1 at p = w (s = start, w =
    peak_at), then a straight line down to 0 at p = 1 (w = 0: no rise)."""
    rise = start + (1 - start) * p / peak_at if peak_at > 0 else 1.0
    return max(0.0, min(rise, (1 - p) / (1 - peak_at)))


def progress_schedule(optimizer, progress, schedule="linear", warmup=0.0):
    """Each step's rate is peak * f(progress(step)) for the shape `schedule`
    (SCHEDULES; `warmup`: linear's w). progress(step) gives p when `step`
    optimizer steps are done: step / total_steps, or elapsed / budget, the
    wall clock read as the step ends (the run's BudgetClock.tick)."""
    if schedule not in SCHEDULES:
        raise MiniBertError(f"schedule {schedule!r}: expected one of {', '.join(SCHEDULES)}")
    if not 0 <= warmup < 1:
        raise MiniBertError(f"warmup {warmup!r}: expected a fraction of the run in [0, 1), leaving time to decay")
    start, peak_at = SCHEDULES[schedule] or (0.0, warmup)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: rise_then_fall(progress(step), peak_at, start))


# ----------------------------------------------------------------------------
# One optimizer step
# ----------------------------------------------------------------------------


def training_step(model, micro_batches, objective, optimizer, scheduler, max_grad_norm=1.0, counts=None,
                  world_size=1, check=None):
    """One optimizer step over `micro_batches` (one batch, or several whose
    gradients add up). Returns {term: (sum of losses, number correct)}.

    objective.losses(model, batch) -> {term: (sum of the items' losses,
    number correct)}; objective.counts(batch) -> {term: number of items}.
    For sentence classification ([BERT] 4.1, Figure 4a/b) the one term is
    the cross-entropy of the gold classes summed over the batch's B
    sentences, so the loss is L = -(1/B) sum_i log softmax(C_i W^T + b)[y_i];
    for pretraining the terms are the MLM loss (per masked token) and NSP.

    Each term is divided by the number of items of the whole step, so k
    micro-batches give the gradient of one batch k times larger. `counts`:
    those numbers summed over every process of a torch.distributed run
    (default: these micro-batches' own); `world_size` undoes the average
    DistributedDataParallel takes over the processes. check(stats), if
    given, runs after backward and before the weights change (the run stops
    a loss that is not finite there)."""
    model.train()
    counts = counts if counts is not None else step_counts(objective, micro_batches)
    # exercise: training-step
    stats = {}
    for batch in micro_batches:
        terms = objective.losses(model, batch)
        loss = sum(loss_sum / max(counts[term], 1) for term, (loss_sum, _) in terms.items())
        (loss * world_size).backward()                    # gradients add up over the micro-batches
        for term, (loss_sum, correct) in terms.items():   # kept on the device: no sync per step
            total, right = stats.get(term, (0.0, 0))
            stats[term] = (total + loss_sum.detach(), right + correct)
    if check is not None:
        check(stats)
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)   # ||g|| <= 1.0, as Google's BERT
    optimizer.step()                  # BERT's AdamW (decoupled weight decay, none on biases and LayerNorm);
                                      # Tang's student: Adadelta (distillation.py)
    scheduler.step()                  # the next step's rate: BERT's warm-up then decay to 0 (by step or
                                      # clock); constant for Tang's student
    optimizer.zero_grad(set_to_none=True)
    # end exercise
    return stats


def step_counts(objective, micro_batches):
    """{term: items it averages over}, summed over the step's micro-batches."""
    counts = {}
    for batch in micro_batches:
        for term, n in objective.counts(batch).items():
            counts[term] = counts.get(term, 0) + int(n)
    return counts
