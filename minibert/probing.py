"""Does the MLM output layer read every hidden layer? (Kao et al. 2020, Finding 1)

BERT's masked-LM head (`MaskedLMHead`: dense -> GELU -> LayerNorm -> the word
embedding matrix as decoder) only ever saw the *last* layer's hidden states in
pretraining. Kao et al. fed it the hidden states of every layer instead and
found that it still reconstructs the input tokens well ([Kao] section 3).
This module asks the same question of any minibert model:

    for each hidden state l = 0..L          (0 = embedding output, then one
                                             per executed layer, the order of
                                             `BertModelOutput.hidden_states`)
        logits_l = mlm_head(h_l)            at every real token position
        score    argmax(logits_l) == input token        -> top-1 accuracy
                 input token in top 5 of logits_l       -> top-5 accuracy
                 -log softmax(logits_l)[input token]    -> cross-entropy (nats)

Choices the paper does not state (docs/papers.md 1.3), made here:

* Positions: real tokens only. [CLS] and [SEP] are excluded (they are the
  same at every position of their kind, so they would inflate accuracy
  without saying anything about the sentence), and so is padding.
* Input: unmasked. The question is whether the head can read the token a
  position *holds* from any layer, so the model sees the sentence as it is.
  `mask_prob` adds, as context, the usual masked-LM number: mask a random
  fraction of real tokens with [MASK] and score the last layer there.
* ALBERT: layer 0 is the embedding output *after* the E -> H projection
  (`embedding_hidden_mapping_in`), the only H-wide thing the head can read.

Encoders without an MLM head (e.g. sentence-embedding models such as
all-MiniLM-L6-v2) get one fitted by `fit_mlm_head`: a fresh head trained on
the last layer only, with everything else frozen, then applied to every layer,
which is the paper's question asked of any encoder.

Reference: [Kao] Kao, Wu, Chi, Hsieh, Lee 2020, "BERT's output layer recognizes
all hidden layers? Some intriguing phenomena and a simple way to boost BERT",
arXiv:2001.09309.
"""

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.support.devices import autocast, move_to_device
from minibert.support.errors import MiniBertError
from minibert.support.fileio import write_json
from minibert.support.plots import plot_probe
from minibert.model import MaskedLMHead

DEFAULT_SENTENCES = Path(__file__).parent / "data" / "probe_sentences.txt"


# ----------------------------------------------------------------------------
# Input sentences
# ----------------------------------------------------------------------------


def read_sentences(path=None, max_sentences=None):
    """One sentence per line (blank lines skipped). None reads the ~125 varied
    English sentences shipped with minibert for this probe."""
    path = Path(path) if path is not None else DEFAULT_SENTENCES
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise MiniBertError(f"{path}: file not found; expected a text file with one sentence per line") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MiniBertError(f"{path}: cannot read as UTF-8 text ({e})") from None
    sentences = [line.strip() for line in lines if line.strip()]
    if not sentences:
        raise MiniBertError(f"{path}: no sentences; expected one sentence per line")
    if max_sentences is not None:
        if max_sentences < 1:
            raise MiniBertError(f"--max-sentences {max_sentences}: expected a positive integer")
        sentences = sentences[:max_sentences]
    return sentences


def encoded_batches(tokenizer, sentences, batch_size, max_length):
    """Yield batch dicts of (B, T) tensors, in input order; sentences longer
    than the model's positions are truncated."""
    for start in range(0, len(sentences), batch_size):
        yield tokenizer.batch_encode(sentences[start:start + batch_size], max_length=max_length)


def real_positions(input_ids, attention_mask, tokenizer):
    """(B, T) bool: the positions probed. Not padding, not [CLS], not [SEP]."""
    special = (input_ids == tokenizer.cls_id) | (input_ids == tokenizer.sep_id)
    return attention_mask.bool() & ~special


def hidden_states(model, batch, bf16=False):
    """The L + 1 hidden states of `model` for one batch (no gradients), in
    float32 (bf16: computed under bfloat16 autocast, support/devices.autocast).

    The model's own MLM output is asked for at no positions (an empty
    selection): the probe applies the head itself, to every layer, and the
    V-wide projection is most of a small model's compute."""
    nowhere = torch.zeros_like(batch["input_ids"], dtype=torch.bool)
    with torch.no_grad(), autocast(batch["input_ids"].device, bf16):
        output = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"], mlm_positions=nowhere)
    return [h.float() for h in output.hidden_states]


def max_length_for(model):
    return min(512, model.config.max_position_embeddings)


def count_too_long(tokenizer, sentences, max_length):
    """How many sentences encoded_batches cuts: more tokens, with [CLS] and
    [SEP], than the model has positions (probe_model reports the number)."""
    specials = tokenizer.backend.num_special_tokens_to_add(is_pair=False)
    encodings = tokenizer.backend.encode_batch(sentences, add_special_tokens=False)
    return sum(len(e.ids) + specials > max_length for e in encodings)


# ----------------------------------------------------------------------------
# Scores
# ----------------------------------------------------------------------------


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
    truncated: int = 0                          # sentences cut to the model's positions (max_length)
    max_length: int = 512                       # tokens per sentence the model takes, [CLS] and [SEP] included
    precision: str = "float32"                  # or "bfloat16 autocast" (probe_model's bf16)

    def to_dict(self):
        return asdict(self)


def depth_descriptions(config, order=None):
    """What produced each hidden state, in words (L + 1 strings): the config's own depth labels."""
    return config.depth_labels(order)


# ----------------------------------------------------------------------------
# The probe
# ----------------------------------------------------------------------------


def check_probe_settings(batch_size=32, mask_prob=None, show=0):
    """Raise MiniBertError for values no probe can use (the CLI calls it before loading anything)."""
    if batch_size < 1:
        raise MiniBertError(f"--batch-size {batch_size}: expected a positive integer")
    if mask_prob is not None and not 0.0 < mask_prob <= 1.0:
        raise MiniBertError(f"--mask-prob {mask_prob}: expected a probability in (0, 1]")
    if show < 0:
        raise MiniBertError(f"--show {show}: expected 0 or a positive integer")


def check_vocabularies(model, tokenizer):
    """Token ids index the embedding matrix, so the tokenizer must not know
    more tokens than the model (a model may know more: padded vocabularies)."""
    if tokenizer.vocab_size > model.config.vocab_size:
        raise MiniBertError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                            f"{model.config.vocab_size}; expected the tokenizer files of this model")


def check_fit_settings(steps=300, lr=1e-3, batch_size=256):
    for name, value in (("--fit-steps", steps), ("--fit-batch-size", batch_size)):
        if value < 1:
            raise MiniBertError(f"{name} {value}: expected a positive integer")
    if not lr > 0:
        raise MiniBertError(f"--fit-lr {lr}: expected a positive learning rate")


def probe_model(model, tokenizer, sentences, *, mlm_head=None, batch_size=32, mask_prob=None, seed=0, show=0,
                descriptions=None, head_name="pretrained", model_name="", device="cpu", progress=False, bf16=False):
    """Score the MLM head on every hidden state of `model` (see the module
    docstring). `mlm_head` defaults to the model's own; `show` keeps that many
    example reconstructions; `descriptions` labels the rows (default: from
    the config). bf16: the model and the head run under bfloat16 autocast;
    the scores are computed from float32 logits."""
    head = mlm_head if mlm_head is not None else model.mlm_head
    if head is None:
        raise MiniBertError(f"{model_name or 'the model'}: has no MLM head (a Hugging Face `BertModel` file?); "
                            f"pass --fit-head TEXTFILE to fit one on its last layer first")
    check_probe_settings(batch_size, mask_prob, show)
    check_vocabularies(model, tokenizer)
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

    descriptions = descriptions or depth_descriptions(model.config)
    if len(descriptions) != len(scores):
        raise MiniBertError(f"descriptions: got {len(descriptions)} labels for {len(scores)} hidden states")
    layers = [LayerResult(layer=l, description=d, **s.summary())
              for l, (s, d) in enumerate(zip(scores, descriptions))]
    max_length = max_length_for(model)
    result = ProbeResult(model=model_name, head=head_name, sentences=len(sentences), tokens=scores[0].tokens,
                         layers=layers, examples=examples, max_length=max_length,
                         truncated=count_too_long(tokenizer, sentences, max_length),
                         precision="bfloat16 autocast" if bf16 else "float32")
    if mask_prob is not None:
        result.masked = masked_accuracy(model, head, tokenizer, sentences, mask_prob, seed, batch_size, device, bf16)
    return result


def collect_examples(tokenizer, input_ids, real, predictions, wanted):
    """Up to `wanted` examples: the input and each layer's argmax, decoded."""
    examples = []
    for row in range(min(max(wanted, 0), input_ids.shape[0])):
        n_before = real[:row].sum().item()            # predictions are flattened over the batch
        n = real[row].sum().item()
        examples.append({
            "input": tokenizer.decode(input_ids[row][real[row]].tolist()),
            "layers": [tokenizer.decode(p[n_before:n_before + n].tolist()) for p in predictions],
        })
    return examples


def masked_accuracy(model, head, tokenizer, sentences, mask_prob, seed, batch_size, device="cpu", bf16=False):
    """Context for the table: the ordinary masked-LM task. Replace a random
    `mask_prob` of the real tokens by [MASK] (always [MASK]; not BERT's
    80/10/10 mix), run the model, and score the last layer at those positions
    against the original tokens.

    The draw is made sentence by sentence from one seeded generator, so it
    does not depend on the batch size."""
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


# ----------------------------------------------------------------------------
# Fitting a head for an encoder that has none
# ----------------------------------------------------------------------------


def fit_mlm_head(model, tokenizer, sentences, *, steps=300, lr=1e-3, batch_size=256, seed=0, device="cpu",
                 progress=True, bf16=False):
    """Train a fresh `MaskedLMHead` on the last layer of a frozen `model`.

    The task is unmasked input reconstruction: at every real position of the
    last layer, predict the token the position holds. That is exactly what the
    probe then measures at every layer, and it keeps the head's training
    signal on the last layer only, as in pretraining (the head never sees
    another layer, so what it does there is the paper's question). Masked-LM
    training would instead teach the head to *guess* hidden words, which the
    last layer of an encoder not trained for it may not support at all.

    Frozen: the whole encoder and the word embeddings, which stay tied as the
    decoder ([BERT] A.2). Trained: the head's dense layer, LayerNorm and output
    bias. Because the encoder is frozen, its last layer is computed once, under
    no_grad, for every real token of `sentences` (memory: tokens x H floats),
    and the head trains on random minibatches of `batch_size` token positions.

    bf16: the encoder and the head run under bfloat16
    autocast (the head's weights stay float32; the loss is float32's).

    Returns (head in eval mode, final training loss)."""
    check_fit_settings(steps, lr, batch_size)
    check_vocabularies(model, tokenizer)
    model.eval().to(device)
    features, targets = [], []
    for batch in encoded_batches(tokenizer, sentences, 64, max_length_for(model)):
        batch = move_to_device(batch, device)
        real = real_positions(batch["input_ids"], batch["attention_mask"], tokenizer)
        features.append(hidden_states(model, batch, bf16)[-1][real])      # (N, H)
        targets.append(batch["input_ids"][real])
    features, targets = torch.cat(features), torch.cat(targets)
    if len(targets) == 0:
        raise MiniBertError("--fit-head: the text has no tokens besides [CLS]/[SEP]")

    with torch.random.fork_rng(devices=[]):     # seeded initial weights, global RNG untouched
        torch.manual_seed(seed)
        head = MaskedLMHead(model.config)
        head.apply(model.init_weights)            # Google's init, as for a new model
    head.to(device).train()
    word_embeddings = model.embeddings.word_embeddings.weight.detach()   # frozen decoder
    optimizer = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    progress_bar = tqdm(range(steps), desc="fitting MLM head", unit="step", disable=not progress)
    for _ in progress_bar:
        pick = torch.randint(len(targets), (batch_size,), generator=generator).to(device)
        with autocast(device, bf16):
            logits = head(features[pick], word_embeddings)
        loss = F.cross_entropy(logits.float(), targets[pick])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        progress_bar.set_postfix(loss=f"{loss.item():.3f}")
    return head.eval(), loss.item()


# ----------------------------------------------------------------------------
# Output: table, bars, side-by-side, examples, JSON, plot
# ----------------------------------------------------------------------------


def table_lines(result):
    """The per-layer table as a list of lines: header, rule, one row per layer."""
    width = max([len("produced by")] + [len(r.description) for r in result.layers])
    lines = [f"{'layer':>5}  {'produced by':<{width}}  {'top-1':>6}  {'top-5':>6}  {'xent (nats)':>11}",
             f"{'-' * 5}  {'-' * width}  {'-' * 6}  {'-' * 6}  {'-' * 11}"]
    for r in result.layers:
        lines.append(f"{r.layer:>5}  {r.description:<{width}}  {100 * r.top1:>5.1f}%  {100 * r.top5:>5.1f}%  "
                     f"{r.cross_entropy:>11.3f}")
    return lines


def format_table(result):
    lines = table_lines(result)
    if result.masked is not None:
        m = result.masked
        lines.append(f"masked LM (last layer, {100 * m['mask_prob']:g}% of real tokens -> [MASK], seed {m['seed']}, "
                     f"{m['tokens']} positions): top-1 {100 * m['top1']:.1f}%  top-5 {100 * m['top5']:.1f}%  "
                     f"xent {m['cross_entropy']:.3f} nats")
    return "\n".join(lines)


def format_header(result):
    precision = f"precision: {result.precision} (weights float32)\n" if result.precision != "float32" else ""
    header = (f"model: {result.model}\nMLM head: {result.head}\n{precision}"
              f"{result.sentences} sentences, {result.tokens} real tokens per layer "
              f"([CLS], [SEP] and padding excluded; unmasked input)")
    if result.truncated:   # their ends were never seen: say so rather than score them silently
        header += (f"\nnote: {result.truncated} of {result.sentences} sentences are longer than the model's "
                   f"{result.max_length} tokens and were cut to fit")
    return header


def format_bars(result, width=50):
    """One bar per layer: '#' up to top-1 accuracy, '+' on to top-5."""
    lines = ["reconstruction accuracy by layer   (# top-1, + top-5; full bar = 100%)"]
    for r in result.layers:
        n1, n5 = round(width * r.top1), round(width * r.top5)
        bar = "#" * n1 + "+" * (n5 - n1) + " " * (width - n5)
        lines.append(f"{r.layer:>3} |{bar}| {100 * r.top1:5.1f}% {100 * r.top5:5.1f}%")
    return "\n".join(lines)


def format_side_by_side(left, right, left_title="original", right_title="deeper"):
    """Two probe tables next to each other, row by row (the deeper model has more rows)."""
    left_lines, right_lines = table_lines(left), table_lines(right)
    width = max(len(line) for line in left_lines)
    lines = [f"{left_title:<{width}}   | {right_title}"]
    for i in range(max(len(left_lines), len(right_lines))):
        a = left_lines[i] if i < len(left_lines) else ""
        b = right_lines[i] if i < len(right_lines) else ""
        lines.append(f"{a:<{width}}   | {b}")
    return "\n".join(lines)


def format_examples(result):
    lines = []
    for i, example in enumerate(result.examples, 1):
        lines.append(f"example {i}: {example['input']}")
        for r, text in zip(result.layers, example["layers"]):
            lines.append(f"  {r.layer:>3}  {text}")
    return "\n".join(lines)


def json_record(result):
    """A ProbeResult as probe.json writes it: accuracies in percent, as every
    minibert script reports them, named so (top1_percent, top5_percent)."""
    def in_percent(scores):
        scores = dict(scores)
        for key in ("top1", "top5"):
            scores[f"{key}_percent"] = 100 * scores.pop(key)
        return scores
    values = result.to_dict()
    values["layers"] = [in_percent(layer) for layer in values["layers"]]
    if values["masked"] is not None:
        values["masked"] = in_percent(values["masked"])
    return values


def save_json(results, path):
    """`results`: a ProbeResult, or a dict of them (e.g. original and deeper)."""
    if isinstance(results, ProbeResult):
        values = json_record(results)
    else:
        values = {name: json_record(r) for name, r in results.items()}
    write_json(path, values)


def save_plot(results, path):
    """Top-1 and top-5 accuracy against layer, one line pair per result
    (`results` maps a name to a ProbeResult; minibert.support.plots draws
    it, with the legend under the axes). Needs matplotlib."""
    return plot_probe(results, path)
