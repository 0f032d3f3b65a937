"""What a pretraining step costs on this machine, to size a run to a budget.

For each model width (hidden size H, with H/64 heads and a 4H feed-forward, as
BERT's shapes) and each sequence length T, this times train_mlm.py's own step
(training.training_step with the MaskedLMObjective: forward, MLM loss on the
15% masked positions, backward, clipping, AdamW, the schedule) on random word
pieces, and reports word pieces per second and what an hour holds. A step
always holds about the same number of word pieces (--tokens-per-step, 4,096 by
default: batch 32 x 128, 64 x 64, 16 x 256), so rows differ by the model's
shape and not by the batch.

Attention costs T^2 per sequence and the rest T, so at a fixed number of word
pieces per step a longer sequence costs more per word piece, and a wider
model about H^2 more per word piece (plus the MLM head's H x vocabulary).

    python bench/pretraining_cost.py                         # hidden 128 256 384 512 x length 64 128 256
    python bench/pretraining_cost.py --hidden 256 --lengths 128 --layers 6 --json cost.json --plot cost.png

Measure on quiet cores: another job on them changes every figure.
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment  # noqa: E402
from minibert.model import BertConfig, BertModel  # noqa: E402
from minibert.pretraining import MaskedLMObjective  # noqa: E402
from minibert.training import make_optimizer, training_step, warmup_then_linear_decay  # noqa: E402

MASK_ID, IGNORE_INDEX = 4, -100


def random_batch(batch_size, length, vocab_size, mask_prob, generator):
    """Random word pieces with `mask_prob` of them masked: the shapes of a real batch."""
    original = torch.randint(10, vocab_size, (batch_size, length), generator=generator)
    masked = torch.rand(batch_size, length, generator=generator) < mask_prob
    return {"input_ids": original.masked_fill(masked, MASK_ID),
            "attention_mask": torch.ones_like(original), "token_type_ids": torch.zeros_like(original),
            "mlm_labels": original.masked_fill(~masked, IGNORE_INDEX)}


def time_steps(hidden, length, layers, vocab_size, tokens_per_step, steps, warmup):
    """Median seconds per training step of this shape, and its parameter count."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=max(1, hidden // 64), intermediate_size=4 * hidden,
                        max_position_embeddings=max(512, length))
    model = BertModel(config, with_pooler=False, with_pair_head=False)
    optimizer = make_optimizer(model, 1e-4)
    scheduler = warmup_then_linear_decay(optimizer, 0, warmup + steps + 1)
    generator = torch.Generator().manual_seed(0)
    batch = random_batch(max(1, tokens_per_step // length), length, vocab_size, 0.15, generator)
    objective = MaskedLMObjective()
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter()
        training_step(model, [batch], objective, optimizer, scheduler)
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times), sum(p.numel() for p in model.parameters())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, nargs="+", default=[128, 256, 384, 512], help="model widths")
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256], help="sequence lengths")
    parser.add_argument("--layers", type=int, default=4, help="encoder layers (default: 4)")
    parser.add_argument("--vocab-size", type=int, default=12000, help="default: the bundled model's 12,000")
    parser.add_argument("--tokens-per-step", type=int, default=4096, help="word pieces per step (default: 4096)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per shape (default: 5; the median counts)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default: 1)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    parser.add_argument("--json", help="also write the rows and the machine to this file")
    parser.add_argument("--plot", help="also draw word pieces per second against hidden size, a line per length")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    print(f"{'hidden':>6} {'length':>6} {'params':>8} {'s/step':>7} {'pieces/s':>9} {'M pieces/hour':>14}")
    for hidden in args.hidden:
        for length in args.lengths:
            seconds, params = time_steps(hidden, length, args.layers, args.vocab_size, args.tokens_per_step,
                                         args.steps, args.warmup)
            pieces = max(1, args.tokens_per_step // length) * length
            row = {"hidden": hidden, "length": length, "layers": args.layers, "parameters": params,
                   "seconds_per_step": seconds, "pieces_per_second": pieces / seconds,
                   "million_pieces_per_hour": pieces / seconds * 3600 / 1e6}
            rows.append(row)
            print(f"{hidden:>6} {length:>6} {params / 1e6:>7.1f}M {seconds:>7.3f} {row['pieces_per_second']:>9,.0f} "
                  f"{row['million_pieces_per_hour']:>14.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment(), "settings": vars(args), "rows": rows}, f, indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        figure, axes = plt.subplots(figsize=(6, 4))
        for length in args.lengths:
            line = [row for row in rows if row["length"] == length]
            axes.plot([row["hidden"] for row in line], [row["pieces_per_second"] for row in line], "o-",
                      label=f"length {length}")
        axes.set_xlabel("hidden size")
        axes.set_ylabel("word pieces per second (training)")
        axes.set_title(f"{args.layers} layers, {args.tokens_per_step} pieces a step, {args.threads} threads")
        axes.legend()
        figure.tight_layout()
        figure.savefig(args.plot)


if __name__ == "__main__":
    main()
