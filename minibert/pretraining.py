"""Masked-LM pretraining: the objective, held-out evaluation, and the run
that train_mlm.py starts.

The MLM loss is the cross-entropy of the word piece at each chosen position,
averaged over all chosen positions of the step ([BERT] 3.1, Task #1). The MLM
head runs on the chosen positions only (`mlm_positions`): for a small model
the V-wide vocabulary projection is most of the compute, and 85% of it would
be thrown away.
"""

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from minibert.checkpoints import save_pretrained
from minibert.devices import move_to_device
from minibert.errors import MiniBertError
from minibert.model import BertModel
from minibert.pretraining_data import (PretrainingBatches, TokenCache, build_token_cache, check_token_cache,
                                      is_token_cache, pack_blocks)
from minibert.training import Prefetched, TrainingConfig, load_checkpoint, setup_context, train


def masked_lm_loss(model, batch):
    """The MLM term ([BERT] 3.1, Task #1) and the model output: cross-entropy
    of the original word piece at each chosen position (mlm_labels != -100),
    summed, and how many of them the argmax got right. Sums, not means: the
    caller divides by the count over the whole step (see training.py)."""
    positions = batch["mlm_labels"] != -100
    output = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"], mlm_positions=positions)
    labels = batch["mlm_labels"][positions]
    logits = output.mlm_logits.float()                       # (N, V), N = chosen positions
    return (F.cross_entropy(logits, labels, reduction="sum"), (logits.argmax(-1) == labels).sum()), output


class MaskedLMObjective:
    """Loss terms for `training.train`: "mlm", plus "nsp" or "sop" when the
    batches carry sentence-pair labels."""

    def __init__(self, pair_objective="none"):
        self.pair_objective = pair_objective

    def counts(self, batch):
        counts = {"mlm": int((batch["mlm_labels"] != -100).sum())}
        if self.pair_objective != "none":
            counts[self.pair_objective] = len(batch["pair_labels"])
        return counts

    def losses(self, model, batch):
        mlm, output = masked_lm_loss(model, batch)
        terms = {"mlm": mlm}
        if self.pair_objective != "none":
            pair_logits = output.pair_logits.float()
            pair_labels = batch["pair_labels"]
            terms[self.pair_objective] = (F.cross_entropy(pair_logits, pair_labels, reduction="sum"),
                                          (pair_logits.argmax(-1) == pair_labels).sum())
        return terms


@torch.no_grad()
def evaluate_mlm(model, batches, num_batches, device):
    """Masked-token accuracy and perplexity (exp of the mean cross-entropy) on
    the first `num_batches` held-out batches (the same masks every time)."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for i in range(min(num_batches, len(batches))):
        batch = move_to_device(batches[i], device)
        (batch_loss, batch_correct), _ = masked_lm_loss(model, batch)
        loss_sum += float(batch_loss)
        correct += int(batch_correct)
        count += int((batch["mlm_labels"] != -100).sum())
    mean_loss = loss_sum / max(count, 1)
    return {"masked_accuracy": correct / max(count, 1), "perplexity": math.exp(min(mean_loss, 50.0)),
            "masked_tokens": count}


def corpus_batches(files, tokenizer, cache_dir, max_seq_len, batch_size, seed, pair_objective, mask_prob,
                   whole_word, progress=True):
    if len(files) == 1 and is_token_cache(files[0]):
        cache = TokenCache(check_token_cache(files[0], tokenizer))
    elif any(is_token_cache(f) for f in files):
        raise MiniBertError("a prepared token cache must be the only --corpus (or --heldout-corpus) entry")
    else:
        cache = TokenCache(build_token_cache(files, tokenizer, cache_dir, progress=progress))
    blocks = pack_blocks(cache, max_seq_len - 3)
    return PretrainingBatches(cache, blocks, tokenizer, max_seq_len, batch_size, seed, pair_objective,
                              mask_prob, whole_word)


def text_files(paths, what):
    """Expand folders into their *.txt files (sorted); keep files as given."""
    files = []
    for path in map(Path, paths):
        if is_token_cache(path):
            files.append(path)  # a corpus tokenized earlier (see build_token_cache)
        elif path.is_dir():
            found = sorted(path.glob("*.txt"))
            if not found:
                raise MiniBertError(f"{what} {path}: folder has no *.txt files")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise MiniBertError(f"{what} {path}: no such file or folder")
    return files


def split_heldout(files, heldout_names):
    """Hold out the corpus files whose names contain one of `heldout_names`."""
    heldout = [f for f in files if any(name in f.name for name in heldout_names)]
    missing = [n for n in heldout_names if not any(n in f.name for f in files)]
    if missing:
        raise MiniBertError(f"--heldout {missing[0]!r}: no corpus file name contains it")
    return [f for f in files if f not in heldout], heldout


def pretrain(corpus, output, model_config, tokenizer, *, heldout=(), max_seq_len=128, batch_size=128,
             grad_accum_steps=1, steps=10000, learning_rate=5e-4, warmup_steps=1000, weight_decay=0.01,
             max_grad_norm=1.0, seed=0, pair_objective="none", mask_prob=0.15, whole_word=False,
             eval_every=1000, eval_batches=20, checkpoint_every=1000, max_minutes=None, resume=False,
             device="auto", num_workers=0, cache_dir=None, progress=True):
    """Pretrain a BertModel from scratch with MLM (+ NSP/SOP) and save it in
    Hugging Face layout in `output`. Returns the training summary."""
    context = setup_context(device)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    cache_dir = Path(cache_dir) if cache_dir else output / "cache"
    if model_config.vocab_size != tokenizer.vocab_size:
        raise MiniBertError(f"model config vocab_size {model_config.vocab_size} != the vocabulary's "
                            f"{tokenizer.vocab_size} tokens")
    if max_seq_len > model_config.max_position_embeddings:
        raise MiniBertError(f"--max-seq-len {max_seq_len} exceeds max_position_embeddings "
                            f"{model_config.max_position_embeddings}")
    global_batch = batch_size  # rows per micro-batch, all processes together
    if global_batch % context.world_size:
        raise MiniBertError(f"--batch-size {batch_size} must divide evenly over {context.world_size} processes")

    # Rank 0 tokenizes first and the others wait, so the cache is built once.
    if context.distributed and not context.is_main:
        torch.distributed.barrier()
    train_batches = corpus_batches(corpus, tokenizer, cache_dir, max_seq_len, global_batch, seed,
                                   pair_objective, mask_prob, whole_word, progress and context.is_main)
    heldout_batches = (corpus_batches(heldout, tokenizer, cache_dir, max_seq_len, 64, seed + 1, pair_objective,
                                      mask_prob, whole_word, progress and context.is_main) if heldout else None)
    if context.distributed and context.is_main:
        torch.distributed.barrier()

    with_pair = pair_objective != "none"
    torch.manual_seed(seed)
    model = BertModel(model_config, with_pooler=with_pair, with_mlm_head=True, with_pair_head=with_pair)
    run_config = {"model_config": model_config.to_dict(), "total_steps": steps, "batch_size": batch_size,
                  "seed": seed, "grad_accum_steps": grad_accum_steps, "max_seq_len": max_seq_len,
                  "pair_objective": pair_objective, "mask_prob": mask_prob, "whole_word": whole_word,
                  "learning_rate": learning_rate, "warmup_steps": warmup_steps,
                  "corpus": [str(f) for f in corpus], "heldout": [str(f) for f in heldout]}
    config = TrainingConfig(total_steps=steps, learning_rate=learning_rate, weight_decay=weight_decay,
                            warmup_steps=warmup_steps, max_grad_norm=max_grad_norm,
                            grad_accum_steps=grad_accum_steps, seed=seed, eval_every=eval_every,
                            checkpoint_every=checkpoint_every, max_minutes=max_minutes)
    checkpoint_path = output / "checkpoint.pt"
    start = 0
    if resume and checkpoint_path.is_file():
        start = load_checkpoint(checkpoint_path)["step"]
    batches = train_batches
    if num_workers > 0:
        batches = Prefetched(train_batches, start * grad_accum_steps, steps * grad_accum_steps, num_workers)
    evaluate = None
    if heldout_batches is not None:
        evaluate = lambda m: evaluate_mlm(m, heldout_batches, eval_batches, context.device)
    if context.is_main:
        epochs = steps * grad_accum_steps / len(train_batches)
        tqdm.write(f"{model.num_parameters():,} parameters; {len(train_batches.blocks):,} training sequences, "
                   f"{len(train_batches):,} batches per epoch; {steps:,} steps = {epochs:.2f} epochs")
    summary = train(model, batches, MaskedLMObjective(pair_objective), config, context, checkpoint_path,
                    run_config=run_config, evaluate=evaluate, resume=resume, progress=progress)
    if context.is_main:
        save_pretrained(model.to("cpu"), output, tokenizer=tokenizer)
    summary["parameters"] = model.num_parameters()
    summary["run_config"] = run_config
    return summary
