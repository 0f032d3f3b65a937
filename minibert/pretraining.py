"""Masked-LM pretraining: BERT's masked batches from a tokenized corpus, the
objective and its held-out evaluation.

Objectives ([BERT] 3.1, [ALBERT] 4.2):
  MLM  15% of the real tokens are chosen (`mask_tokens`; whole-word masking:
       whole words, a piece and its ## continuations); of those 80% become
       [MASK], 10% a random token, 10% stay as they are (`corrupt_chosen`).
  NSP  (BERT) half the time segment B is replaced by text from another
       document; label 1 = "random", 0 = "is next".
  SOP  (ALBERT) half the time A and B swap places; label 1 = "swapped".

`split_sentences` cuts each paragraph of the corpus into sentences, the units
that NSP and SOP cut a block between; `pack_blocks` groups consecutive
sentences of one document into blocks of at most max_seq_len - 3 tokens (room for [CLS] A [SEP] B [SEP]), and
`PretrainingBatches` turns a global batch number into a batch. All that is
random (shuffling, sentence pairs, masking) is drawn from a generator seeded
by (seed, epoch, batch number), so masks are fresh each epoch, a resumed run
sees exactly the batches it would have seen, and every process of a
distributed run agrees on the whole global batch and takes its own slice
(the corpus is split and tokenized once, into support/caches.py's cache,
which runs split_sentences).

The MLM loss is the cross-entropy of the word piece at each chosen position,
averaged over all chosen positions of the step ([BERT] 3.1, Task #1). The MLM
head runs on the chosen positions only (`mlm_positions`): for a small model
the V-wide vocabulary projection is most of the compute, and 85% of it would
be thrown away.

The same objective pretrains BERT and ALBERT (MLM, optionally with NSP or
SOP) and DeBERTa (MLM only, predicted through the Enhanced Mask Decoder
([DeBERTa] 3.2; docs/deberta.md 2): the model's `mlm_logits` already run the
last layer twice more with the absolute positions added, so the objective is
the same code as BERT's).

The run around it (the corpus, the output folder, resume, saving the model)
is train_mlm.py's code, minibert/commands/train_mlm.py; the loop itself
is training.training_step.
"""

import math
import re

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.heads import IGNORE_INDEX
from minibert.support import MiniBertError
from minibert.support.files import vocabulary
from minibert.support.runtime import generator_for, move_to_device


# ----------------------------------------------------------------------------
# The data: masking, sentences, packing, batches
# ----------------------------------------------------------------------------


def mask_tokens(input_ids, special_mask, word_starts, tokenizer_ids, generator, mask_prob=0.15,
                whole_word=False, max_predictions=None):
    """Choose and corrupt positions for MLM ([BERT] 3.1, Task #1).

    input_ids (B, T); special_mask (B, T) True where [CLS]/[SEP]/[PAD];
    word_starts (B, T) True where a token begins a word (not a ## piece).
    Per sequence, exactly round(mask_prob * real tokens) positions (at least 1)
    are chosen, as in Google's create_pretraining_data.py. Returns
    (corrupted input_ids, labels (B, T) with IGNORE_INDEX (-100) where not chosen, chosen mask).
    """
    mask_id, vocab_size, first_normal_id = tokenizer_ids
    B, T = input_ids.shape
    real = ~special_mask
    counts = (real.sum(1).float() * mask_prob).round().clamp(min=1).long()
    if max_predictions is not None:
        counts = counts.clamp(max=max_predictions)
    scores = torch.rand(B, T, generator=generator)
    if whole_word:
        # Number the words of each row (a word = a piece and its ## pieces)
        # and give all pieces of word w the same random score, the one drawn
        # at index w; then words are taken in score order until the count is
        # reached (a word that would overshoot is skipped).
        word_index = word_starts.long().cumsum(1) - 1
        scores = scores.gather(1, word_index.clamp(min=0))
    scores = scores.masked_fill(special_mask, float("inf"))
    order = scores.argsort(dim=1)
    chosen = torch.zeros(B, T, dtype=torch.bool)
    if whole_word:
        for b in range(B):
            taken, seen = 0, set()
            for t in order[b].tolist():              # positions by score; a word's pieces share one score
                if not real[b, t]:
                    break                            # only specials (score inf) remain
                word = int(word_index[b, t])
                if word in seen:
                    continue
                seen.add(word)
                members = real[b] & (word_index[b] == word)
                size = int(members.sum())
                if taken + size > counts[b]:
                    continue                         # this word would overshoot; try a shorter one
                chosen[b] |= members
                taken += size
                if taken >= counts[b]:
                    break
    else:
        rank = order.argsort(dim=1)
        chosen = (rank < counts[:, None]) & real

    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE_INDEX))
    corrupted = corrupt_chosen(input_ids, chosen, mask_id, first_normal_id, vocab_size, generator)
    return corrupted, labels, chosen


def corrupt_chosen(input_ids, chosen, mask_id, first_normal_id, vocab_size, generator):
    """BERT's 80/10/10 rule ([BERT] 3.1 and A.1): each chosen position becomes
    [MASK] with probability 0.8, a random normal token (ids first_normal_id ..
    vocab_size - 1, never a special token: `normal_ids`) with 0.1, and stays
    unchanged with 0.1. The model cannot tell which of its inputs were replaced, so it must
    keep a good representation of every token, not just of [MASK].

    Draw from `generator`, in this order, one uniform number per position
    (torch.rand of the input's shape), whose value alone decides the fate,
    then one random id per position (torch.randint): a run is reproducible,
    and the grader compares your tensor with the reference's."""
    # exercise: mlm-masking
    corrupted = input_ids.clone()
    roll = torch.rand(input_ids.shape, generator=generator)                    # one uniform draw per position
    random_ids = torch.randint(first_normal_id, vocab_size, input_ids.shape, generator=generator)
    corrupted[chosen & (roll < 0.8)] = mask_id                                  # 80%: [MASK]
    use_random = chosen & (roll >= 0.8) & (roll < 0.9)                          # 10%: a random token
    corrupted[use_random] = random_ids[use_random]
    return corrupted                                                            # 10%: unchanged
    # end exercise


def normal_ids(special_ids, vocab_size):
    """(first, end): the longest run of ids first .. end - 1 holding no
    special token, from which the 10% random replacements are drawn. BERT's
    special tokens come first ([PAD] 0 .. [MASK] 103 in Google's vocabularies,
    0 .. 4 in minibert's), DeBERTa v3's [MASK] comes last (128000), so neither
    "after the last special id" nor "up to the vocabulary size" fits both."""
    bounds = [-1, *sorted(special_ids), vocab_size]
    gaps = [(bounds[i] + 1, bounds[i + 1]) for i in range(len(bounds) - 1)]
    return max(gaps, key=lambda gap: gap[1] - gap[0])


# A sentence ends at . ! or ? (and any closing quotes or brackets), where
# whitespace follows and the next sentence opens with a capital letter or a
# digit (after any opening quotes or brackets).
SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u201d\u2019)\]]*\s+(?=[\"'\u201c\u2018(\[]*[A-Z0-9])")


def split_sentences(paragraph):
    """A paragraph -> its sentences, by SENTENCE_END: 'He ran. "Stop!" she
    cried.' -> 'He ran.', '"Stop!" she cried.'.

    Why sentences: BERT's NSP ([BERT] 3.1, Task #2) and ALBERT's SOP ([ALBERT]
    4.2) cut a block of consecutive sentences between two of them into
    segments A and B, so a segment is whole sentences ("a sentence" there is
    "an arbitrary span of contiguous text", cut at sentence ends). Google's
    create_pretraining_data.py reads a corpus with one sentence per line,
    split beforehand; this simple rule does it for plain text (it splits after
    "Mr." before a capital too, which is good enough for packing)."""
    return [s for s in SENTENCE_END.split(paragraph.strip()) if s]


def pack_blocks(cache, max_tokens):
    """Split each document into blocks of consecutive sentences holding at most
    `max_tokens` tokens. A sentence longer than that is cut into pieces.
    Returns a list of blocks, each a list of (start, end) token spans, one per
    sentence (or piece)."""
    blocks, current, length = [], [], 0
    starts, documents = cache.sentence_starts, cache.sentence_documents
    for i in range(len(documents)):
        if current and (documents[i] != documents[i - 1]):
            blocks.append(current)
            current, length = [], 0
        start, end = int(starts[i]), int(starts[i + 1])
        for piece_start in range(start, end, max_tokens):
            piece = (piece_start, min(end, piece_start + max_tokens))
            if current and length + piece[1] - piece[0] > max_tokens:
                blocks.append(current)
                current, length = [], 0
            current.append(piece)
            length += piece[1] - piece[0]
    if current:
        blocks.append(current)
    return blocks


def continuation_flags(tokenizer):
    """For each vocabulary id: is it the continuation of a word? WordPiece
    marks continuations with '##'; SentencePiece marks word *starts* with '\u2581'."""
    if tokenizer.kind == "sentencepiece":
        return [not token.startswith("\u2581") for token in vocabulary(tokenizer)]
    return [token.startswith("##") for token in vocabulary(tokenizer)]


class PretrainingBatches:
    """Global batch number -> dict of tensors, deterministic (see module docstring).

    Item i of epoch e is made from the blocks at positions
    [i * batch_size, (i + 1) * batch_size) of that epoch's shuffled order.
    """

    def __init__(self, cache, blocks, tokenizer, max_seq_len, batch_size, seed, pair_objective="none",
                 mask_prob=0.15, whole_word=False):
        if pair_objective not in ("none", "nsp", "sop"):
            raise MiniBertError(f"pair_objective: expected none, nsp or sop, got {pair_objective!r}")
        self.cache, self.blocks = cache, blocks
        self.max_seq_len, self.batch_size, self.seed = max_seq_len, batch_size, seed
        self.pair_objective, self.mask_prob, self.whole_word = pair_objective, mask_prob, whole_word
        self.cls_id, self.sep_id, self.pad_id = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
        first_normal_id, end = normal_ids(tokenizer.special_ids, tokenizer.vocab_size)
        self.mask_ids = (tokenizer.mask_id, end, first_normal_id)
        self.is_continuation = torch.tensor(continuation_flags(tokenizer), dtype=torch.bool)
        self.batches_per_epoch = len(blocks) // batch_size
        if self.batches_per_epoch == 0:
            raise MiniBertError(f"the corpus makes {len(blocks)} sequences of up to {max_seq_len} tokens, fewer "
                                f"than one batch of {batch_size}; use a smaller batch_size or max_seq_len, "
                                f"or more text")

    def __len__(self):
        return self.batches_per_epoch

    def tokens_of(self, spans):
        return np.concatenate([self.cache.tokens[s:e] for s, e in spans]).astype(np.int64)

    def make_pair(self, block, rng):
        """Split a block into segments A and B and apply NSP or SOP. Returns (a, b, label)."""
        if self.pair_objective == "none":
            return self.tokens_of(block), None, 0
        tokens = self.tokens_of(block)
        if len(block) >= 2:
            cut = int(torch.randint(1, len(block), (1,), generator=rng))
            a, b = self.tokens_of(block[:cut]), self.tokens_of(block[cut:])
        else:  # one long sentence: cut it in the middle
            cut = max(1, len(tokens) // 2)
            a, b = tokens[:cut], tokens[cut:]
        if len(b) == 0:
            b, a = a[len(a) // 2:], a[:len(a) // 2]
        label = int(torch.rand(1, generator=rng) < 0.5)
        if label and self.pair_objective == "sop":
            a, b = b, a
        elif label:  # NSP: B from a random other block, trimmed to the same length
            other = self.blocks[int(torch.randint(len(self.blocks), (1,), generator=rng))]
            b = self.tokens_of(other)[:len(b)]
        return a, b, label

    def __getitem__(self, global_index):
        epoch, index = divmod(global_index, self.batches_per_epoch)
        order = torch.randperm(len(self.blocks), generator=generator_for(self.seed, "order", epoch))
        rng = generator_for(self.seed, "batch", epoch, index)
        rows, types, labels = [], [], []
        for block_index in order[index * self.batch_size:(index + 1) * self.batch_size].tolist():
            a, b, label = self.make_pair(self.blocks[block_index], rng)
            row = [self.cls_id, *a.tolist(), self.sep_id]
            segment = [0] * len(row)
            if b is not None:
                row += [*b.tolist(), self.sep_id]
                segment += [1] * (len(b) + 1)
            rows.append(row[:self.max_seq_len])
            types.append(segment[:self.max_seq_len])
            labels.append(label)
        T = max(map(len, rows))
        input_ids = torch.full((len(rows), T), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((len(rows), T), dtype=torch.long)
        for i, (row, segment) in enumerate(zip(rows, types)):
            input_ids[i, :len(row)] = torch.tensor(row)
            token_type_ids[i, :len(segment)] = torch.tensor(segment)
        attention_mask = (input_ids != self.pad_id).long()
        special = (input_ids == self.cls_id) | (input_ids == self.sep_id) | (attention_mask == 0)
        word_starts = ~self.is_continuation[input_ids] | special
        corrupted, mlm_labels, _ = mask_tokens(input_ids, special, word_starts, self.mask_ids, rng,
                                               self.mask_prob, self.whole_word)
        batch = dict(input_ids=corrupted, token_type_ids=token_type_ids, attention_mask=attention_mask,
                     mlm_labels=mlm_labels)
        if self.pair_objective != "none":
            batch["pair_labels"] = torch.tensor(labels)
        return batch


# ----------------------------------------------------------------------------
# The objective: the MLM loss (and NSP's or SOP's), and its held-out evaluation
# ----------------------------------------------------------------------------


def masked_lm_loss(model, batch):
    """The MLM term ([BERT] 3.1, Task #1) and the model output: cross-entropy
    of the original word piece at each chosen position (mlm_labels != IGNORE_INDEX),
    summed, and how many of them the argmax got right. Sums, not means: the
    caller divides by the count over the whole step (see training.py)."""
    # exercise: mlm-loss
    positions = batch["mlm_labels"] != IGNORE_INDEX
    output = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"], mlm_positions=positions)
    labels = batch["mlm_labels"][positions]
    logits = output.selected_mlm_logits.float()              # (N, V), N = chosen positions
    return (F.cross_entropy(logits, labels, reduction="sum"), (logits.argmax(-1) == labels).sum()), output
    # end exercise


class MaskedLMObjective:
    """Loss terms for `training.training_step`: "mlm", plus "nsp" or "sop" when the
    batches carry sentence-pair labels."""

    def __init__(self, pair_objective="none"):
        self.pair_objective = pair_objective

    def counts(self, batch):
        counts = {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum())}
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
def evaluate_mlm(model, batches, num_batches, device, progress=False):
    """Masked-token accuracy (percent) and perplexity (exp of the mean
    cross-entropy) on the first `num_batches` held-out batches (the same
    masks every time), and how many masked tokens they hold."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for i in tqdm(range(min(num_batches, len(batches))), desc="held-out evaluation", leave=False,
                  disable=not progress, dynamic_ncols=True):
        batch = move_to_device(batches[i], device)
        (batch_loss, batch_correct), _ = masked_lm_loss(model, batch)
        loss_sum += float(batch_loss)
        correct += int(batch_correct)
        count += int((batch["mlm_labels"] != IGNORE_INDEX).sum())
    mean_loss = loss_sum / max(count, 1)
    return {"masked_accuracy": 100.0 * correct / max(count, 1), "perplexity": math.exp(min(mean_loss, 50.0)),
            "masked_tokens": count}
