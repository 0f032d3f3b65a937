"""Does the MLM output layer read every hidden layer? (Kao et al. 2020, Finding 1)

BERT's masked-LM head (`MaskedLMHead`: dense -> GELU -> LayerNorm -> the word
embedding matrix as decoder) only ever saw the *last* layer in pretraining.
Kao et al. fed it every layer's hidden states instead, and it still
reconstructs the input tokens well ([Kao] section 3). Here, for any model:

    for each hidden state l = 0..L          (0 = embedding output, then one
                                             per executed layer, the order of
                                             `BertModelOutput.hidden_states`)
        logits_l = mlm_head(h_l)            at every real token position
        score    argmax(logits_l) == input token        -> top-1 accuracy
                 input token in top 5 of logits_l       -> top-5 accuracy
                 -log softmax(logits_l)[input token]    -> cross-entropy (nats)

Choices the paper does not state (docs/papers.md 1.3): real tokens only
([CLS], [SEP] and padding, the same at every position of their kind, would
inflate accuracy); unmasked input (can the head read the token a position
*holds*?), `mask_prob` adding the usual masked-LM number as context; ALBERT's
layer 0 is the embedding output after the E -> H projection. Encoders without
an MLM head get one from `fit_mlm_head`, trained on the last layer only.

Reference: [Kao] Kao, Wu, Chi, Hsieh, Lee 2020, arXiv:2001.09309.
"""

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.support import MiniBertError
from minibert.support.runtime import autocast, move_to_device
from minibert.model import MaskedLMHead


def encoded_batches(tokenizer, sentences, batch_size, max_length):
    """Batch dicts of (B, T) tensors, in input order; longer sentences cut to max_length."""
    for start in range(0, len(sentences), batch_size):
        yield tokenizer.batch_encode(sentences[start:start + batch_size], max_length=max_length)


def real_positions(input_ids, attention_mask, tokenizer):
    """(B, T) bool: the positions probed. Not padding, not [CLS], not [SEP]."""
    special = (input_ids == tokenizer.cls_id) | (input_ids == tokenizer.sep_id)
    return attention_mask.bool() & ~special


def hidden_states(model, batch, bf16=False):
    """The L + 1 hidden states of `model` for one batch, in float32 (bf16: under autocast). The model's
    own MLM output is asked for at no positions: the probe applies the head itself, to every layer, and
    the V-wide projection is most of a small model's compute."""
    nowhere = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    with torch.no_grad(), autocast(batch["input_ids"].device, bf16):
        output = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"], mlm_positions=nowhere)
    return [h.float() for h in output.hidden_states]


def max_length_for(model):
    return min(512, model.config.max_position_embeddings)


@dataclass
class Score:
    """Running totals for one layer; the fractions are computed at the end."""
    top1: int = 0
    top5: int = 0
    cross_entropy: float = 0.0   # summed over tokens, in nats
    tokens: int = 0

    def add(self, logits, targets):
        """logits (N, V), targets (N,). Returns the top-1 predictions (N,)."""
        # exercise: reconstruction-score
        k = min(5, logits.shape[-1])
        top = logits.topk(k, dim=-1).indices                  # (N, k), best first
        self.top1 += (top[:, 0] == targets).sum().item()
        self.top5 += (top == targets[:, None]).any(dim=-1).sum().item()
        self.cross_entropy += F.cross_entropy(logits.float(), targets, reduction="sum").item()
        self.tokens += len(targets)
        return top[:, 0]
        # end exercise

    def summary(self):
        n = max(self.tokens, 1)
        return dict(top1=self.top1 / n, top5=self.top5 / n, cross_entropy=self.cross_entropy / n, tokens=self.tokens)


@dataclass
class LayerResult:
    layer: int              # index into hidden_states: 0 = embeddings
    description: str        # what produced it, e.g. "layer 3" or "group 0, run 2"
    top1: float
    top5: float
    cross_entropy: float    # mean over tokens, nats
    tokens: int


@dataclass
class ProbeResult:
    model: str
    head: str                                   # "pretrained" or how it was fitted
    sentences: int
    tokens: int
    layers: list
    masked: Optional[dict] = None               # last layer on [MASK]ed positions (mask_prob given)
    examples: list = field(default_factory=list)  # [{"input": str, "layers": [str per layer]}]
    truncated: int = 0                          # sentences cut to the model's positions (the run counts them)
    max_length: int = 512                       # tokens per sentence the model takes, [CLS] and [SEP] included
    precision: str = "float32"                  # or "bfloat16 autocast" (probe_model's bf16)


def probe_model(model, tokenizer, sentences, *, mlm_head=None, batch_size=32, mask_prob=None, seed=0, show=0,
                descriptions=None, head_name="pretrained", model_name="", device="cpu", progress=False, bf16=False):
    """Score the MLM head (default: the model's own) on every hidden state of `model`. `show` keeps that
    many example reconstructions; `descriptions` labels the rows (default: from the config). bf16: the
    model and the head run under autocast; the scores are computed from float32 logits."""
    head = mlm_head if mlm_head is not None else model.mlm_head
    if head is None:
        raise MiniBertError(f"{model_name or 'the model'}: has no MLM head (a Hugging Face `BertModel` file?); "
                            f"give mlm_head, one fit_mlm_head fitted on its last layer")
    if not sentences:
        raise MiniBertError("no sentences to probe")
    model.eval().to(device)
    head.eval().to(device)
    word_embeddings = model.embeddings.word_embeddings.weight     # the tied decoder, (V, E)
    scores, examples = None, []
    batches = encoded_batches(tokenizer, sentences, batch_size, max_length_for(model))
    for batch in tqdm(batches, total=-(-len(sentences) // batch_size), desc="probing", unit="batch",
                      disable=not progress, leave=False):
        batch = move_to_device(batch, device)
        states = hidden_states(model, batch, bf16)
        if scores is None:
            scores = [Score() for _ in states]
        real = real_positions(batch["input_ids"], batch["attention_mask"], tokenizer)   # (B, T)
        targets = batch["input_ids"][real]                                              # (N,)
        predictions = []
        with torch.no_grad():
            for score, h in zip(scores, states):
                with autocast(device, bf16):
                    logits = head(h[real], word_embeddings)   # (N, H) -> (N, V)
                predictions.append(score.add(logits.float(), targets))
        examples += collect_examples(tokenizer, batch["input_ids"], real, predictions, show - len(examples))

    descriptions = descriptions or model.config.depth_labels()
    if len(descriptions) != len(scores):
        raise MiniBertError(f"descriptions: got {len(descriptions)} labels for {len(scores)} hidden states")
    layers = [LayerResult(layer=l, description=d, **s.summary())
              for l, (s, d) in enumerate(zip(scores, descriptions))]
    result = ProbeResult(model=model_name, head=head_name, sentences=len(sentences), tokens=scores[0].tokens,
                         layers=layers, examples=examples, max_length=max_length_for(model),
                         precision="bfloat16 autocast" if bf16 else "float32")
    if mask_prob is not None:
        result.masked = masked_fractions(model, head, tokenizer, sentences, mask_prob, seed, batch_size, device, bf16)
    return result


def collect_examples(tokenizer, input_ids, real, predictions, wanted):
    """Up to `wanted` examples: the input and each layer's argmax, decoded."""
    examples = []
    for row in range(min(max(wanted, 0), input_ids.shape[0])):
        start, n = real[:row].sum().item(), real[row].sum().item()     # predictions are flattened over the batch
        examples.append({"input": tokenizer.decode(input_ids[row][real[row]].tolist()),
                         "layers": [tokenizer.decode(p[start:start + n].tolist()) for p in predictions]})
    return examples


def masked_fractions(model, head, tokenizer, sentences, mask_prob, seed, batch_size, device="cpu", bf16=False):
    """Context: the masked-LM task. Replace a random `mask_prob` of the real
    tokens by [MASK] (always; not BERT's 80/10/10) and score the last layer
    there: top-1/top-5 as fractions (pretraining's masked_accuracy is a
    percentage). Drawn sentence by sentence: no batch size changes the draw."""
    generator = torch.Generator().manual_seed(seed)
    word_embeddings = model.embeddings.word_embeddings.weight
    score = Score()
    for batch in encoded_batches(tokenizer, sentences, batch_size, max_length_for(model)):
        real = real_positions(batch["input_ids"], batch["attention_mask"], tokenizer)
        chosen = torch.zeros_like(real)
        for row in range(real.shape[0]):
            columns = real[row].nonzero().squeeze(1)
            chosen[row, columns] = torch.rand(len(columns), generator=generator) < mask_prob
        masked = dict(batch, input_ids=batch["input_ids"].masked_fill(chosen, tokenizer.mask_id))
        masked, chosen = move_to_device(masked, device), chosen.to(device)
        last = hidden_states(model, masked, bf16)[-1]
        with torch.no_grad(), autocast(device, bf16):
            logits = head(last[chosen], word_embeddings)
        score.add(logits.float(), batch["input_ids"].to(device)[chosen])
    return dict(mask_prob=mask_prob, seed=seed, **score.summary())


def fit_mlm_head(model, tokenizer, sentences, *, steps=300, lr=1e-3, batch_size=256, seed=0, device="cpu",
                 progress=True, bf16=False):
    """Train a fresh `MaskedLMHead` on the last layer of a frozen `model` to reconstruct the unmasked
    input: what the probe then measures at every layer, the head seeing only the last one, as in
    pretraining (masked-LM training would teach it to *guess* words an encoder may not support).
    Trained: the head's dense layer, LayerNorm and output bias; the decoder stays the frozen word
    embeddings ([BERT] A.2). The frozen last layer is computed once for every real token (tokens x H
    floats); the head trains on random minibatches of `batch_size` positions. bf16: autocast, float32
    weights and loss. Returns (head in eval mode, final loss)."""
    model.eval().to(device)
    features, targets = [], []
    for batch in tqdm(encoded_batches(tokenizer, sentences, 64, max_length_for(model)), total=-(-len(sentences) // 64),
                      desc="encoding the fitting text", unit="batch", disable=not progress):
        batch = move_to_device(batch, device)
        real = real_positions(batch["input_ids"], batch["attention_mask"], tokenizer)
        features.append(hidden_states(model, batch, bf16)[-1][real])      # (N, H)
        targets.append(batch["input_ids"][real])
    features, targets = torch.cat(features), torch.cat(targets)
    if len(targets) == 0:
        raise MiniBertError("sentences: no tokens besides [CLS]/[SEP] to fit the head on")
    with torch.random.fork_rng(devices=[]):     # seeded initial weights, global RNG untouched
        torch.manual_seed(seed)
        head = MaskedLMHead(model.config)
        head.apply(model.init_weights)            # Google's init, as for a new model
    head.to(device).train()
    word_embeddings = model.embeddings.word_embeddings.weight.detach()   # frozen decoder
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    shown = tqdm(range(steps), desc="fitting MLM head", unit="step", disable=not progress)
    for _ in shown:
        pick = torch.randint(len(targets), (batch_size,), generator=generator).to(device)
        with autocast(device, bf16):
            logits = head(features[pick], word_embeddings)
        loss = F.cross_entropy(logits.float(), targets[pick])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        shown.set_postfix(loss=f"{loss.item():.3f}")
    return head.eval(), loss.item()
