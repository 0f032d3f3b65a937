"""BERT and ALBERT in one file, written out by hand.

Read it top to bottom: config, activations, LayerNorm, embeddings, attention,
layer, encoder, heads, and finally the model that puts them together.

Every formula runs as written. GELU, LayerNorm and attention are each a short
function of plain tensor operations next to the fused PyTorch kernel the
model uses by default; `BertConfig(written_out=True)` (or
`model.use_written_out()`) runs the written-out functions instead, and the
tests check that both paths give the same numbers.

References
  [BERT]   Devlin et al. 2018, "BERT: Pre-training of Deep Bidirectional
           Transformers for Language Understanding", arXiv:1810.04805.
  [ALBERT] Lan et al. 2019, "ALBERT: A Lite BERT for Self-supervised Learning of
           Language Representations", arXiv:1909.11942.
  [AIAYN]  Vaswani et al. 2017, "Attention Is All You Need", arXiv:1706.03762.
  [Kao]    Kao et al. 2020, "BERT's output layer recognizes all hidden layers?",
           arXiv:2001.09309 (duplicated layers).
  Google's reference code: github.com/google-research/bert, modeling.py, and
  github.com/google-research/albert, modeling.py.

BERT and ALBERT differ in three switches, all in `BertConfig`:
  * `embedding_size` E: ALBERT's word pieces live in a small E-dimensional
    space and are projected up to the hidden size H ([ALBERT] 3.1,
    "factorized embedding parameterization"). BERT has E == H and no projection.
  * `num_hidden_groups` / `inner_group_num`: ALBERT shares one set of layer
    weights across all depths ([ALBERT] 3.1, "cross-layer parameter sharing").
    BERT has a distinct layer at every depth.
  * `hidden_act`: BERT's "gelu" is the exact erf GELU; ALBERT's is the tanh
    approximation, called "gelu_new" (see `ACTIVATIONS`).

So the encoder is a list of *distinct* layers plus a plan saying which of them
runs at each depth. The same plan expresses Kao et al.'s duplicated models
(`layer_order`, e.g. 0,0,1,1,2,2,3,...).

This file knows nothing of checkpoint formats: loading Google's or Hugging
Face's weights lives in `minibert/checkpoints/`.

Shapes in comments: B batch, T sequence length, H hidden size, E embedding
size, A attention heads, D = H / A head size, I intermediate size, V vocab.
"""

import functools
import math
from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from minibert.support.checks import check_bert_config
from minibert.support import MiniBertError

# ----------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------


@dataclass
class BertConfig:
    """Hyper-parameters. Field names equal the keys of `bert_config.json`,
    `albert_config.json` and Hugging Face's `config.json`, so one config class
    reads all three (unknown keys, such as multilingual BERT's `pooler_*`, are
    ignored)."""

    vocab_size: int = 30522
    hidden_size: int = 768                  # H
    num_hidden_layers: int = 12             # L: depth, i.e. how many layers run
    num_attention_heads: int = 12           # A
    intermediate_size: int = 3072           # I: feed-forward inner size
    hidden_act: str = "gelu"                # "gelu" (exact, BERT) or "gelu_new" (tanh, ALBERT)
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2                # segments A and B
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12           # TF's layer_norm epsilon; Google's config has no field
    pad_token_id: int = 0
    model_type: str = "bert"                # "bert" or "albert"
    # ALBERT switches (None means "as BERT").
    embedding_size: Optional[int] = None    # E; None means E == H
    num_hidden_groups: Optional[int] = None  # distinct layer groups; None means one per depth
    inner_group_num: int = 1                # layers inside one group
    # Kao et al.: which group runs at each depth (None: the usual plan).
    layer_order: Optional[list] = None
    # Not a property of the weights: run every block through its formula
    # written out in PyTorch (attention, GELU, LayerNorm) instead of the fused
    # kernels. Same numbers, slower; for reading and for the tests.
    written_out: bool = False

    def __post_init__(self):
        self.validate()          # a config that exists is a valid one

    @classmethod
    def from_dict(cls, values):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    def to_dict(self):
        return asdict(self)

    @property
    def embedding_dim(self):
        """E: the width of the word-piece embeddings."""
        return self.embedding_size or self.hidden_size

    @property
    def num_groups(self):
        """How many distinct layer groups exist (BERT: one per depth)."""
        return self.num_hidden_groups or self.num_hidden_layers

    def depth_plan(self):
        """Which group runs at each depth 0..L-1.

        BERT: group l at depth l. ALBERT: group `l * G // L` ([ALBERT]'s
        modeling.py `transformer_model`), so with G = 1 every depth reuses group
        0. A duplicated model (Kao et al.) lists the order explicitly.
        """
        if self.layer_order is not None:
            return list(self.layer_order)
        L, G = self.num_hidden_layers, self.num_groups
        if G == L:
            return list(range(L))                 # BERT: a distinct group at every depth
        # exercise: albert-depth-plan
        # ALBERT: G groups share the L depths in G equal runs, in order
        # (depth l runs group floor(l * G / L)).
        plan = []
        for l in range(L):
            plan.append(l * G // L)
        return plan
        # end exercise

    def depth_labels(self, layer_order=None):
        """What produced each of the L + 1 hidden states, in words. BERT:
        "layer i", and "layer i (copy)" for a later run of layer i (a model
        duplicated by Kao et al., whose `layer_order` of source layers may be
        given). ALBERT: which shared group ran, and the how-many-th time."""
        albert = self.model_type == "albert"
        labels = ["embeddings (projected to H)" if albert else "embeddings"]
        runs = {}
        for group in (layer_order if layer_order is not None else self.depth_plan()):
            runs[group] = runs.get(group, 0) + 1
            for inner in range(self.inner_group_num):
                if albert:
                    name = f"group {group}" + (f".{inner}" if self.inner_group_num > 1 else "")
                    labels.append(f"{name}, run {runs[group]}")
                else:
                    labels.append(f"layer {group}" + (" (copy)" if runs[group] > 1 else ""))
        return labels

    def validate(self):
        """Each field's type and range, or a MiniBertError naming the field
        (the checks are support code: minibert/support/checks.py)."""
        check_bert_config(self, ACTIVATIONS)


# What ALBERT's code assumes where its config leaves a field out: E = 128 for
# every model size ([ALBERT] Table 1), one shared layer group ([ALBERT] 3.1),
# and the tanh GELU (its modeling.py's "gelu"; see gelu_tanh below).
ALBERT_DEFAULTS = {"embedding_size": 128, "num_hidden_groups": 1, "hidden_act": "gelu_new"}


# ----------------------------------------------------------------------------
# Activations
# ----------------------------------------------------------------------------


def gelu(x):
    """Exact GELU, x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (Hendrycks & Gimpel
    2016), where Phi is the standard normal CDF.

    BERT's "gelu" means this form. Google's first bert/modeling.py (October
    2018) computed it with tf.erf, and the original checkpoints (Oct-Nov
    2018) were trained with it; commit bee6030 ("Adding TF Hub support",
    early 2019) later switched modeling.gelu to the tanh approximation below.
    Hugging Face runs every BERT checkpoint with the erf form, and so do we
    (docs/formats.md 1.2)."""
    # exercise: gelu-erf
    # The standard normal CDF through the error function:
    #   Phi(x) = (1 + erf(x / sqrt 2)) / 2
    # and GELU(x) = x Phi(x): each input is scaled by the probability that a
    # standard normal variable lies below it.
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    # end exercise


def gelu_tanh(x):
    """The tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))),
    which ALBERT's modeling.py calls "gelu" and Hugging Face calls "gelu_new"
    (docs/formats.md 2.2). It differs from the exact form by at most 4.8e-4 (near x = 2.7)."""
    # exercise: gelu-tanh
    # The same x Phi(x), with a cheaper curve for the normal CDF:
    # Phi(x) is close to (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2, so
    # GELU(x) = x Phi(x) is close to the expression below (Hendrycks & Gimpel
    # 2016, section 2).
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    # end exercise


# hidden_act name -> (PyTorch's fused kernel, the formula written out above).
# The two columns compute the same function; tests check them equal.
ACTIVATIONS = {
    "gelu": (F.gelu, gelu),
    "gelu_new": (functools.partial(F.gelu, approximate="tanh"), gelu_tanh),
    "gelu_pytorch_tanh": (functools.partial(F.gelu, approximate="tanh"), gelu_tanh),
    "relu": (F.relu, lambda x: x.clamp(min=0)),
    "tanh": (torch.tanh, torch.tanh),            # tanh is itself a primitive
}


class Activation(nn.Module):
    """The config's hidden_act, fused or written out (no parameters)."""

    def __init__(self, name, written_out=False):
        super().__init__()
        self.fused, self.formula = ACTIVATIONS[name]
        self.written_out = written_out

    def forward(self, x):
        return self.formula(x) if self.written_out else self.fused(x)


# ----------------------------------------------------------------------------
# LayerNorm (Ba et al. 2016)
# ----------------------------------------------------------------------------


def layer_norm(x, weight, bias, eps):
    """Normalise each vector over its last dimension to mean 0 and variance
    1, then scale by `weight` (gamma) and shift by `bias` (beta) ([Ba et al.]
    Eq. 4). The variance is the biased one (divide by H, not H - 1) and eps is
    added to it under the square root, as in TF's layer_norm that BERT was
    trained with."""
    # exercise: layer-norm
    # Statistics over the H numbers of each vector (the last dimension):
    mean = x.mean(dim=-1, keepdim=True)                          # (..., 1)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)      # biased: divide by H
    normalized = (x - mean) / torch.sqrt(variance + eps)         # mean 0, variance 1 over the last dimension
    return normalized * weight + bias                            # gamma, then beta
    # end exercise


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (parameters `weight` = gamma, `bias` = beta), which can
    also run the formula written out in `layer_norm` above."""

    def __init__(self, size, eps, written_out=False):
        super().__init__(size, eps=eps)
        self.written_out = written_out

    def forward(self, x):
        if self.written_out:
            return layer_norm(x, self.weight, self.bias, self.eps)
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)  # the same, one fused kernel


# ----------------------------------------------------------------------------
# Embeddings ([BERT] 3, Figure 2)
# ----------------------------------------------------------------------------


class Embeddings(nn.Module):
    """Input representation: word piece + position + segment (token type)
    embeddings, summed, then LayerNorm and dropout. For ALBERT the sum lives in
    E dimensions and a linear map takes it up to H."""

    def __init__(self, config):
        super().__init__()
        E = config.embedding_dim
        self.max_positions = config.max_position_embeddings
        self.word_embeddings = nn.Embedding(config.vocab_size, E)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E)  # learned, not sinusoids
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E)
        self.layer_norm = LayerNorm(E, config.layer_norm_eps, config.written_out)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        # ALBERT's `embedding_hidden_mapping_in`: E -> H ([ALBERT] 3.1). Hugging
        # Face's ALBERT always has it, even when E == H, and so do we (Google's
        # modeling.py creates it only when E != H; docs/formats.md 2.3).
        has_projection = config.model_type == "albert" or E != config.hidden_size
        self.projection = nn.Linear(E, config.hidden_size) if has_projection else None

    def forward(self, input_ids, token_type_ids):
        T = input_ids.shape[1]
        if T > self.max_positions:
            # The position table has one row per position: there is no
            # embedding for position T - 1 (a model cannot read longer text).
            raise MiniBertError(f"input of {T} tokens is longer than the model's max_position_embeddings "
                                f"({self.max_positions}); truncate it to {self.max_positions} tokens")
        # exercise: embeddings-sum
        positions = torch.arange(T, device=input_ids.device)
        x = (self.word_embeddings(input_ids)            # (B, T, E)
             + self.position_embeddings(positions)        # (T, E), broadcast over B
             + self.token_type_embeddings(token_type_ids))
        x = self.dropout(self.layer_norm(x))
        if self.projection is not None:
            x = self.projection(x)                        # (B, T, E) -> (B, T, H)
        return x
        # end exercise


# ----------------------------------------------------------------------------
# Multi-head self-attention ([AIAYN] 3.2, Eq. 1)
# ----------------------------------------------------------------------------


def split_heads(x, num_heads):
    """(B, T, H) -> (B, A, T, D): each head sees its own D = H / A slice of
    every vector (columns h*D .. (h+1)*D - 1 of the projection belong to head h)."""
    # exercise: split-merge-heads
    B, T, H = x.shape
    A = num_heads
    D = H // A                                    # head size
    x = x.view(B, T, A, D)                        # (B, T, H) -> (B, T, A, D): cut each vector into A slices
    return x.transpose(1, 2)                      # (B, A, T, D): one (T, D) matrix per head
    # end exercise


def merge_heads(x):
    """(B, A, T, D) -> (B, T, A*D): the inverse of split_heads, i.e. the heads'
    outputs concatenated ("Concat(head_1, ..., head_h)" in [AIAYN] 3.2.2)."""
    B, A, T, D = x.shape
    return x.transpose(1, 2).reshape(B, T, A * D)


def attention(q, k, v, attention_bias, dropout_p=0.0):
    """Scaled dot-product attention, written out ([AIAYN] Eq. 1):

        softmax(Q K^T / sqrt(D) + bias) V

    q, k, v (B, A, T, D); attention_bias (B, 1, 1, T), 0 for real tokens and
    -10000 for padding. Dropout falls on the attention probabilities
    themselves, as in Google's attention_layer ("dropping out entire tokens
    to attend to")."""
    # exercise: attention
    D = q.shape[-1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)   # (B, A, T, T): query i against key j
    scores = scores + attention_bias                  # padding keys get -10000
    probs = scores.softmax(dim=-1)                    # each query's weights over the keys sum to 1
    probs = F.dropout(probs, p=dropout_p)
    return probs @ v                                  # (B, A, T, D): weighted sum of the values
    # end exercise


class SelfAttention(nn.Module):
    """Q, K, V projections, attention in A heads, then the output projection W^O."""

    def __init__(self, config):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(H, H)                      # W^Q of all heads side by side
        self.key = nn.Linear(H, H)                        # W^K
        self.value = nn.Linear(H, H)                      # W^V
        self.output_projection = nn.Linear(H, H)          # W^O
        self.dropout_prob = config.attention_probs_dropout_prob
        self.written_out = config.written_out

    def forward(self, hidden_states, attention_bias):
        q = split_heads(self.query(hidden_states), self.num_heads)  # (B, A, T, D)
        k = split_heads(self.key(hidden_states), self.num_heads)
        v = split_heads(self.value(hidden_states), self.num_heads)
        dropout_p = self.dropout_prob if self.training else 0.0
        if self.written_out:
            context = attention(q, k, v, attention_bias, dropout_p)
        else:
            # PyTorch's fused kernel computes the same function as `attention`
            # (tests check it); it is faster and never stores the T x T matrix.
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_bias.to(q.dtype),
                                                     dropout_p=dropout_p)
        return self.output_projection(merge_heads(context))         # (B, T, H)


# ----------------------------------------------------------------------------
# Transformer layer: post-LayerNorm residual blocks ([AIAYN] 3.1, 3.3; [BERT] 3)
# ----------------------------------------------------------------------------


class FeedForward(nn.Module):
    """FFN(x) = W2 act(W1 x + b1) + b2, applied to each position alone
    ([AIAYN] Eq. 2, with GELU for ReLU as in [BERT] 3)."""

    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size)   # H -> I (Google: intermediate/dense)
        self.activation = Activation(config.hidden_act, config.written_out)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size)   # I -> H (Google: output/dense)

    def forward(self, x):
        # exercise: feed-forward
        # The same two linear maps at every position: nothing mixes positions
        # here (attention did that); the inner size I is 4H in BERT.
        h = self.w1(x)                                   # (B, T, H) -> (B, T, I)
        h = self.activation(h)                           # GELU, one number at a time
        return self.w2(h)                                # (B, T, I) -> (B, T, H)
        # end exercise


class TransformerLayer(nn.Module):
    """h = LN(x + Dropout(Attention(x)));  y = LN(h + Dropout(FFN(h))).

    Post-LN, as in [AIAYN] and BERT: the LayerNorm comes after each residual sum.
    DeBERTa (minibert/deberta.py) keeps this layer and passes its own
    `attention` module; the two residual blocks are methods so that it can
    call them with its own attention's output."""

    def __init__(self, config, attention=None):
        super().__init__()
        H = config.hidden_size
        self.attention = SelfAttention(config) if attention is None else attention
        self.attention_layer_norm = LayerNorm(H, config.layer_norm_eps, config.written_out)
        self.feed_forward = FeedForward(config)
        self.feed_forward_layer_norm = LayerNorm(H, config.layer_norm_eps, config.written_out)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x, attention_bias):
        h = self.add_attention(x, self.attention(x, attention_bias))
        return self.add_feed_forward(h)

    def add_attention(self, x, attended):
        """h = LN(x + Dropout(attended)): the residual sum around the attention."""
        return self.attention_layer_norm(x + self.dropout(attended))

    def add_feed_forward(self, h):
        """y = LN(h + Dropout(FFN(h))): the residual sum around the feed-forward block."""
        return self.feed_forward_layer_norm(h + self.dropout(self.feed_forward(h)))


# ----------------------------------------------------------------------------
# Encoder: distinct layers plus the plan of which runs at each depth
# ----------------------------------------------------------------------------


class Encoder(nn.Module):
    """`layers` holds num_groups * inner_group_num distinct layers; group g is
    layers[g * inner_group_num : (g + 1) * inner_group_num]. `depth_plan` says
    which group runs at each depth:

        BERT (L=12)            0, 1, 2, ..., 11
        ALBERT (G=1)           0, 0, 0, ..., 0
        Kao et al. duplicated  0, 0, 1, 1, 2, 2, 3, ..., 11   (tied copies)

    (Untied duplicates are simply more distinct layers, in the BERT plan.)
    """

    def __init__(self, config):
        super().__init__()
        self.inner_group_num = config.inner_group_num
        self.depth_plan = config.depth_plan()
        self.layers = nn.ModuleList(TransformerLayer(config)
                                    for _ in range(config.num_groups * config.inner_group_num))

    def forward(self, x, attention_bias, keep_all=True):
        """The hidden states [x, h_1, ..., h_L]: the input, then the output of
        every executed layer (L * inner_group_num for ALBERT groups of several
        layers), the order of Hugging Face's `output_hidden_states`. With
        keep_all=False only the last two, [h_(L-1), h_L], each earlier state
        freed as soon as the next layer has read it. DebertaEncoder keeps the
        same contract."""
        states = [x]
        for group in self.depth_plan:
            first = group * self.inner_group_num
            for layer in self.layers[first:first + self.inner_group_num]:
                h = layer(states[-1], attention_bias)
                states = states + [h] if keep_all else [states[-1], h]
        return states


# ----------------------------------------------------------------------------
# Heads
# ----------------------------------------------------------------------------


class Pooler(nn.Module):
    """tanh(W h_[CLS]): the sentence representation used for NSP/SOP and for
    sentence classification ([BERT] 3, "C")."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output):
        return torch.tanh(self.dense(sequence_output[:, 0]))   # (B, T, H) -> (B, H)


class MaskedLMHead(nn.Module):
    """Predicts word pieces: LN(act(W h)), then a decoder that is the word
    embedding matrix itself (tied, [BERT] A.2 / Google's run_pretraining.py)
    plus a bias of its own. ALBERT's W maps H -> E, since its embeddings are
    E-dimensional."""

    def __init__(self, config):
        super().__init__()
        E = config.embedding_dim
        self.dense = nn.Linear(config.hidden_size, E)
        self.activation = Activation(config.hidden_act, config.written_out)
        self.layer_norm = LayerNorm(E, config.layer_norm_eps, config.written_out)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states, word_embeddings):
        h = self.layer_norm(self.activation(self.dense(hidden_states)))  # (..., H) -> (..., E)
        return F.linear(h, word_embeddings, self.bias)                     # (..., E) @ (V, E)^T -> (..., V)


@dataclass
class BertModelOutput:
    """What BertModel (and DebertaModel) returns.

    last_hidden_state: (B, T, H), the last layer's output.
    hidden_states: L + 1 tensors (B, T, H): the embedding output (after ALBERT's
        projection), then the output of each executed layer; the same order as
        Hugging Face's `output_hidden_states`. None when the model was called
        with all_hidden_states=False.
    pooled_output: (B, H) or None when the model has no pooler.
    mlm_logits: (B, T, V), None when the model has no MLM head or was asked
        for `mlm_positions`.
    selected_mlm_logits: (N, V), the MLM logits at the N positions of
        `mlm_positions` (in row-major order), None when it was not given.
    pair_logits: (B, 2) sentence-pair logits: next-sentence prediction (BERT,
        0 = B follows A) or sentence order (ALBERT, 0 = in order); None when
        the model has no pair head.
    """
    last_hidden_state: torch.Tensor
    hidden_states: Optional[tuple] = None
    pooled_output: Optional[torch.Tensor] = None
    mlm_logits: Optional[torch.Tensor] = None
    selected_mlm_logits: Optional[torch.Tensor] = None
    pair_logits: Optional[torch.Tensor] = None


# ----------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------


def padding_bias(attention_mask, dtype):
    """(B, T) mask of 1 (real) and 0 (padding) -> (B, 1, 1, T) additive bias:
    0 for real tokens, -10000 for padding, added to every query's scores so
    that after the softmax no position attends to padding (Google's
    modeling.py uses -10000 rather than -inf; exp(-10000) is 0 in float32)."""
    # exercise: padding-mask
    # One row of biases per sequence, shared by every head and every query:
    mask = attention_mask[:, None, None, :]           # (B, T) -> (B, 1, 1, T)
    mask = mask.to(dtype)                             # 1.0 real, 0.0 padding
    is_padding = 1.0 - mask                           # 1.0 where the key is padding
    return is_padding * -10000.0                      # 0 for real tokens, -10000 for padding
    # end exercise


class BertModel(nn.Module):
    """Embeddings -> encoder -> heads. Which heads exist is a constructor
    choice, because checkpoints differ: Google's have all of them, Hugging Face's
    `BertModel` files have no MLM head, `BertForMaskedLM` files no pooler.

    Saving and loading live in minibert.checkpoints (`save_pretrained(model,
    folder)`, `load_pretrained(folder)`): this file knows no file format."""

    pooler_class = Pooler   # what a fine-tuning run builds when a checkpoint has no pooler

    def __init__(self, config, with_pooler=True, with_mlm_head=True, with_pair_head=True):
        super().__init__()
        config.validate()
        if with_pair_head and not with_pooler:
            raise MiniBertError("the sentence-pair (NSP/SOP) head reads the pooled output: "
                                "with_pair_head needs with_pooler")
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = Encoder(config)
        self.pooler = Pooler(config) if with_pooler else None
        self.mlm_head = MaskedLMHead(config) if with_mlm_head else None
        # NSP ([BERT] 3.1, Task #2) or SOP ([ALBERT] 3.1): a 2-way classifier on the pooled output.
        self.pair_head = nn.Linear(config.hidden_size, 2) if with_pair_head else None
        self.apply(self.init_weights)

    def init_weights(self, module):
        """Google's initialisation: truncated-normal-like N(0, 0.02) weights,
        zero biases, LayerNorm as identity."""
        std = self.config.initializer_range
        if any(p.is_meta for p in module.parameters(recurse=False)):
            return  # a model built on the "meta" device has shapes but no values to set
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:   # DeBERTa v1 has bias-free keys
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def use_written_out(self, written_out=True):
        """Switch every block between its written-out formula (True) and
        PyTorch's fused kernels (False, the default). Returns the model."""
        self.config.written_out = written_out
        for module in self.modules():
            if hasattr(module, "written_out"):
                module.written_out = written_out
        return self

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None,
                all_hidden_states=True):
        """input_ids, attention_mask (1 = real token, 0 = padding) and
        token_type_ids are (B, T) integer tensors. `mlm_positions`, a (B, T)
        boolean tensor, runs the MLM head on those positions only (pretraining
        needs it only where tokens were masked, and the V-wide projection is
        most of a small model's compute): `selected_mlm_logits` holds them.
        `all_hidden_states=False` keeps only the last layer's output, for
        inference that needs just the heads or the last layer: L fewer
        (B, T, H) tensors held, the memory transformers saves with its default
        output_hidden_states=False."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids)        # (B, T, H)
        attention_bias = padding_bias(attention_mask, x.dtype)  # (B, 1, 1, T)
        states = self.encoder(x, attention_bias, keep_all=all_hidden_states)
        sequence_output = states[-1]

        output = BertModelOutput(sequence_output, hidden_states=tuple(states) if all_hidden_states else None)
        if self.pooler is not None:
            output.pooled_output = self.pooler(sequence_output)
        if self.pair_head is not None:
            output.pair_logits = self.pair_head(output.pooled_output)
        if self.mlm_head is not None:
            word_embeddings = self.embeddings.word_embeddings.weight
            if mlm_positions is None:
                output.mlm_logits = self.mlm_head(sequence_output, word_embeddings)                    # (B, T, V)
            else:
                output.selected_mlm_logits = self.mlm_head(sequence_output[mlm_positions], word_embeddings)  # (N, V)
        return output

    def drop_pretraining_heads(self, keep_pooler=True):
        """Remove the pre-training heads (MLM and NSP/SOP), and the pooler unless
        keep_pooler: fine-tuning does this, since torch.distributed refuses
        parameters that get no gradient, and the saved model has none of them."""
        self.mlm_head = None
        self.pair_head = None
        if not keep_pooler:
            self.pooler = None

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())
