"""The trainer: the loop around the training step (minibert/training.py)
that train_mlm.py, finetune.py and distill.py share: the processes torchrun
starts, the batches of each step, bf16 autocast, checkpoints and --resume,
evaluation, logging and time limits. Pretraining, fine-tuning and
distillation all run through `train`, which takes the lesson's
training_step once per optimizer step.

Each loss term is a sum over items divided by the *global* count for the
step, so one process with batch 2N and two processes with batch N compute
the same gradient (DistributedDataParallel averages gradients over the
processes, hence the factor world_size). That holds exactly without dropout;
with dropout each process draws the masks of its own rows (see Randomness),
so the two runs make other draws of the same distribution: statistically
equivalent updates, not equal ones (docs/guide.md 3).

Under torchrun the run acts once: the main process (support/outputs.py,
is_main_process) alone prints, evaluates and saves, and what it reports is
the whole run's: the tokens seen and the logged losses and accuracies are
summed over the processes (all_reduce_sum), so they read as one process
with the same global batch would read them.

Randomness: the batches are a deterministic function of (seed, step) (see
pretraining.py) and the dropout generator is re-seeded from (seed, step,
rank) at the start of each step. A checkpoint therefore needs only the model,
the optimizer, the schedule and the step number to resume bit for bit.

With a time budget (TrainingConfig.budget_minutes) the lesson's schedule runs
on a BudgetClock, p = elapsed / budget, and the run ends when p reaches 1,
its rate at the floor. A checkpoint also records the budget spent
(`budget_seconds_used`, read when its step ended) and a resumed run goes on
from it: each step's rate is the same function of recorded progress, and the
clock does not start again. Resume is exact in that sense, not bit for bit:
steps take different times in two runs, so the progress at step n, and the
rate, differ between a stopped-and-resumed run and an uninterrupted one.
"""

import contextlib
import itertools
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from tqdm.auto import tqdm                   # a widget in a notebook, text in a terminal

from minibert.support import MiniBertError
from minibert.support.files import remove_leftovers, save_torch
from minibert.support.outputs import is_main_process
from minibert.support.runtime import autocast as bf16_autocast, choose_device, move_to_device, seed_from
from minibert.training import (make_optimizer, progress_schedule, step_counts, training_step,
                               warmup_then_linear_decay)

# ----------------------------------------------------------------------------
# Device, processes
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
        """The one process that prints and writes (support/outputs.is_main_process)."""
        return is_main_process(self.rank)

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


@contextlib.contextmanager
def main_process_first(context):
    """Run the block on the main process first, then on the others: what it
    prepares and caches (train_mlm.py's token cache, distill.py's transfer
    set and teacher logits) is made and written once, by the main process,
    and the others read it from the cache."""
    if context.distributed and not context.is_main:
        dist.barrier()                   # wait for the main process's cache
    yield
    if context.distributed and context.is_main:
        dist.barrier()                   # the cache is written: let the others read it


def leave_process_group(context):
    """The end of a run under torchrun, once it has done its work: every
    process waits for the main one to have written what it writes (a
    barrier: no process is done before the model is saved), then all leave
    the process group. Leaving it stops gloo's and NCCL's threads while
    Python still runs; a process that exits without it can abort (SIGABRT)
    as those threads are torn down, and torchrun then stops the others, the
    main one while it saves."""
    if context.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# ----------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------


def save_checkpoint(path, model, optimizer, scheduler, step, run_config, budget=None):
    """Everything needed to resume, written atomically (temporary file, then
    rename); with a time budget, the seconds of it spent when `step` ended."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "optimizer_name": type(optimizer).__name__,       # --resume refuses another optimizer's state
             "scheduler": scheduler.state_dict(), "step": step, "run_config": run_config}
    if budget is not None:
        state["budget_seconds_used"] = budget.used
    save_torch(path, state)


# What a checkpoint's run_config must share with the run that resumes it.
# `flags` holds, under each flag's name, every other setting that shapes
# the run (learning rate, data file, task, ...): the caller decides which.
SAME_RUN_KEYS = ("model_config", "total_steps", "batch_size", "seed", "grad_accum_steps", "vocabulary_fingerprint")


def check_same_run(path, saved, run_config):
    """--resume continues the run the checkpoint at `path` was made by, or
    stops with a message naming the setting, its old and its new value: a
    resumed run with another learning rate, data file or task would end as
    neither run."""
    if not run_config:
        return
    old, new = saved.get("flags", {}), run_config.get("flags", {})
    for flag in old:                     # first: a changed flag explains a changed step count or model
        if flag in new and old[flag] != new[flag]:
            raise MiniBertError(f"--resume: {path} was made with {flag} {old[flag]!r}, this run has {flag} "
                                f"{new[flag]!r}; resume with the same value, or start a new run in another folder")
    for key in SAME_RUN_KEYS:
        if key in saved and saved[key] != run_config.get(key):
            before, after = saved[key], run_config.get(key)
            if isinstance(before, dict) and isinstance(after, dict):     # a config: only the fields that differ
                fields = [f for f in sorted(set(before) | set(after)) if before.get(f) != after.get(f)]
                before = ", ".join(f"{f}={before.get(f)!r}" for f in fields[:3])
                after = ", ".join(f"{f}={after.get(f)!r}" for f in fields[:3])
                raise MiniBertError(f"--resume: {path} was made with the {key} {before}, this run has {after}; "
                                    f"resume with the same settings, or start a new run in another folder")
            raise MiniBertError(f"--resume: {path} was made with {key}={before!r}, this run has {after!r}")


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
    total_steps: Optional[int]     # None with budget_minutes: the budget ends the run
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
    # The schedule's shape (training.SCHEDULES): "linear" is BERT's warm-up and decay over warmup_steps and
    # total_steps; the others run over step / total_steps. With budget_minutes, every shape runs over the
    # wall clock (BudgetClock below; linear warms up over warmup_fraction of it) and the run ends with it.
    schedule: str = "linear"
    budget_minutes: Optional[float] = None
    warmup_fraction: float = 0.0
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


# The key under which a step's token count rides along with its loss counts
# in one all-reduce (no loss term is called so: a term is one word).
TOKENS = "tokens seen"


def summed_totals(totals, context):
    """{term: [sum of losses, number correct, items]} summed over all
    processes: the logged loss and accuracy of the whole global batch."""
    if not context.distributed:
        return totals
    flat = all_reduce_sum({f"{term}\t{i}": value for term, values in totals.items()
                           for i, value in enumerate(values)}, context)
    return {term: [flat[f"{term}\t{i}"] for i in range(len(values))] for term, values in totals.items()}


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


class AutocastObjective:
    """An objective whose forward runs under bf16 autocast (support/runtime.autocast)
    on `device` when `enabled`; the loss is summed in float32 outside it."""

    def __init__(self, objective, device, enabled):
        self.objective, self.device, self.enabled = objective, device, enabled

    def counts(self, batch):
        return self.objective.counts(batch)

    def losses(self, model, batch):
        with bf16_autocast(self.device, self.enabled):
            return self.objective.losses(model, batch)


class BudgetClock:
    """Progress through a time budget, p = elapsed / budget, at most 1, for
    the lesson's progress_schedule. The clock is read once as each step ends
    (tick), and that reading sets the rate of the next step: a step's rate is
    a function of the progress recorded before it. `used` is the budget
    already spent: 0 for a new run, what the checkpoint recorded for a
    resumed one, so a resumed run goes on from that progress instead of
    starting the clock again (the time between the checkpoint and the resume
    is not counted). `clock` gives seconds: time.monotonic, or a fake clock
    in tests."""

    def __init__(self, budget_seconds, used=0.0, clock=time.monotonic):
        if not budget_seconds > 0:
            raise MiniBertError(f"budget_seconds {budget_seconds!r}: expected a time > 0")
        self.budget, self.clock = budget_seconds, clock
        self.resume(used, step=0)

    def resume(self, used, step):
        """Go on from `used` seconds spent when `step` steps were done, counting from now."""
        self.used, self.since, self.step = float(used), self.clock(), step

    def tick(self, step):
        """p once `step` steps are done. The clock is read the first time a
        step asks (LambdaLR asks once per parameter group): the seconds since
        the last reading are added to `used`."""
        if step != self.step:
            now = self.clock()
            self.used, self.since, self.step = self.used + (now - self.since), now, step
        return self.progress

    @property
    def progress(self):
        return min(1.0, self.used / self.budget)


def make_schedule(optimizer, config, clock=time.monotonic):
    """(scheduler, budget): BERT's warm-up and linear decay, or another shape
    over step / total_steps (budget None); with config.budget_minutes, the
    shape over the wall clock, and the BudgetClock that drives it."""
    if config.budget_minutes is not None:
        budget = BudgetClock(config.budget_minutes * 60, clock=clock)
        return progress_schedule(optimizer, budget.tick, config.schedule, config.warmup_fraction), budget
    if config.schedule == "linear":
        return warmup_then_linear_decay(optimizer, config.warmup_steps, config.total_steps), None
    return progress_schedule(optimizer, lambda step: min(1.0, step / max(1, config.total_steps)),
                             config.schedule), None


def shared_clock(context):
    """The clock a time budget is read on. Under torchrun every process takes
    the slowest one's seconds (an all-reduce, at the same point of each step
    on every process), so all set the same rate and stop at the same step."""
    if not context.distributed:
        return time.monotonic
    started = time.monotonic()

    def clock():
        seconds = torch.tensor([time.monotonic() - started], dtype=torch.float64)
        if dist.get_backend() == "nccl":
            seconds = seconds.to(context.device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
        return float(seconds)
    return clock


def train(model, batches, objective, config, context, checkpoint_path, run_config=None, evaluate=None,
          resume=False, progress=True, optimizer_factory=None, clock=None):
    """Run `config.total_steps` optimizer steps (training.training_step), or
    steps until `config.budget_minutes` of wall time are spent. Returns a
    summary dict ("finished": the run reached its end, not --max-minutes).

    batches[i]: the i-th global micro-batch (a dict of tensors).
    objective.counts(batch) -> {term: items it averages over};
    objective.losses(model, batch) -> {term: (sum of losses, number correct)}.
    evaluate(model) -> dict of held-out metrics (run on the main process).
    optimizer_factory(model) -> (optimizer, scheduler): another optimizer than
    BERT's (distillation's Adadelta); default config.optimizer (AdamW or BERT's
    own) with config.schedule (make_schedule).
    clock() -> seconds, what a time budget is read on (default shared_clock;
    tests give a fake one).
    """
    model.to(context.device)
    budget = None
    if optimizer_factory is None:
        optimizer = make_optimizer(model, config.learning_rate, config.weight_decay, optimizer=config.optimizer)
        scheduler, budget = make_schedule(optimizer, config, clock or shared_clock(context))
    else:
        optimizer, scheduler = optimizer_factory(model)
    start_step = 0
    checkpoint_path = Path(checkpoint_path)
    if context.is_main:
        stale = remove_leftovers(checkpoint_path)
        if stale:
            tqdm.write(f"removed {len(stale)} unfinished checkpoint file(s) left by a killed run: {', '.join(stale)}")
    if resume:
        start_step = resume_checkpoint(checkpoint_path, model, optimizer, scheduler, run_config, budget)

    network = model
    if context.distributed:
        network = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[context.device.index] if context.device.type == "cuda" else None)
    # bf16 halves the bytes moved and runs on tensor cores; on a CPU it pays
    # only where the CPU has bf16 instructions (AVX512-BF16, AMX), so there it
    # is opt-in. Weights and optimizer state stay float32 either way.
    use_bf16 = config.bf16 is True or (config.bf16 is None and context.device.type == "cuda")
    objective = AutocastObjective(objective, context.device, use_bf16)

    history, summary = [], {"start_step": start_step}
    totals = {}
    started = time.time()
    tokens_seen, window_start, window_tokens = 0, time.time(), 0
    steps = itertools.count(start_step) if budget is not None else range(start_step, config.total_steps)
    progress_bar = tqdm(steps, initial=start_step, total=config.total_steps,
                        desc="training", disable=not (progress and context.is_main), dynamic_ncols=True)
    end_step, finished = start_step, budget is None and start_step >= config.total_steps
    for step in progress_bar:
        torch.manual_seed(seed_from(config.seed, "dropout", step, context.rank))
        micro_batches = [rows_for_rank(batches[step * config.grad_accum_steps + m], context)
                         for m in range(config.grad_accum_steps)]
        counts = step_counts(objective, micro_batches)        # this process's; the step divides by all processes'
        tokens = sum(int(batch["attention_mask"].sum()) for batch in micro_batches)    # this process's, no padding
        # One all-reduce per step sums both over the processes: the counts each loss term divides by, and the
        # tokens the step has seen (each process's rows hold their own number of real tokens).
        shared = all_reduce_sum({**counts, TOKENS: tokens}, context)
        step_tokens = int(shared.pop(TOKENS))
        tokens_seen += step_tokens
        window_tokens += step_tokens
        micro_batches = [move_to_device(batch, context.device) for batch in micro_batches]
        # Under torch.distributed every micro-batch's backward averages its gradients over the processes (the
        # average of sums is the sum of averages, so accumulation stays exact); the counts are global.
        step_stats = training_step(network, micro_batches, objective, optimizer, scheduler, config.max_grad_norm,
                                   counts=shared, world_size=context.world_size,
                                   check=lambda stats: check_finite(stats, step + 1, config.learning_rate, context))

        for term, (loss_sum, correct) in step_stats.items():
            t = totals.setdefault(term, [0.0, 0.0, 0])
            t[0] += loss_sum
            t[1] += correct
            t[2] += counts.get(term, 0)
        done = end_step = step + 1
        # The step's scheduler.step() read the budget's clock: the next step's rate is f(p), 0 once p = 1.
        finished = budget.progress >= 1 if budget is not None else done == config.total_steps
        if done % config.log_every == 0 or finished:
            elapsed = time.time() - window_start
            record = {"step": done, "lr": scheduler.get_last_lr()[0],
                      "tokens_per_second": window_tokens / max(elapsed, 1e-9)}
            for term, (loss_sum, correct, n) in summed_totals(totals, context).items():
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
                                                                     finished or stopping_here)
        saving = context.is_main and ((config.checkpoint_every and done % config.checkpoint_every == 0)
                                      or finished or out_of_time)
        if evaluating or saving:             # evaluate() may save the model: never one with NaNs
            check_finite_weights(model, done, config.learning_rate)
        if evaluating:
            if context.is_main:
                metrics = evaluate(model)
                history.append({"step": done, **{f"heldout_{k}": v for k, v in metrics.items()}})
                tqdm.write(evaluation_line(done, config.eval_name, metrics))
                summary["heldout"] = metrics
        if saving:
            save_checkpoint(checkpoint_path, model, optimizer, scheduler, done, run_config or {}, budget)
        if finished and budget is not None:
            if context.is_main:
                tqdm.write(f"the budget of {config.budget_minutes:g} minutes is spent at step {done}: the learning "
                           f"rate is at its floor, {scheduler.get_last_lr()[0]:g}")
            break
        if out_of_time:
            tqdm.write(f"stopping after {config.max_minutes} minutes at step {done}; resume with --resume")
            break
    progress_bar.close()
    summary.update(end_step=end_step, finished=finished, seconds=time.time() - started, tokens_seen=tokens_seen,
                   history=history)
    if budget is not None:
        summary["budget_seconds_used"] = budget.used
    return summary


def resume_checkpoint(checkpoint_path, model, optimizer, scheduler, run_config, budget=None):
    """Load the checkpoint of the run being resumed into the model, the
    optimizer and the schedule (after check_same_run), and set `budget`, if
    any, to the time it recorded; returns its step."""
    if not checkpoint_path.is_file():
        raise MiniBertError(f"--resume: no checkpoint at {checkpoint_path}")
    state = load_checkpoint(checkpoint_path)
    check_same_run(checkpoint_path, state.get("run_config", {}), run_config)
    if (budget is None) != ("budget_seconds_used" not in state):
        raise MiniBertError(f"--resume: {checkpoint_path} was made {'without' if budget else 'with'} a time "
                            f"budget (--budget-minutes), this run has {'one' if budget else 'none'}")
    if budget is not None:
        used = float(state["budget_seconds_used"])
        if used >= budget.budget:
            raise MiniBertError(f"--resume: {checkpoint_path} has spent its whole budget ({used / 60:.4g} of "
                                f"{budget.budget / 60:g} minutes): no time is left to train")
        budget.resume(used, state["step"])
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as e:
        raise MiniBertError(f"--resume: {checkpoint_path} does not fit this model ({str(e).splitlines()[0]})") from None
    saved_optimizer = state.get("optimizer_name")
    if saved_optimizer != type(optimizer).__name__:
        raise MiniBertError(f"--resume: {checkpoint_path} holds the state of another optimizer ({saved_optimizer}) "
                            f"than this run's ({type(optimizer).__name__})")
    try:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    except (KeyError, ValueError) as e:      # another optimizer's state: other fields, other groups
        raise MiniBertError(f"--resume: {checkpoint_path} holds the state of another optimizer than this "
                            f"run's ({type(e).__name__}: {e})") from None
    return state["step"]


class Prefetched:
    """batches[i], computed ahead by DataLoader worker processes. The loop asks
    for batches in order, so workers can prepare the next ones while the
    model trains on this one. stop None: no end (a time budget ends the run)."""

    def __init__(self, batches, start, stop, num_workers):
        indices = range(start, stop) if stop is not None else itertools.count(start)
        loader = torch.utils.data.DataLoader(batches, sampler=indices, batch_size=None,
                                             num_workers=num_workers, prefetch_factor=4, persistent_workers=False)
        self.iterator, self.next_index = iter(loader), start

    def __getitem__(self, index):
        if index != self.next_index:
            raise RuntimeError(f"Prefetched batches are served in order: asked {index}, next is {self.next_index}")
        self.next_index += 1
        return next(self.iterator)
