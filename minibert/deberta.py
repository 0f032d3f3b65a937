"""DeBERTa (v1, v2 and v3) in one file, reusing BERT's pieces from model.py.

Read it after model.py, top to bottom: config, relative positions, the
disentangled attention score (written out as the paper's equation, then the
fast gather the model runs), embeddings, layer and encoder, the Enhanced
Mask Decoder, and the model. Only what differs from BERT is written here;
the feed-forward block, the post-LN residual sums, LayerNorm, the
activations, the tied MLM head and the output type come from model.py.

References
  [DeBERTa] He, Liu, Gao, Chen 2020, "DeBERTa: Decoding-enhanced BERT with
            Disentangled Attention", arXiv:2006.03654 (ICLR 2021).
  [DeBERTaV3] He, Gao, Chen 2021, "DeBERTaV3: Improving DeBERTa using
            ELECTRA-Style Pre-Training with Gradient-Disentangled Embedding
            Sharing", arXiv:2111.09543.
  The released code: github.com/microsoft/DeBERTa ("the official code"), and
  Hugging Face transformers' modeling_deberta.py / modeling_deberta_v2.py.
  docs/deberta.md has the details this file relies on, by section: the
  score (1.1), relative indices and log buckets (1.2), padding (1.6), EMD
  (2). Paper section and equation numbers below (3.1 disentangled attention,
  Eq. 2-4; 3.2 EMD) are as docs/deberta.md gives them; where paper and code
  differ, this file follows the code, which the checkpoints were trained with.

What DeBERTa changes, against BERT:
  1. No absolute positions at the input (position_biased_input false).
     Instead every attention score has two more terms that read a table of
     *relative* position embeddings P: content-to-position (c2p) and
     position-to-content (p2c) ([DeBERTa] 3.1, "disentangled attention").
  2. The absolute positions come back only at the very end, in the Enhanced
     Mask Decoder (EMD): the last layer runs twice more with the positions
     added to its queries, and the MLM head reads that ([DeBERTa] 3.2).
  3. Smaller things: LayerNorm eps 1e-7, no token types (type_vocab_size 0),
     padded positions zeroed after the embedding LayerNorm, a pairwise padding
     mask (query *and* key must be real), a GELU pooler.

v1 and v2/v3 are one implementation with switches (`model_type`):
  * v1 ("deberta"): relative table of 2k rows (k = max_relative_positions),
    its own projections for the table (no bias on the key one).
  * v2/v3 ("deberta-v2"): log-bucketed relative distances (position_buckets),
    the table LayerNorm'd (norm_rel_ebd "layer_norm") and projected with the
    content query/key projections themselves (share_att_key), and in the
    v2-xlarge/xxlarge models a convolution branch after layer 0 (conv_kernel_size).
    v3 is v2's encoder pre-trained another way ([DeBERTaV3]: ELECTRA's replaced
    token detection); its discriminator head is not part of this file.
One attention class serves both, in v2's layout (separate query, key, value);
v1's files fuse them into one `in_proj`, which the checkpoint code splits on
load and fuses on save (minibert/checkpoints/name_maps.py, DeBERTa's section).

Shapes in comments: B batch, T sequence length, H hidden size, E embedding
size, A heads, D head size, V vocab, S attention span (the relative table has
2S rows), R the rows of it that a forward reads (R <= 2S).
"""

import math
from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from minibert.model import (ACTIVATIONS, Activation, BertModel, BertModelOutput, LayerNorm, MaskedLMHead, Pooler,
                            TransformerLayer, merge_heads, split_heads)
from minibert.support.checks import DEBERTA_MODEL_TYPES, check_deberta_config, check_deberta_json, named_by
from minibert.support import MiniBertError

MODEL_TYPES = DEBERTA_MODEL_TYPES  # "deberta" (v1), "deberta-v2" (v2 and v3)
EMD_STEPS = 2                      # [DeBERTa] 3.2: n = 2 decoder layers, sharing weights

# ----------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------


@dataclass
class DebertaConfig:
    """Hyper-parameters. Field names and defaults are those of Hugging Face's
    DebertaConfig / DebertaV2Config (docs/deberta.md 4.2), so a config.json that
    leaves a field out means here what it means to transformers. (Every
    released model sets relative_attention true and position_biased_input
    false; the defaults are the other way round.)"""

    vocab_size: int = 50265
    hidden_size: int = 768                   # H
    num_hidden_layers: int = 12              # L
    num_attention_heads: int = 12            # A
    intermediate_size: int = 3072
    hidden_act: str = "gelu"                 # exact erf GELU, as BERT
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512       # rows of the absolute position table (input or EMD)
    type_vocab_size: int = 0                 # 0: no token-type embeddings (every released model)
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-7
    pad_token_id: int = 0
    model_type: str = "deberta"              # "deberta" (v1) or "deberta-v2" (v2 and v3)
    embedding_size: Optional[int] = None     # E; None means E == H (no embed_proj)
    # Disentangled attention ([DeBERTa] 3.1)
    relative_attention: bool = False         # the c2p / p2c terms at all
    max_relative_positions: int = -1         # k; < 1 means max_position_embeddings
    position_biased_input: bool = True       # add absolute positions at the input (BERT-like)
    pos_att_type: Optional[list] = None      # which relative terms: ["c2p", "p2c"]; "c2p|p2c" is read too
    # v2/v3 only
    position_buckets: int = -1               # > 0: log-bucketed distances, table of 2 * position_buckets rows
    share_att_key: bool = False              # project P with the content query/key projections
    norm_rel_ebd: str = "none"               # "layer_norm": LayerNorm over P
    conv_kernel_size: int = 0                # > 0: the convolution branch after layer 0 (v2-xlarge)
    conv_act: str = "tanh"
    conv_groups: int = 1
    attention_head_size: Optional[int] = None  # D; the official v2 json sets it (64, always H / A)
    # Sequence-classification pooler (HF's ContextPooler)
    pooler_dropout: float = 0.0
    pooler_hidden_act: str = "gelu"
    # Not a property of the weights (see BertConfig.written_out).
    written_out: bool = False

    def __post_init__(self):
        # HF reads pos_att_type as "c2p|p2c" or a list, lower-cased.
        if isinstance(self.pos_att_type, str):
            self.pos_att_type = [t.strip() for t in self.pos_att_type.lower().split("|") if t.strip()]
        elif self.pos_att_type is None:
            self.pos_att_type = []
        self.validate()

    def validate(self):
        """Each field's type and range, or a MiniBertError naming the field
        (the checks are support code: minibert/support/checks.py)."""
        check_deberta_config(self, ACTIVATIONS)

    @classmethod
    def from_dict(cls, values, source="config"):
        """A config from a Hugging Face config.json's fields; unknown keys are
        ignored. A "deberta-v2" config that leaves a size out gets
        DebertaV2Config's default (V2_DEFAULTS). `source` names the file in
        error messages."""
        check_deberta_json(values, source)
        known = {f.name for f in fields(cls)}
        chosen = {k: v for k, v in values.items() if k in known}
        if chosen.get("model_type") == "deberta-v2":
            chosen = {**V2_DEFAULTS, **chosen}
        with named_by(source):
            return cls(**chosen)

    def to_dict(self):
        """The fields of a Hugging Face config.json (model_type included);
        unset optional sizes are left out, as transformers expects, and so is
        the written_out switch."""
        values = asdict(self)
        del values["written_out"]
        return {k: v for k, v in values.items() if v is not None}

    @property
    def is_v1(self):
        return self.model_type == "deberta"

    @property
    def embedding_dim(self):
        """E: the width of the word embeddings (MaskedLMHead asks for it)."""
        return self.embedding_size or self.hidden_size

    @property
    def head_size(self):
        """D = H / A."""
        return self.hidden_size // self.num_attention_heads

    @property
    def max_relative(self):
        """k: the largest relative distance with its own embedding (v1) or
        the distance the log buckets reach (v2)."""
        return self.max_relative_positions if self.max_relative_positions >= 1 else self.max_position_embeddings

    @property
    def attention_span(self):
        """S: the relative table has 2S rows, for (bucketed) distances -S .. S-1."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative

    @property
    def score_scale_factor(self):
        """s in the scale 1 / sqrt(s D): one plus the number of relative terms
        (docs/deberta.md 1.1). It counts pos_att_type even when
        relative_attention is false, as both released codes do."""
        return 1 + len(self.pos_att_type)

    @property
    def relative_layer_norm(self):
        """Whether P is LayerNorm'd before use (norm_rel_ebd contains "layer_norm")."""
        return "layer_norm" in [part.strip() for part in self.norm_rel_ebd.lower().split("|")]

    def depth_plan(self):
        """Which layer runs at each depth (BertConfig's method): each its own."""
        return list(range(self.num_hidden_layers))

    def depth_labels(self, layer_order=None):
        """What produced each of the L + 1 hidden states (BertConfig's method):
        "embeddings", then "layer i", "layer i (copy)" for a later run of i."""
        labels, runs = ["embeddings"], set()
        for layer in (layer_order if layer_order is not None else self.depth_plan()):
            labels.append(f"layer {layer}" + (" (copy)" if layer in runs else ""))
            runs.add(layer)
        return labels


# What DebertaV2Config assumes where a "deberta-v2" config.json leaves a size
# out (the v2-xlarge sizes); v1's defaults are the dataclass's.
V2_DEFAULTS = {"vocab_size": 128100, "hidden_size": 1536, "num_hidden_layers": 24, "num_attention_heads": 24,
               "intermediate_size": 6144}


# ----------------------------------------------------------------------------
# Relative positions ([DeBERTa] 3.1, Eq. 3; docs/deberta.md 1.2)
# ----------------------------------------------------------------------------


def log_bucket(r, position_buckets, max_relative_positions):
    """DeBERTa v2's log-bucketed distance b(r) (official da_utils.py
    make_log_bucket_position). With m = position_buckets // 2 and
    M = max_relative_positions:

        b(r) = r                                              if |r| <= m
        b(r) = sign(r) (m + ceil((m - 1) ln(|r| / m) / ln((M - 1) / m)))   otherwise

    Near distances keep their own embedding; far ones share logarithmically
    wider buckets, so 2 * position_buckets rows cover distances up to M.
    The arithmetic is float32 in the same order as the released code: ceil()
    of a ratio that is exactly an integer (|r| = M - 1) must not round up."""
    # exercise: log-bucket
    m = position_buckets // 2
    far = r.abs() > m
    distance = torch.where(far, r.abs(), torch.full_like(r, m))        # m where unused: no log(0)
    ratio = torch.log(distance / m) / torch.log(torch.tensor((max_relative_positions - 1) / m))
    bucket = torch.ceil(ratio * (m - 1)) + m
    return torch.where(far, torch.sign(r) * bucket.long(), r)
    # end exercise


def relative_index(T, config, device=None):
    """delta(i, j): the row of the relative table P that query i uses for key
    j, a (T, T) long tensor, computed once per forward and shared by every
    layer (it ignores padding: positions are 0 .. T-1).

    The relative position is query minus key, r = i - j. v1 (no buckets) uses
    row clamp(r + k, 0, 2k - 1) of its 2k rows ([DeBERTa] Eq. 3: distances
    beyond k share the end rows); v2 first maps r to its log bucket. Hugging
    Face's v1 slices a shorter span out of the table when T < k; the rows it
    reads are the same (docs/deberta.md 1.2). For v2 and T > k this follows
    transformers, not the newest official code, which clamps r to +-(k - 1)
    before bucketing: a key k or more tokens after its query reads row 0
    here and row 1 there (docs/deberta.md 1.2, "Distances of k and more")."""
    S = config.attention_span
    positions = torch.arange(T, device=device)
    r = positions[:, None] - positions[None, :]                         # (T, T): r[i, j] = i - j
    if config.position_buckets > 0:
        r = log_bucket(r, config.position_buckets, config.max_relative)
    return (r + S).clamp(0, 2 * S - 1)


# ----------------------------------------------------------------------------
# Disentangled attention ([DeBERTa] 3.1, Eq. 2 and 4; docs/deberta.md 1.1)
# ----------------------------------------------------------------------------
#
# Each token i is two vectors: its content H_i and its position relative to
# another token j, P_{delta(i, j)}. The score of query i for key j sums
# every cross term but position-to-position (Eq. 2), each with its own
# projections (Eq. 4), per head:
#
#     Q = H W_q + b_q    K = H W_k (+ b_k)    K_r = P W_k,r (+ b_k,r)    Q_r = P W_q,r + b_q,r
#
#     A[i, j] = ( Q_i . K_j                      content -> content  (c2c, BERT's score)
#               + Q_i . K_r[delta(i, j)]         content -> position (c2p)
#               + K_j . Q_r[delta(i, j)] )       position -> content (p2c)
#               / sqrt(3 D)
#
# Two departures of the released code from the paper, which the checkpoints
# were trained with and which we follow (docs/deberta.md 1.1, 7):
#   * p2c's index. The paper writes K_j . Q_r[delta(j, i)], the distance
#     from j to i. Both released codes use the same delta(i, j) as c2p.
#   * The scale 1 / sqrt(3 D) (BERT: 1 / sqrt(D)): three terms of similar
#     size, three times the variance; s = 1 + the number of relative terms.


def relative_scores_written_out(q, k, K_r, Q_r, delta):
    """c2p + p2c as the equation reads: for every pair (i, j), look up the
    row delta(i, j) of the projected table and take its dot product with Q_i
    (c2p) or K_j (p2c).

    q, k (B, A, T, D); K_r, Q_r (1, A, R, D), either None when its term is
    not used; delta (T, T). `K_r[0, :, delta]` is (A, T, T, D): entry
    [a, i, j] is head a's relative key for the pair (i, j). Returns the
    (B, A, T, T) sum, or 0 when both terms are None."""
    c2p = torch.einsum("baid,aijd->baij", q, K_r[0, :, delta]) if K_r is not None else 0.0   # Q_i . K_r[delta(i, j)]
    p2c = torch.einsum("bajd,aijd->baij", k, Q_r[0, :, delta]) if Q_r is not None else 0.0   # K_j . Q_r[delta(i, j)]
    return c2p + p2c


def relative_scores_gathered(q, k, K_r, Q_r, delta):
    """The same c2p + p2c, the fast way the model runs by default (and the
    released code's, docs/deberta.md 1.5): one matrix product scores every
    query against every *row* of the table, (T, R), then gather picks row
    delta(i, j) for each pair. No (T, T, D) lookup is built.

    Both terms gather along the last, contiguous dimension (gathering along
    dim -2, as p2c's formula reads, strides through memory and is three
    times slower on a CPU): p2c scores every key j against every row,
    K_j . Q_r[row], picks row delta(i, j) with the transposed index, and is
    transposed back."""
    # exercise: c2p-p2c
    B, A, T, _ = q.shape
    c2p = p2c = 0.0
    if K_r is not None:
        every_row = q @ K_r.transpose(-1, -2)                              # (B, A, T, R): Q_i . K_r[row]
        c2p = every_row.gather(-1, delta.expand(B, A, T, T))               # [i, j] = every_row[i, delta(i, j)]
    if Q_r is not None:
        every_row = k @ Q_r.transpose(-1, -2)                              # (B, A, T, R): K_j . Q_r[row]
        by_key = delta.transpose(0, 1).contiguous().expand(B, A, T, T)     # [j, i] = delta(i, j)
        p2c = every_row.gather(-1, by_key).transpose(-1, -2)               # [i, j] = every_row[j, delta(i, j)]
    return c2p + p2c
    # end exercise


def pairwise_mask(attention_mask):
    """(B, T) mask of 1 (real) / 0 (padding) -> (B, 1, T, T) boolean: query i
    may attend to key j iff both are real tokens. (BERT only masks keys;
    DeBERTa's code masks padded query rows as well, docs/deberta.md 1.6.)"""
    m = attention_mask.bool()
    return m[:, None, :, None] & m[:, None, None, :]


def masked_softmax(scores, mask):
    """The official XSoftmax: softmax over the allowed keys, and probability
    exactly 0 wherever mask is False. A padded query row (no allowed key) is
    all zeros, so its context vector is 0.

    transformers 5 uses a plain softmax here, which gives padded query rows a
    uniform distribution instead: hidden states at padded positions differ
    between the two, real positions do not (docs/deberta.md 1.6)."""
    probs = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(dim=-1)
    return probs.masked_fill(~mask, 0.0)


def disentangled_attention(q, k, v, relative_scores, mask, scale, dropout_p=0.0):
    """softmax((Q K^T + relative_scores) * scale) V, written out, with
    XSoftmax masking. q (B, A, T, D), k and v (B, A, T, D), relative_scores
    (B, A, T, T) (the c2p + p2c terms, or 0), mask (B, 1, T, T)."""
    scores = (q @ k.transpose(-1, -2) + relative_scores) * scale          # (B, A, T, T)
    probs = F.dropout(masked_softmax(scores, mask), p=dropout_p)
    return probs @ v                                                        # (B, A, T, D)


class DisentangledSelfAttention(nn.Module):
    """The score above, in A heads. v2 (share_att_key) projects P with W_q,
    W_k themselves, biases included; otherwise W_k,r (`relative_key`, c2p)
    and W_q,r (`relative_query`, p2c) are parameters of their own. v1 has no
    key biases (b_k, b_k,r): its files have none.

    The query stream H_q is the layer input, or in the Enhanced Mask Decoder
    a different tensor than the keys' and values' H (EMD below)."""

    def __init__(self, config):
        super().__init__()
        H = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.terms = list(config.pos_att_type) if config.relative_attention else []
        self.scale = 1.0 / math.sqrt(config.score_scale_factor * config.head_size)
        key_bias = not config.is_v1
        self.query = nn.Linear(H, H)
        self.key = nn.Linear(H, H, bias=key_bias)
        self.value = nn.Linear(H, H)
        own_relative = config.relative_attention and not config.share_att_key
        self.relative_key = nn.Linear(H, H, bias=key_bias) if own_relative and "c2p" in self.terms else None
        self.relative_query = nn.Linear(H, H) if own_relative and "p2c" in self.terms else None
        self.share_att_key = config.share_att_key
        self.output_projection = nn.Linear(H, H)            # HF: attention.output.dense
        self.dropout_prob = config.attention_probs_dropout_prob
        self.table_dropout_prob = config.hidden_dropout_prob  # dropout on P, in every layer (HF: pos_dropout)
        self.written_out = config.written_out

    def projected_table(self, P, scale=1.0):
        """(K_r, Q_r), each (1, A, R, D) or None for a term not used: the rows
        of P (R, H) through W_k,r and W_q,r, split into heads and times `scale`.
        Dropout on P first, in every layer (HF: pos_dropout)."""
        P = F.dropout(P, p=self.table_dropout_prob, training=self.training)[None]   # (1, R, H)
        key_r, query_r = (self.key, self.query) if self.share_att_key else (self.relative_key, self.relative_query)
        K_r = split_heads(key_r(P), self.num_heads) * scale if "c2p" in self.terms else None
        Q_r = split_heads(query_r(P), self.num_heads) * scale if "p2c" in self.terms else None
        return K_r, Q_r

    def relative_scores(self, q, k, P, delta, scale=1.0):
        """scale * (c2p + p2c), (B, A, T, T), written out or gathered as
        `written_out` says; a zero without relative attention. The scale goes
        on K_r and Q_r, (R, D) per head, rather than on the (T, T) scores:
        only rounding changes (docs/deberta.md 1.4)."""
        if not self.terms:
            return q.new_zeros(())
        K_r, Q_r = self.projected_table(P, scale)
        scores = relative_scores_written_out if self.written_out else relative_scores_gathered
        return scores(q, k, K_r, Q_r, delta)

    def forward(self, query_states, hidden_states, mask, P=None, delta=None):
        """query_states (B, T, H): the query stream; hidden_states (B, T, H):
        keys and values; mask (B, 1, T, T) from pairwise_mask; P (R, H) and
        delta (T, T) from the encoder (None without relative attention)."""
        A = self.num_heads
        q = split_heads(self.query(query_states), A)             # (B, A, T, D)
        k = split_heads(self.key(hidden_states), A)
        v = split_heads(self.value(hidden_states), A)
        dropout_p = self.dropout_prob if self.training else 0.0
        if self.written_out:
            relative = self.relative_scores(q, k, P, delta)      # (B, A, T, T) or 0
            context = disentangled_attention(q, k, v, relative, mask, self.scale, dropout_p)
        else:
            # PyTorch's fused kernel, with the (scaled) relative terms and the
            # padding mask as its additive bias: what disentangled_attention
            # writes out (tests check it), except on padded query rows, which
            # it spreads uniformly; they are set to 0 afterwards, as XSoftmax gives.
            relative = self.relative_scores(q, k, P, delta, self.scale)
            bias = torch.where(mask, relative, torch.finfo(q.dtype).min)        # (B, A or 1, T, T)
            context = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=self.scale)
            context = context * mask.any(dim=-1, keepdim=True)   # padded query rows -> 0
        return self.output_projection(merge_heads(context))      # (B, T, H)


# ----------------------------------------------------------------------------
# Embeddings (docs/deberta.md 3, "Embeddings")
# ----------------------------------------------------------------------------


class DebertaEmbeddings(nn.Module):
    """word (+ absolute position, only if position_biased_input) (+ token
    type, only if type_vocab_size > 0) -> E -> H projection if E != H ->
    LayerNorm -> padded positions set to 0 -> dropout.

    Against BERT's Embeddings: positions are usually *not* added here (the
    attention gets them relatively), the projection comes before the
    LayerNorm, and padding is zeroed. The absolute table exists anyway when
    the Enhanced Mask Decoder needs it (`with_position_table`)."""

    def __init__(self, config, with_position_table):
        super().__init__()
        E, H = config.embedding_dim, config.hidden_size
        self.max_positions = config.max_position_embeddings
        self.position_biased_input = config.position_biased_input
        self.word_embeddings = nn.Embedding(config.vocab_size, E)
        has_positions = config.position_biased_input or with_position_table
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, E) if has_positions else None
        has_types = config.type_vocab_size > 0
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, E) if has_types else None
        self.projection = nn.Linear(E, H, bias=False) if E != H else None   # HF: embed_proj
        self.layer_norm = LayerNorm(H, config.layer_norm_eps, config.written_out)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def absolute_positions(self, T, device):
        """The raw lookup of positions 0 .. T-1 in the absolute table, (T, E),
        no LayerNorm: what the input adds (BERT-like models) and what EMD adds
        to its queries."""
        if T > self.max_positions:
            raise MiniBertError(f"input of {T} tokens is longer than the model's max_position_embeddings "
                                f"({self.max_positions}); truncate it to {self.max_positions} tokens")
        return self.position_embeddings(torch.arange(T, device=device))

    def forward(self, input_ids, token_type_ids, attention_mask):
        x = self.word_embeddings(input_ids)                                   # (B, T, E)
        if self.position_biased_input:
            x = x + self.absolute_positions(input_ids.shape[1], input_ids.device)
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(token_type_ids)
        if self.projection is not None:
            x = self.projection(x)                                            # (B, T, E) -> (B, T, H)
        x = self.layer_norm(x) * attention_mask[..., None].to(x.dtype)        # padding -> exactly 0
        return self.dropout(x)


# ----------------------------------------------------------------------------
# Layer, convolution branch, encoder
# ----------------------------------------------------------------------------


class DebertaLayer(TransformerLayer):
    """BERT's post-LN layer (model.py) with the disentangled attention:

        h = LN(H_q + Dropout(Attention(H_q, H)));  y = LN(h + Dropout(FFN(h)))

    The residual runs through the query stream H_q, which is the layer input
    H except in the Enhanced Mask Decoder."""

    def __init__(self, config):
        super().__init__(config, attention=DisentangledSelfAttention(config))

    def forward(self, hidden_states, mask, P=None, delta=None, query_states=None):
        query_states = hidden_states if query_states is None else query_states
        attended = self.attention(query_states, hidden_states, mask, P, delta)
        return self.add_feed_forward(self.add_attention(query_states, attended))


class ConvLayer(nn.Module):
    """DeBERTa v2-xlarge/xxlarge's convolution branch ("nGiE", n-gram induced
    input encoding, in the official README's "What's new in v2"): after layer
    0, a 1-D convolution over the *embedding output* adds local n-gram
    information to layer 0's output (docs/deberta.md 3):

        y = LN(layer0 + act(Dropout(Conv1d(x) with padded positions 0))) * mask"""

    def __init__(self, config):
        super().__init__()
        H, k = config.hidden_size, config.conv_kernel_size
        self.conv = nn.Conv1d(H, H, k, padding=(k - 1) // 2, groups=config.conv_groups)
        self.activation = Activation(config.conv_act, config.written_out)
        self.layer_norm = LayerNorm(H, config.layer_norm_eps, config.written_out)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, embeddings, layer0_output, attention_mask):
        real = attention_mask[..., None].bool()                                 # (B, T, 1)
        out = self.conv(embeddings.transpose(1, 2)).transpose(1, 2)             # (B, T, H), over positions
        out = self.activation(self.dropout(out.masked_fill(~real, 0.0)))
        return self.layer_norm(layer0_output + out) * real.to(out.dtype)


class DebertaEncoder(nn.Module):
    """L layers, the relative table P they share, and v2's optional
    LayerNorm over P and convolution branch."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        H = config.hidden_size
        self.layers = nn.ModuleList(DebertaLayer(config) for _ in range(config.num_hidden_layers))
        relative = config.relative_attention
        # v1: 2k rows; v2: 2 * position_buckets rows (HF: encoder.rel_embeddings)
        self.relative_embeddings = nn.Embedding(2 * config.attention_span, H) if relative else None
        has_norm = relative and config.relative_layer_norm
        self.relative_layer_norm = LayerNorm(H, config.layer_norm_eps, config.written_out) if has_norm else None
        self.conv = ConvLayer(config) if config.conv_kernel_size > 0 else None

    def relative_inputs(self, T, device):
        """(P, delta): the rows of the relative table that T tokens read (R, H),
        LayerNorm'd in v2/v3, and the (T, T) index into them; (None, None)
        without relative attention.

        delta grows with i - j, so the rows read are delta(0, T-1) ..
        delta(T-1, 0). A sequence shorter than the attention span reads only
        a slice of the 2S rows (255 of deberta-v3's 512 at T = 128); keeping
        just that slice saves each layer projecting and scoring the rest
        (Hugging Face's v1 slices the same way)."""
        if self.relative_embeddings is None:
            return None, None
        delta = relative_index(T, self.config, device)
        first, last = int(delta.min()), int(delta.max())
        P = self.relative_embeddings.weight[first:last + 1]    # (R, H), R <= 2S
        if self.relative_layer_norm is not None:
            P = self.relative_layer_norm(P)                  # once per forward, shared by all layers
        return P, delta - first

    def forward(self, x, attention_mask, keep_all=True):
        """x (B, T, H) the embedding output, attention_mask (B, T). As BERT's
        Encoder: the hidden states [x, h_1, ..., h_L], or with keep_all=False
        the last two (the Enhanced Mask Decoder reads h_(L-1))."""
        mask = pairwise_mask(attention_mask)                 # (B, 1, T, T)
        P, delta = self.relative_inputs(x.shape[1], x.device)
        states = [x]
        for depth, layer in enumerate(self.layers):
            h = layer(states[-1], mask, P, delta)
            if depth == 0 and self.conv is not None:
                h = self.conv(x, h, attention_mask)
            states = states + [h] if keep_all else [states[-1], h]
        return states


# ----------------------------------------------------------------------------
# Heads
# ----------------------------------------------------------------------------


class DebertaPooler(Pooler):
    """act(W dropout(h_[CLS])): BERT's Pooler with GELU (pooler_hidden_act)
    for tanh and a dropout in front (HF's ContextPooler, `pooler.dense`)."""

    def __init__(self, config):
        super().__init__(config)
        self.dropout = nn.Dropout(config.pooler_dropout)
        self.activation = Activation(config.pooler_hidden_act, config.written_out)

    def forward(self, sequence_output):
        return self.activation(self.dense(self.dropout(sequence_output[:, 0])))   # (B, T, H) -> (B, H)


# ----------------------------------------------------------------------------
# The model
# ----------------------------------------------------------------------------


class DebertaModel(nn.Module):
    """Embeddings -> encoder -> heads, with BertModel's interface:
    `model(input_ids, attention_mask=None, token_type_ids=None)` returns a
    minibert.model.BertModelOutput (last_hidden_state; hidden_states: L + 1
    tensors, the embedding output then each layer; mlm_logits; pooled_output).

    MLM logits, two ways:
      * `output.mlm_logits` is what DeBERTa was pre-trained to predict: the
        Enhanced Mask Decoder's output through the head (official code;
        transformers' DebertaForMaskedLM does NOT do this, it applies the head
        to the last layer, docs/deberta.md 2). A position-biased model has no EMD
        and reads the last layer, as the official code does.
      * `model.mlm_head(h, model.embeddings.word_embeddings.weight)` reads any
        hidden state h (..., H) directly. probe.py reaches the head this way,
        exactly as for BERT, and should: EMD is not a read-out of a layer but
        two more runs of the last layer with absolute positions added, so it
        only means something on top of layer L-1; probing asks what each
        layer h_l itself encodes. On the last layer this equals transformers'
        DebertaForMaskedLM(legacy=False).

    Parameter names follow model.py's (BERT's) where the part is BERT's;
    `python -m minibert.checkpoints.name_maps deberta-v1` (or deberta-v3) prints every
    one beside the Hugging Face name it is saved under.
    """

    pooler_class = DebertaPooler   # what a fine-tuning run builds when a checkpoint has no pooler

    def __init__(self, config, with_pooler=False, with_mlm_head=True):
        super().__init__()
        config.validate()
        self.config = config
        self.uses_emd = with_mlm_head and not config.position_biased_input
        if self.uses_emd and config.embedding_dim != config.hidden_size:
            raise MiniBertError(f"config: embedding_size {config.embedding_dim} != hidden_size {config.hidden_size}: "
                                "the Enhanced Mask Decoder adds E-wide absolute positions to H-wide hidden states")
        self.embeddings = DebertaEmbeddings(config, with_position_table=self.uses_emd)
        self.encoder = DebertaEncoder(config)
        self.pooler = DebertaPooler(config) if with_pooler else None
        # dense H -> E, act, LayerNorm, decoder tied to the word embeddings plus a
        # bias: BERT's head exactly (official BertLMPredictionHead).
        self.mlm_head = MaskedLMHead(config) if with_mlm_head else None
        self.pair_head = None          # DeBERTa has no sentence-pair pre-training task
        self.apply(self.init_weights)

    # BertModel's initialisation (N(0, 0.02) weights, zero biases, LayerNorm as
    # identity), written_out switch and parameter count, shared as they are.
    init_weights = BertModel.init_weights
    use_written_out = BertModel.use_written_out
    num_parameters = BertModel.num_parameters

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None,
                all_hidden_states=True):
        """As BertModel.forward. input_ids, attention_mask (1 real, 0 padding)
        and token_type_ids are (B, T); token types are ignored when
        type_vocab_size is 0 (every released model). `mlm_positions` (B, T)
        boolean runs the MLM head (after EMD) on those positions only: the
        logits are then `selected_mlm_logits` (N, V), else `mlm_logits`
        (B, T, V)."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids, attention_mask)         # (B, T, H)
        states = self.encoder(x, attention_mask, keep_all=all_hidden_states)

        output = BertModelOutput(states[-1], hidden_states=tuple(states) if all_hidden_states else None)
        if self.pooler is not None:
            output.pooled_output = self.pooler(states[-1])
        if self.mlm_head is not None:
            logits = self.mlm_logits(states, attention_mask, mlm_positions)
            if mlm_positions is None:
                output.mlm_logits = logits              # (B, T, V)
            else:
                output.selected_mlm_logits = logits     # (N, V)
        return output

    def drop_pretraining_heads(self, keep_pooler=True):
        """Remove the MLM head and what only it reads: the Enhanced Mask
        Decoder's absolute position table (a position-biased model keeps its
        table, which the input reads); and the pooler unless keep_pooler.
        Fine-tuning does this (finetuning.TaskModel): torch.distributed refuses
        parameters that get no gradient, and the model saved afterwards has
        none of them, like transformers' DebertaV2Model. (DeBERTa has no
        sentence-pair head.)"""
        self.mlm_head = None
        self.pair_head = None
        if self.uses_emd:
            self.embeddings.position_embeddings = None
            self.uses_emd = False
        if not keep_pooler:
            self.pooler = None

    def mlm_logits(self, states, attention_mask, mlm_positions=None):
        """The pre-training MLM logits from the encoder's states (at least its
        last two): EMD (or, position-biased, the last layer) -> head."""
        word_embeddings = self.embeddings.word_embeddings.weight
        if mlm_positions is not None and not mlm_positions.any():
            return word_embeddings.new_zeros(0, self.config.vocab_size)         # nothing asked: skip EMD
        decoded = self.enhanced_mask_decoder(states[-2], attention_mask) if self.uses_emd else states[-1]
        selected = decoded if mlm_positions is None else decoded[mlm_positions]     # (B, T, H) or (N, H)
        return self.mlm_head(selected, word_embeddings)

    def enhanced_mask_decoder(self, hidden_states, attention_mask):
        """[DeBERTa] 3.2, as the official code does it (docs/deberta.md 2;
        apps/models/masked_language_model.py, EnhancedMaskDecoder):

            I_0 = H_{L-1} + Z                 Z: absolute position embeddings, raw lookup
            I_n = Layer_L(keys, values = H_{L-1}, queries = I_{n-1}),  n = 1, 2

        H_{L-1} (B, T, H) is the second-to-last encoder state (the input of the
        last layer) and Layer_L is the last encoder layer itself, run twice
        more with its own weights: EMD adds no parameters besides the absolute
        table. Relative positions and padding are as in the encoder. Returns
        I_2, (B, T, H), which the MLM head reads; the encoder's own last
        output is not used."""
        T = hidden_states.shape[1]
        Z = self.embeddings.absolute_positions(T, hidden_states.device)       # (T, H)
        mask = pairwise_mask(attention_mask)
        P, delta = self.encoder.relative_inputs(T, hidden_states.device)
        last_layer = self.encoder.layers[-1]
        queries = hidden_states + Z
        for _ in range(EMD_STEPS):
            queries = last_layer(hidden_states, mask, P, delta, query_states=queries)
        return queries
