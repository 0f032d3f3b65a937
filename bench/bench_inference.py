"""Inference benchmark: minibert vs transformers' BertForMaskedLM.

BERT-base (L12 H768 A12 I3072 V30522), random weights, fp32, CPU, eval mode,
torch.no_grad, a batch of B x T tokens whose last 2 rows end in 30 padding
tokens. Both return the MLM logits of every position (minibert called with
all_hidden_states=False, transformers with its defaults); with --hidden-states
both also return every layer's output (minibert's default, transformers'
output_hidden_states=True). Both hold the SAME weights (transformers' copied
into ours through normalize_hf_names + build_and_fill) and must agree to 1e-4
before anything is timed.

Timing is interleaved: after a warm-up, each round times one forward pass of
every implementation, alternating the order (A B C, C B A, ...). Throughput is
from the median time; the speed ratio is the median over rounds of
(their time / our time) within the same round, which cancels slow drifts of a
shared machine.

Memory: one fresh subprocess per implementation builds only that model, resets
the kernel's peak-RSS counter (`echo 5 > /proc/self/clear_refs`), runs the
same forward passes and reads the peak (VmHWM; getrusage's ru_maxrss would
also carry the parent's RSS from the fork, and clear_refs cannot reset it).
"weights" is the RSS after building the model, "peak" the peak RSS during the
forward passes, "+fwd" their difference (the activations and logits).

--bf16 adds a row under bfloat16 autocast (support/runtime.autocast, what
every minibert script's --bf16 means: weights stay float32) for minibert and
for transformers (sdpa), timed in the same interleaved rounds as the fp32
rows; their ratio compares the two bf16 rows, and the top-1 of each bf16 row
is compared with its own fp32 top-1 at every real token (memory: fp32 only).

    python bench/bench_inference.py [--rounds 6] [--no-eager] [--bf16] [--json results.json]
"""

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment, peak_rss_mib, start_peak_window  # noqa: E402
from minibert.checkpoints import build_and_fill  # noqa: E402
from minibert.checkpoints.name_maps import normalize_hf_names  # noqa: E402
from minibert.model import BertConfig, BertModel  # noqa: E402
from minibert.support.runtime import autocast  # noqa: E402

BF16 = ", bf16"                                       # a row's name ends so when it runs under bf16 autocast

VOCAB = 30522


def hf_config(attention=None):
    """BERT-base; `attention` None means transformers' default implementation (sdpa)."""
    extra = {"attn_implementation": attention} if attention else {}
    return transformers.BertConfig(vocab_size=VOCAB, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                   intermediate_size=3072, **extra)


def make_batch(batch, length, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1000, VOCAB, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[-2:, -30:] = 0                       # the last 2 rows end in 30 padding tokens
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask, torch.zeros_like(input_ids)


def forward(name, model, batch, hidden_states=False):
    """MLM logits (B, T, V); with `hidden_states`, both also return every layer's
    output (minibert's default, transformers' output_hidden_states=True)."""
    input_ids, attention_mask, token_type_ids = batch
    with autocast("cpu", name.endswith(BF16)):
        if name.startswith("minibert"):
            return model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                         all_hidden_states=hidden_states).mlm_logits.float()
        return model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                     output_hidden_states=hidden_states).logits.float()


def build(name):
    """One implementation with seed-0 random weights (minibert's are not a copy of
    transformers' here: the memory measurement does not depend on the values)."""
    torch.manual_seed(0)
    if name == "minibert":
        return BertModel(BertConfig.from_dict(hf_config().to_dict()), with_pooler=False, with_pair_head=False).eval()
    return transformers.BertForMaskedLM(hf_config("eager" if "eager" in name else None)).eval()


def build_with_shared_weights(names):
    models = {name: build(name) for name in names if name != "minibert"}
    theirs = models["transformers (sdpa)"]
    for other in models.values():
        other.load_state_dict(theirs.state_dict())
    tensors, skipped = normalize_hf_names(dict(theirs.state_dict()))
    ours = build_and_fill(BertConfig.from_dict(hf_config().to_dict()), tensors, skipped, "huggingface",
                          source="transformers BertForMaskedLM").eval()
    return {"minibert": ours, **models}


def memory_child(name, args):
    """Runs in a fresh process: what do this model's forward passes add to its peak RSS?"""
    torch.set_num_threads(args.threads)
    model, batch = build(name), make_batch(args.batch, args.length)
    gc.collect()
    weights = start_peak_window()
    with torch.no_grad():
        for _ in range(2):
            forward(name, model, batch, args.hidden_states)
    peak = peak_rss_mib()
    print(json.dumps({"weights_mib": weights, "peak_mib": peak, "forward_mib": peak - weights}))


def measure_memory(name, args):
    command = [sys.executable, os.path.abspath(__file__), "--memory-child", name, "--batch", str(args.batch),
               "--length", str(args.length), "--threads", str(args.threads)]
    command += ["--hidden-states"] if args.hidden_states else []
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds, each times every implementation once")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    parser.add_argument("--no-eager", action="store_true", help="skip the transformers eager-attention row")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--hidden-states", action="store_true", help="both also return every layer's output "
                        "(minibert's default; transformers' output_hidden_states=True)")
    parser.add_argument("--bf16", action="store_true", help="add minibert and transformers (sdpa) under bfloat16 "
                        "autocast (weights float32), in the same rounds; pays only on CPUs with bf16 instructions")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        return memory_child(args.memory_child, args)

    torch.set_num_threads(args.threads)
    env = environment()
    print(f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, {env['cpu']}")
    names = ["minibert", "transformers (sdpa)"] + ([] if args.no_eager else ["transformers (eager)"])
    memory = {} if args.no_memory else {name: measure_memory(name, args) for name in names}  # while we are small

    models, batch = build_with_shared_weights(names), make_batch(args.batch, args.length)
    real = batch[1].bool()
    agreement = {}
    with torch.no_grad():
        reference = forward("minibert", models["minibert"], batch)
        for name in names[1:]:
            diff = (reference[real] - forward(name, models[name], batch)[real]).abs().max().item()
            assert diff <= 1e-4, f"{name}: MLM logits differ from minibert's by {diff:.2e}"
            print(f"parity: minibert vs {name}: max |diff| of the MLM logits of real tokens = {diff:.1e}")
        if args.bf16:
            for name in ("minibert", "transformers (sdpa)"):
                models[name + BF16] = models[name]
                fp32, bf16 = (forward(n, models[n], batch)[real] for n in (name, name + BF16))
                same = (fp32.argmax(-1) == bf16.argmax(-1)).sum().item()
                agreement[name + BF16] = {"same_top1": same, "tokens": int(real.sum()),
                                          "max_abs_diff": (fp32 - bf16).abs().max().item()}
                print(f"bf16 vs fp32, {name}: the same top-1 at {same}/{int(real.sum())} real tokens, max |diff| "
                      f"of the logits {agreement[name + BF16]['max_abs_diff']:.2f}")
            names += ["minibert" + BF16, "transformers (sdpa)" + BF16]

    times = {name: [] for name in names}
    with torch.no_grad():
        for r in range(args.warmup + args.rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                start = time.perf_counter()
                forward(name, models[name], batch, args.hidden_states)
                if r >= args.warmup:
                    times[name].append(time.perf_counter() - start)

    tokens = args.batch * args.length
    results = {"environment": env, "batch": args.batch, "length": args.length, "rounds": args.rounds,
               "all_hidden_states": args.hidden_states, "rows": {}}
    precision = "fp32 and bf16 autocast" if args.bf16 else "fp32"
    print(f"\nBERT-base MLM forward, batch {args.batch} x {args.length}, {precision}, {args.rounds} interleaved rounds, "
          f"{'returning every hidden state' if args.hidden_states else 'returning the logits only'}")
    print(f"{'implementation':27s} {'median ms':>9s} {'min ms':>7s} {'seq/s':>6s} {'tokens/s':>8s} "
          f"{'ours/theirs':>11s} {'weights':>8s} {'peak':>6s} {'+fwd':>5s} (MiB)")
    for name in names:
        median = statistics.median(times[name])
        ours = "minibert" + (BF16 if name.endswith(BF16) else "")     # the minibert row of the same precision
        ratio = statistics.median(t / o for t, o in zip(times[name], times[ours]))
        row = {"median_s": median, "min_s": min(times[name]), "all_s": times[name],
               "sequences_per_s": args.batch / median, "tokens_per_s": tokens / median,
               "ours_over_theirs": ratio, **memory.get(name, {}), **agreement.get(name, {})}
        results["rows"][name] = row
        mem = f"{row['weights_mib']:8.0f} {row['peak_mib']:6.0f} {row['forward_mib']:5.0f}" if name in memory else ""
        print(f"{name:27s} {median * 1e3:9.0f} {row['min_s'] * 1e3:7.0f} {row['sequences_per_s']:6.2f} "
              f"{row['tokens_per_s']:8.0f} {ratio:10.2f}x {mem}")
    print("ours/theirs: median over rounds of (their time / minibert's time, the same precision) in the same round; "
          "> 1: minibert faster")
    if memory:
        print("memory: a fresh process per implementation; weights = its RSS after building the model (Python, torch"
              " and transformers included); peak = VmHWM over 2 forward passes after resetting it via"
              " /proc/self/clear_refs; +fwd = peak - weights")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
