"""Pretraining-step benchmark: minibert vs transformers' BertForMaskedLM.

One training step = forward, MLM loss, backward, AdamW step (lr 1e-4), CPU,
dropout 0.1 as in the config; in fp32 and under bf16 autocast (the forward
and the loss under torch.autocast, weights and AdamW in float32, as
train_mlm.py --bf16), side by side in the same interleaved rounds. Model: 4 layers, hidden 256, 4 heads,
intermediate 1024, vocab 30522; batch 32 x 128 with 15% of the tokens masked
(labels -100 elsewhere). Three contenders, all starting from the same weights:

  minibert (sparse head)  the MLM head runs on the masked positions only, as
                          MaskedLMObjective does (mlm_positions); the loss
                          only (the objective also counts correct
                          predictions, an argmax that transformers skips)
  minibert (full head)    the MLM head runs on every position, then the loss
                          on the masked ones (what the sparse head saves)
  transformers            BertForMaskedLM(..., labels=labels), its standard path

Timing is interleaved: after a warm-up, each round times one step of every
contender in every precision, alternating the order. Throughput is tokens
(B x T) per second from the median step time; a speed ratio is the median over
rounds of the ratio of the two step times in the same round, against
transformers in the same precision, and bf16 against the same contender's fp32.

    python bench/bench_pretraining_step.py [--rounds 6] [--precisions fp32 bf16] [--json results.json]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment  # noqa: E402
from minibert.checkpoints import build_and_fill  # noqa: E402
from minibert.checkpoints.name_maps import normalize_hf_names  # noqa: E402
from minibert.model import BertConfig  # noqa: E402
from minibert.support.runtime import autocast  # noqa: E402
from minibert.training import make_optimizer  # noqa: E402

SPARSE, FULL, THEIRS = "minibert (sparse head)", "minibert (full head)", "transformers"
HF_CONFIG = dict(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                 intermediate_size=1024, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
MASK_ID = 103


def make_batch(batch, length, mask_prob, seed=0):
    generator = torch.Generator().manual_seed(seed)
    original = torch.randint(1000, HF_CONFIG["vocab_size"], (batch, length), generator=generator)
    masked = torch.rand(batch, length, generator=generator) < mask_prob
    return {"input_ids": original.masked_fill(masked, MASK_ID), "attention_mask": torch.ones_like(original),
            "token_type_ids": torch.zeros_like(original), "mlm_labels": original.masked_fill(~masked, -100)}


def loss(name, model, batch):
    """Mean cross-entropy over the masked tokens (the same number for all three)."""
    labels = batch["mlm_labels"]
    inputs = dict(attention_mask=batch["attention_mask"], token_type_ids=batch["token_type_ids"])
    if name == SPARSE:   # the head on the masked positions only, as MaskedLMObjective runs it
        positions = labels != -100
        logits = model(batch["input_ids"], mlm_positions=positions, **inputs).selected_mlm_logits    # (N, V)
        return F.cross_entropy(logits, labels[positions])
    if name == FULL:
        logits = model(batch["input_ids"], **inputs).mlm_logits                            # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch["token_type_ids"], labels=labels).loss


def build(learning_rate):
    """{name: (model, optimizer)}, all with transformers' seed-0 initial weights."""
    torch.manual_seed(0)
    theirs = transformers.BertForMaskedLM(transformers.BertConfig(**HF_CONFIG))
    contenders = {THEIRS: (theirs, torch.optim.AdamW(theirs.parameters(), lr=learning_rate, weight_decay=0.01))}
    for name in (SPARSE, FULL):
        tensors, skipped = normalize_hf_names(dict(theirs.state_dict()))
        ours = build_and_fill(BertConfig.from_dict(theirs.config.to_dict()), tensors, skipped, "huggingface",
                              source="transformers BertForMaskedLM")
        contenders[name] = (ours, make_optimizer(ours, learning_rate))   # AdamW, no decay on biases/LayerNorm
    return {name: contenders[name] for name in (SPARSE, FULL, THEIRS)}


def train_step(name, model, optimizer, batch, precision):
    optimizer.zero_grad(set_to_none=True)
    with autocast("cpu", precision == "bf16"):     # the forward and the loss; backward outside, as the runs do
        value = loss(name, model, batch)
    value.backward()
    optimizer.step()


def initial_losses(contenders, batch, precision):
    """Each contender's MLM loss on `batch` in eval mode (no dropout), under `precision`."""
    losses = {}
    with torch.no_grad(), autocast("cpu", precision == "bf16"):
        for name, (model, _) in contenders.items():
            model.eval()
            losses[name] = loss(name, model, batch).item()
            model.train()
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds, each times one step of every contender")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--mask-prob", type=float, default=0.15)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"],
                        help="fp32, and bf16 autocast for the forward and the loss (default both, side by side)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    env = environment()
    print(f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, {env['cpu']}")
    batch = make_batch(args.batch, args.length, args.mask_prob)
    masked = int((batch["mlm_labels"] != -100).sum())
    runs = {precision: build(args.lr) for precision in args.precisions}   # each its own copies of the same weights
    losses = {precision: initial_losses(contenders, batch, precision) for precision, contenders in runs.items()}
    for precision, by_name in losses.items():
        assert max(by_name.values()) - min(by_name.values()) < (1e-4 if precision == "fp32" else 0.05), \
            f"initial {precision} losses differ: {by_name}"
        print(f"parity: initial MLM loss (eval mode), {precision}: "
              + ", ".join(f"{name} {value:.5f}" for name, value in by_name.items()))

    keys = [(name, precision) for precision in args.precisions for name in (SPARSE, FULL, THEIRS)]
    times = {key: [] for key in keys}
    for r in range(args.warmup + args.rounds):
        for name, precision in (keys if r % 2 == 0 else keys[::-1]):
            start = time.perf_counter()
            train_step(name, *runs[precision][name], batch, precision)
            if r >= args.warmup:
                times[name, precision].append(time.perf_counter() - start)
        print(f"round {r + 1} of {args.warmup + args.rounds} done ({'warm-up' if r < args.warmup else 'timed'})",
              file=sys.stderr, flush=True)

    def ratio(slow, fast):  # median over rounds of time(slow) / time(fast)
        return statistics.median(s / f for s, f in zip(times[slow], times[fast]))

    tokens = args.batch * args.length
    print(f"\ntraining step: L4 H256 A4 I1024 V30522, batch {args.batch} x {args.length} ({masked} masked tokens),"
          f" AdamW, dropout 0.1, {' and '.join(args.precisions)}, {args.rounds} interleaved rounds")
    print(f"{'contender':23s} {'precision':9s} {'median ms':>9s} {'min ms':>7s} {'tokens/s':>8s} "
          f"{'vs transformers':>15s} {'vs own fp32':>11s}")
    results = {"environment": env, "batch": args.batch, "length": args.length, "masked_tokens": masked,
               "rounds": args.rounds, "initial_losses": losses, "rows": {}}
    for name, precision in keys:
        median = statistics.median(times[name, precision])
        row = {"median_s": median, "min_s": min(times[name, precision]), "all_s": times[name, precision],
               "tokens_per_s": tokens / median, "speedup_vs_transformers": ratio((THEIRS, precision), (name, precision))}
        if precision == "bf16" and "fp32" in args.precisions:
            row["speedup_vs_fp32"] = ratio((name, "fp32"), (name, "bf16"))
        results["rows"][f"{name}, {precision}"] = row
        own = f"{row['speedup_vs_fp32']:10.2f}x" if "speedup_vs_fp32" in row else ""
        print(f"{name:23s} {precision:9s} {median * 1e3:9.0f} {row['min_s'] * 1e3:7.0f} {row['tokens_per_s']:8.0f} "
              f"{row['speedup_vs_transformers']:14.2f}x {own}")
    results["sparse_over_full"] = {precision: ratio((FULL, precision), (SPARSE, precision))
                                   for precision in args.precisions}
    for precision, value in results["sparse_over_full"].items():
        print(f"sparse head vs full head (minibert), {precision}: {value:.2f}x")
    print("ratios: median over rounds of (their step time / this step time) in the same round; > 1: faster")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
