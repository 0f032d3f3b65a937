"""Training machinery, written once for pretraining (train_mlm.py) and fine-tuning.

The loop in `train` is the whole story of one optimizer step:

    fetch the global micro-batches of this step, keep this process's rows
    count what each loss averages over (masked tokens, sentences), summed over
      all micro-batches and all processes
    for each micro-batch: forward (bf16 autocast on CUDA, or on CPU when asked), loss, backward
    clip the gradient norm, AdamW (or BERT's Adam) step, learning-rate schedule step

Each loss term is a sum over items divided by the *global* count for the
step, so one process with batch 2N and two processes with batch N compute
the same gradient (DistributedDataParallel averages gradients over the
processes, hence the factor world_size).

Randomness: the batches are a deterministic function of (seed, step) (see
pretraining_data.py) and the dropout generator is re-seeded from (seed, step,
rank) at the start of each step. A checkpoint therefore needs only the model,
the optimizer, the schedule and the step number to resume bit for bit.
"""

import contextlib
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from tqdm.auto import tqdm                   # a widget in a notebook, text in a terminal

from minibert.support.devices import autocast as bf16_autocast, choose_device, move_to_device
from minibert.support.errors import MiniBertError
from minibert.support.fileio import remove_leftovers, save_torch
from minibert.support.seeds import seed_from

# ----------------------------------------------------------------------------
# Device, processes, seeds
# ----------------------------------------------------------------------------


@dataclass
class Context:
    """Where this process runs: its device, and its place among the processes
    that `torchrun` started (rank 0 of 1 without torchrun)."""
    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self):
        return self.rank == 0

    @property
    def distributed(self):
        return self.world_size > 1


def setup_context(device="auto"):
    """Join the process group when launched by torchrun (it sets RANK,
    WORLD_SIZE, LOCAL_RANK and the rendezvous address): NCCL on GPUs, gloo on CPU."""
    device = choose_device(device)
    if "RANK" not in os.environ:
        return Context(device)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Context(device, rank, world_size)


# ----------------------------------------------------------------------------
# Optimizer and schedule ([BERT] A.2; Google's optimization.py)
# ----------------------------------------------------------------------------

OPTIMIZERS = ("adamw", "bert-adam")   # --optimizer: torch's AdamW (the default), or BERT's own


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
        raise MiniBertError(f"--optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
    groups = parameter_groups(model, weight_decay)
    if optimizer == "bert-adam":
        return BertAdam(groups, lr=learning_rate, betas=betas, eps=eps)
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def warmup_then_linear_decay(optimizer, warmup_steps, total_steps):
    """Learning rate rises linearly from 0 over `warmup_steps`, then falls
    linearly to 0 at `total_steps` (BERT's schedule)."""
    # exercise: lr-schedule
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    # end exercise


# ----------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------


def save_checkpoint(path, model, optimizer, scheduler, step, run_config):
    """Everything needed to resume, written atomically (temporary file, then rename)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "optimizer_name": type(optimizer).__name__,       # --resume refuses another optimizer's state
             "scheduler": scheduler.state_dict(), "step": step, "run_config": run_config}
    save_torch(path, state)


# What a checkpoint's run_config must share with the run that resumes it.
# `settings` holds, under each flag's name, every other setting that shapes
# the run (learning rate, data file, task, ...): the caller decides which.
SAME_RUN_KEYS = ("model_config", "total_steps", "batch_size", "seed", "grad_accum_steps", "vocabulary_fingerprint")


def check_same_run(path, saved, run_config):
    """--resume continues the run the checkpoint at `path` was made by, or
    stops with a message naming the setting, its old and its new value: a
    resumed run with another learning rate, data file or task would end as
    neither run. Keys that one side lacks (an older checkpoint) are skipped."""
    if not run_config:
        return
    old, new = saved.get("settings", {}), run_config.get("settings", {})
    for flag in old:                     # first: a changed flag explains a changed step count or model
        if flag in new and old[flag] != new[flag]:
            raise MiniBertError(f"--resume: {path} was made with {flag} {old[flag]!r}, this run has {flag} "
                                f"{new[flag]!r}; resume with the same value, or start a new run in another folder")
    for key in SAME_RUN_KEYS:
        if key in saved and saved[key] != run_config.get(key):
            raise MiniBertError(f"--resume: {path} was made with {key}={saved[key]!r}, "
                                f"this run has {run_config.get(key)!r}")


def load_checkpoint(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a zip or unpickling error: the file is damaged or not ours
        raise MiniBertError(f"{path}: cannot read training checkpoint ({type(e).__name__}: {e})") from None


# ----------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------


@dataclass
class TrainingConfig:
    total_steps: int
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    grad_accum_steps: int = 1
    seed: int = 0
    log_every: int = 10
    eval_every: int = 0            # 0: never
    checkpoint_every: int = 0      # 0: only at the end
    max_minutes: Optional[float] = None  # stop early (with a checkpoint) after this much wall time
    bf16: Optional[bool] = None    # bf16 autocast: None = on CUDA only, True = on any device, False = never
    eval_name: str = "held-out"    # what the evaluation lines call the set `evaluate` scores (e.g. "dev.tsv")
    optimizer: str = "adamw"       # or "bert-adam" (BertAdam: Google's, without bias correction)
    # A run stopped by max_minutes evaluates where it stops, unless False: the best-epoch rule compares
    # end-of-epoch evaluations only, so a stopped and resumed run keeps the model an unstopped one keeps.
    evaluate_when_stopped: bool = True


def rows_for_rank(batch, context):
    """This process's share of a global batch: rows rank, rank + W, rank + 2W, ..."""
    if not context.distributed:
        return batch
    return {k: v[context.rank::context.world_size] for k, v in batch.items()}


def all_reduce_sum(values, context):
    """Sum a dict of numbers over all processes."""
    if not context.distributed:
        return values
    keys = sorted(values)
    tensor = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.to(context.device)
    dist.all_reduce(tensor)
    return dict(zip(keys, tensor.tolist()))


def check_finite(step_stats, step, learning_rate, context):
    """Stop a run whose loss has become NaN or infinite: every later step
    would train on NaNs, and the model saved at the end would be NaNs. The
    check happens before the optimizer step, so the weights are still finite
    (and so is the last checkpoint). One sync per step, the price of never
    saving a broken model; every process stops together (one stopping alone
    would leave the others waiting for it)."""
    losses = {term: float(loss_sum) for term, (loss_sum, _) in step_stats.items()}
    broken = {"broken": sum(not math.isfinite(value) for value in losses.values())}
    if all_reduce_sum(broken, context)["broken"]:
        raise MiniBertError(f"training stopped at step {step}: the loss is not finite ("
                            f"{', '.join(f'{term} {value}' for term, value in losses.items())}; learning rate "
                            f"{learning_rate:g}); try a lower learning rate (--lr)")


def check_finite_weights(model, step, learning_rate):
    """Refuse to save or evaluate weights that hold NaN or infinity (a step
    too large can make them so while the loss before it was still finite)."""
    for name, parameter in model.named_parameters():
        if not torch.isfinite(parameter).all():
            raise MiniBertError(f"training stopped at step {step}: {name} holds NaN or infinite values (learning "
                                f"rate {learning_rate:g}); try a lower learning rate (--lr); nothing was saved")


def evaluation_line(step, eval_name, metrics):
    """One evaluation on screen: "step 20: dev.tsv accuracy 87.50". Counts
    are integers (masked_tokens 39,699), losses keep 4 significant digits,
    every other figure is a percentage, with 2 decimals (f1 0.00, not f1 0)."""
    def figure(key, value):
        if isinstance(value, int):
            return f"{value:,}"
        return f"{value:.4g}" if "loss" in key else f"{value:.2f}"
    return f"step {step}: " + ", ".join(f"{eval_name} {k} {figure(k, v)}" for k, v in metrics.items()
                                        if isinstance(v, (int, float)))


def progress_postfix(record):
    """A history record as the progress line shows it: accuracies with their
    % sign (mlm_accuracy=1.63%), tokens per second as a whole number with
    thousands separators (1,970), losses and the learning rate to 3
    significant digits."""
    def figure(key, value):
        if key.endswith("_accuracy"):
            return f"{value:.2f}%"
        if key == "tokens_per_second":
            return f"{value:,.0f}"
        return f"{value:.3g}" if isinstance(value, float) else value
    return {k: figure(k, v) for k, v in record.items() if k != "step"}


def train(model, batches, objective, config, context, checkpoint_path, run_config=None, evaluate=None,
          resume=False, progress=True, optimizer_factory=None):
    """Run `config.total_steps` optimizer steps. Returns a summary dict.

    batches[i]: the i-th global micro-batch (a dict of tensors).
    objective.counts(batch) -> {term: items it averages over};
    objective.losses(model, batch) -> {term: (sum of losses, number correct)}.
    evaluate(model) -> dict of held-out metrics (run on the main process).
    optimizer_factory(model) -> (optimizer, scheduler): another optimizer than
    BERT's (distillation's Adadelta); default config.optimizer (AdamW or BERT's
    own) with warm-up and linear decay.
    """
    model.to(context.device)
    if optimizer_factory is None:
        optimizer = make_optimizer(model, config.learning_rate, config.weight_decay, optimizer=config.optimizer)
        scheduler = warmup_then_linear_decay(optimizer, config.warmup_steps, config.total_steps)
    else:
        optimizer, scheduler = optimizer_factory(model)
    start_step = 0
    checkpoint_path = Path(checkpoint_path)
    if context.is_main:
        stale = remove_leftovers(checkpoint_path)
        if stale:
            tqdm.write(f"removed {len(stale)} unfinished checkpoint file(s) left by a killed run: {', '.join(stale)}")
    if resume:
        if not checkpoint_path.is_file():
            raise MiniBertError(f"--resume: no checkpoint at {checkpoint_path}")
        state = load_checkpoint(checkpoint_path)
        check_same_run(checkpoint_path, state.get("run_config", {}), run_config)
        try:
            model.load_state_dict(state["model"])
        except RuntimeError as e:
            raise MiniBertError(f"--resume: {checkpoint_path} does not fit this model ({str(e).splitlines()[0]})") from None
        saved_optimizer = state.get("optimizer_name", type(optimizer).__name__)   # older checkpoints: not recorded
        if saved_optimizer != type(optimizer).__name__:
            raise MiniBertError(f"--resume: {checkpoint_path} holds the state of another optimizer ({saved_optimizer}) "
                                f"than this run's ({type(optimizer).__name__})")
        try:
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        except (KeyError, ValueError) as e:      # another optimizer's state: other fields, other groups
            raise MiniBertError(f"--resume: {checkpoint_path} holds the state of another optimizer than this "
                                f"run's ({type(e).__name__}: {e})") from None
        start_step = state["step"]

    network = model
    if context.distributed:
        network = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[context.device.index] if context.device.type == "cuda" else None)
    # bf16 halves the bytes moved and runs on tensor cores; on a CPU it pays
    # only where the CPU has bf16 instructions (AVX512-BF16, AMX), so there it
    # is opt-in. Weights and optimizer state stay float32 either way.
    use_bf16 = config.bf16 is True or (config.bf16 is None and context.device.type == "cuda")
    autocast = lambda: bf16_autocast(context.device, use_bf16)

    history, summary = [], {"start_step": start_step}
    totals = {}
    started = time.time()
    tokens_seen, window_start, window_tokens = 0, time.time(), 0
    progress_bar = tqdm(range(start_step, config.total_steps), initial=start_step, total=config.total_steps,
                        desc="training", disable=not (progress and context.is_main), dynamic_ncols=True)
    step = start_step
    for step in progress_bar:
        model.train()
        torch.manual_seed(seed_from(config.seed, "dropout", step, context.rank))
        micro_batches = [rows_for_rank(batches[step * config.grad_accum_steps + m], context)
                         for m in range(config.grad_accum_steps)]
        counts = {}
        for batch in micro_batches:
            for term, n in objective.counts(batch).items():
                counts[term] = counts.get(term, 0) + int(n)
        global_counts = all_reduce_sum(counts, context)

        step_stats = {}
        for m, batch in enumerate(micro_batches):
            batch_tokens = int(batch["attention_mask"].sum()) * context.world_size
            tokens_seen += batch_tokens
            window_tokens += batch_tokens
            batch = move_to_device(batch, context.device)
            last = m == len(micro_batches) - 1
            sync = network.no_sync() if context.distributed and not last else contextlib.nullcontext()
            with sync:
                with autocast():
                    terms = objective.losses(network, batch)
                loss = sum(loss_sum / max(global_counts[term], 1) for term, (loss_sum, _) in terms.items())
                (loss * context.world_size).backward()
            for term, (loss_sum, correct) in terms.items():  # kept on the device: no sync per step
                stats = step_stats.setdefault(term, [0.0, 0.0])
                stats[0] = stats[0] + loss_sum.detach()
                stats[1] = stats[1] + correct
        check_finite(step_stats, step + 1, config.learning_rate, context)
        if config.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        for term, (loss_sum, correct) in step_stats.items():
            t = totals.setdefault(term, [0.0, 0.0, 0])
            t[0] += loss_sum
            t[1] += correct
            t[2] += counts.get(term, 0)
        done = step + 1
        if done % config.log_every == 0 or done == config.total_steps:
            elapsed = time.time() - window_start
            record = {"step": done, "lr": scheduler.get_last_lr()[0],
                      "tokens_per_second": window_tokens / max(elapsed, 1e-9)}
            for term, (loss_sum, correct, n) in totals.items():
                record[f"{term}_loss"] = float(loss_sum) / max(n, 1)
                record[f"{term}_accuracy"] = 100.0 * float(correct) / max(n, 1)   # percent, as every accuracy
            history.append(record)
            progress_bar.set_postfix(progress_postfix(record))
            totals, window_start, window_tokens = {}, time.time(), 0
        out_of_time = config.max_minutes is not None and (time.time() - started) / 60 >= config.max_minutes
        if context.distributed and config.max_minutes is not None:
            out_of_time = bool(all_reduce_sum({"stop": int(out_of_time)}, context)["stop"])
        stopping_here = out_of_time and config.evaluate_when_stopped
        evaluating = evaluate is not None and config.eval_every and (done % config.eval_every == 0 or
                                                                     done == config.total_steps or stopping_here)
        saving = context.is_main and ((config.checkpoint_every and done % config.checkpoint_every == 0)
                                      or done == config.total_steps or out_of_time)
        if evaluating or saving:             # evaluate() may save the model: never one with NaNs
            check_finite_weights(model, done, config.learning_rate)
        if evaluating:
            if context.is_main:
                metrics = evaluate(model)
                history.append({"step": done, **{f"heldout_{k}": v for k, v in metrics.items()}})
                tqdm.write(evaluation_line(done, config.eval_name, metrics))
                summary["heldout"] = metrics
        if saving:
            save_checkpoint(checkpoint_path, model, optimizer, scheduler, done, run_config or {})
        if out_of_time:
            tqdm.write(f"stopping after {config.max_minutes} minutes at step {done}; resume with --resume")
            break
    progress_bar.close()
    summary.update(end_step=step + 1 if config.total_steps > start_step else start_step,
                   seconds=time.time() - started, tokens_seen=tokens_seen, history=history)
    return summary


class Prefetched:
    """batches[i], computed ahead by DataLoader worker processes. The loop asks
    for batches in order, so workers can prepare the next ones while the
    model trains on this one."""

    def __init__(self, batches, start, stop, num_workers):
        loader = torch.utils.data.DataLoader(batches, sampler=range(start, stop), batch_size=None,
                                             num_workers=num_workers, prefetch_factor=4, persistent_workers=False)
        self.iterator, self.next_index = iter(loader), start

    def __getitem__(self, index):
        if index != self.next_index:
            raise RuntimeError(f"Prefetched batches are served in order: asked {index}, next is {self.next_index}")
        self.next_index += 1
        return next(self.iterator)
