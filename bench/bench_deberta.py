"""DeBERTa inference benchmark: minibert's DebertaModel vs
transformers' DebertaV2Model, and against minibert's BERT of the same size.

Models (random weights, fp32, CPU, eval mode, torch.no_grad), all bare
encoders returning the last hidden state (no MLM head, no pooler):

  minibert DeBERTa      DeBERTa-v3-base's shape and switches: L12 H768 A12
                        I3072, vocab 128100, c2p|p2c, 256 log buckets over
                        512 positions, keys shared with the content
                        projections, LayerNorm'd relative table
                        (minibert/deberta.py; called with all_hidden_states=False)
  transformers DeBERTa  DebertaV2Model with the SAME weights: ours written out
                        under Hugging Face names by minibert.checkpoints'
                        huggingface_state_dict (the map save_pretrained uses).
                        The two must agree to 1e-4 at real positions before
                        anything is timed.
  minibert BERT         BertModel of the same size (L12 H768 A12 I3072, the
                        same vocabulary), the cost of disentangled attention:
                        the DeBERTa/BERT time ratio.

Inputs: --batches different batches of B x T tokens; in each, some rows end
in padding (a quarter of the length in row 1, half in row 2, ...), as a
real batch of sentences would.

Timing is interleaved: after a warm-up, each round times every model on every
batch, alternating the order of the models (A B C, C B A, ...). The time per
batch is the median over rounds of the round's total / number of batches; a
ratio is the median over rounds of the ratio within the same round, which
cancels slow drifts of a shared machine.

    python bench/bench_deberta.py [--rounds 6] [--threads 2] [--json results.json]
    python bench/bench_deberta.py --layers 2 --rounds 2     # a quick check that it runs
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment  # noqa: E402
from minibert.checkpoints import huggingface_state_dict  # noqa: E402
from minibert.deberta import DebertaConfig, DebertaModel  # noqa: E402
from minibert.model import BertConfig, BertModel  # noqa: E402

OURS, THEIRS, BERT = "minibert DeBERTa", "transformers DeBERTa", "minibert BERT"
TOLERANCE = 1e-4


def deberta_config(args):
    """DeBERTa-v3-base (its config.json) at the sizes the flags give."""
    return DebertaConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, intermediate_size=args.intermediate, hidden_act="gelu",
                         max_position_embeddings=512, type_vocab_size=0, model_type="deberta-v2",
                         relative_attention=True, max_relative_positions=-1, position_biased_input=False,
                         pos_att_type="p2c|c2p", position_buckets=args.buckets, share_att_key=True,
                         norm_rel_ebd="layer_norm")


def bert_config(args):
    return BertConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, intermediate_size=args.intermediate)


def build(args):
    """{name: model}: our DeBERTa (seed 0), transformers' with its weights, our BERT (seed 0)."""
    torch.manual_seed(0)
    ours = DebertaModel(deberta_config(args), with_mlm_head=False).eval()
    theirs = transformers.DebertaV2Model(transformers.DebertaV2Config(**ours.config.to_dict())).eval()
    tensors = {name.removeprefix("deberta."): tensor for name, tensor in huggingface_state_dict(ours).items()}
    theirs.load_state_dict(tensors, strict=True)
    torch.manual_seed(0)
    bert = BertModel(bert_config(args), with_pooler=False, with_mlm_head=False, with_pair_head=False).eval()
    return {OURS: ours, THEIRS: theirs, BERT: bert}


def make_batches(args):
    """(input_ids, attention_mask, token_type_ids) per batch; row r of batch k
    loses ((r + k) mod 4) / 4 of its length to padding."""
    batches = []
    for k in range(args.batches):
        generator = torch.Generator().manual_seed(k)
        input_ids = torch.randint(1000, args.vocab - 100, (args.batch, args.length), generator=generator)
        attention_mask = torch.ones(args.batch, args.length, dtype=torch.long)
        for row in range(args.batch):
            padding = args.length * ((row + k) % 4) // 4
            if padding:
                attention_mask[row, -padding:] = 0
        input_ids[attention_mask == 0] = 0
        batches.append((input_ids, attention_mask, torch.zeros_like(input_ids)))
    return batches


def forward(name, model, batch):
    """The last hidden state, (B, T, H)."""
    input_ids, attention_mask, token_type_ids = batch
    if name == THEIRS:
        output = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return output.last_hidden_state
    return model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                 all_hidden_states=False).last_hidden_state


def check_parity(models, batches):
    """Our DeBERTa and transformers' agree at every real position of every batch."""
    worst = 0.0
    with torch.no_grad():
        for batch in batches:
            real = batch[1].bool()
            diff = (forward(OURS, models[OURS], batch)[real] - forward(THEIRS, models[THEIRS], batch)[real]).abs()
            worst = max(worst, diff.max().item())
    assert worst <= TOLERANCE, f"last hidden states differ from transformers' by {worst:.2e} > {TOLERANCE}"
    print(f"parity: minibert vs transformers DeBERTa, last hidden state at real positions of {len(batches)} "
          f"batches: max |diff| {worst:.1e}")


def time_rounds(models, batches, rounds, warmup):
    """{name: [seconds per batch, one per timed round]}, interleaved."""
    names = list(models)
    times = {name: [] for name in names}
    with torch.no_grad():
        for r in range(warmup + rounds):
            for name in (names if r % 2 == 0 else names[::-1]):
                start = time.perf_counter()
                for batch in batches:
                    forward(name, models[name], batch)
                if r >= warmup:
                    times[name].append((time.perf_counter() - start) / len(batches))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds, each times every model on every batch")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--batches", type=int, default=3, help="different batches per round (default 3)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--vocab", type=int, default=128100, help="DeBERTa v3's 128,100 embedding rows")
    parser.add_argument("--buckets", type=int, default=256, help="position_buckets (default 256, as v3)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    env = environment()
    print(f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, {env['cpu']}")
    models, batches = build(args), make_batches(args)
    check_parity(models, batches)
    times = time_rounds(models, batches, args.rounds, args.warmup)

    def ratio(slow, fast):   # median over rounds of time(slow) / time(fast) in the same round
        return statistics.median(s / f for s, f in zip(times[slow], times[fast]))

    real_tokens = sum(int(b[1].sum()) for b in batches) / len(batches)
    shape = f"L{args.layers} H{args.hidden} A{args.heads} I{args.intermediate} V{args.vocab}"
    print(f"\nencoder forward, {shape}, {args.batches} batches of {args.batch} x {args.length} "
          f"({real_tokens:.0f} real tokens each on average), fp32, no_grad, {args.rounds} interleaved rounds")
    print(f"{'model':21s} {'median ms/batch':>15s} {'min ms':>7s} {'real tokens/s':>13s}")
    results = {"environment": env, "shape": shape, "buckets": args.buckets, "batch": args.batch,
               "length": args.length, "batches": args.batches, "rounds": args.rounds, "rows": {}}
    for name in models:
        median = statistics.median(times[name])
        results["rows"][name] = {"median_s": median, "min_s": min(times[name]), "all_s": times[name],
                                 "real_tokens_per_s": real_tokens / median}
        print(f"{name:21s} {median * 1e3:15.0f} {min(times[name]) * 1e3:7.0f} {real_tokens / median:13.0f}")
    results["ours_over_transformers"] = ratio(THEIRS, OURS)
    results["deberta_over_bert_time"] = ratio(OURS, BERT)
    verdict = "meets" if results["ours_over_transformers"] >= 1.0 else "below"
    print(f"minibert DeBERTa vs transformers: {results['ours_over_transformers']:.2f}x "
          f"(their time / ours; > 1: ours faster; target 1.0x: {verdict})")
    print(f"cost of DeBERTa over BERT of the same size (minibert): {results['deberta_over_bert_time']:.2f}x the time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
