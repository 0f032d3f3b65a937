"""DeBERTa (minibert/deberta.py): equal to transformers' DebertaModel /
DebertaV2Model on the same random weights, to 1e-5 in fp32, for every hidden
state at real positions; the Enhanced Mask Decoder equal to a computation
written out here from docs/deberta.md; the building blocks against values
worked out by hand; config validation.

Weights go from the transformers model into ours through a small name map
local to this file (the checkpoint loader has its own)."""

import math
import re

import pytest
import torch

from minibert.checkpoints.name_maps import split_v1_in_proj
from minibert.deberta import (DebertaConfig, DebertaModel, DebertaPooler, DisentangledSelfAttention, log_bucket,
                              masked_softmax, pairwise_mask, relative_index, relative_scores_gathered,
                              relative_scores_written_out)
from minibert.support import MiniBertError
from minibert.probing import hidden_states as probe_hidden_states
from tiny_models import random_batch

TOLERANCE = 1e-5
VOCAB = 99

TINY = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
V1 = dict(model_type="deberta", relative_attention=True, pos_att_type="c2p|p2c", max_relative_positions=-1,
          position_biased_input=False)
V3 = dict(model_type="deberta-v2", relative_attention=True, pos_att_type="p2c|c2p", max_relative_positions=-1,
          position_buckets=8, share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False)

# Tiny configs shaped like the released models (deberta.md 4.2), and the switches they do not use.
SHAPES = {
    "deberta-base (v1)": V1,
    "v1, relative span 6 < length": {**V1, "max_relative_positions": 6},
    "deberta-v3-small/base": V3,
    "v3, buckets reach their last row": {**V3, "max_relative_positions": 16},
    "deberta-v2-xlarge (conv branch)": {**V3, "conv_kernel_size": 3, "conv_act": "gelu"},
    "v2, own relative projections": {**V3, "share_att_key": False, "norm_rel_ebd": "none"},
    "v2, no buckets": {**V3, "position_buckets": -1, "max_relative_positions": 10},
    "v2, position-biased input, E != H, token types, c2p only":
        {**V3, "position_biased_input": True, "embedding_size": 16, "type_vocab_size": 2, "pos_att_type": "c2p"},
    "v1, position-biased input, token types, p2c only":
        {**V1, "position_biased_input": True, "type_vocab_size": 2, "pos_att_type": "p2c"},
    "v1, absolute positions only": {**V1, "relative_attention": False, "position_biased_input": True},
}
EMD_SHAPES = [name for name, shape in SHAPES.items() if not shape["position_biased_input"]]


def batch(length, vocab_size=VOCAB):
    """(input_ids, attention_mask, token_type_ids): three rows, two of them padded."""
    if length == 11:
        return random_batch(vocab_size)
    generator = torch.Generator().manual_seed(length)
    input_ids = torch.randint(5, vocab_size, (3, length), generator=generator)
    attention_mask = torch.ones(3, length, dtype=torch.long)
    attention_mask[1, length * 2 // 3:] = 0
    attention_mask[2, length // 3:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = (torch.arange(length) >= length // 2).long().expand(3, length)
    return input_ids, attention_mask, token_type_ids


def randomize(module, seed=1, scale=0.2):
    """Random values everywhere (LayerNorm gains near 1, biases too), so a
    swapped weight or a missed bias cannot hide behind the default init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            centre = 1.0 if name.endswith("LayerNorm.weight") or name.endswith("layer_norm.weight") else 0.0
            p.copy_(centre + scale * torch.randn(p.shape, generator=generator))
    return module.eval()


def assert_close(ours, theirs, what):
    assert ours.shape == theirs.shape, f"{what}: shape {tuple(ours.shape)} != {tuple(theirs.shape)}"
    diff = (ours - theirs).abs().max().item()
    assert diff <= TOLERANCE, f"{what}: max abs diff {diff:.2e} > {TOLERANCE}"


# ----------------------------------------------------------------------------
# transformers -> ours, through a test-local name map
# ----------------------------------------------------------------------------

# transformers module -> ours, outside the layers
MODULES = {
    "embeddings.word_embeddings": "embeddings.word_embeddings",
    "embeddings.position_embeddings": "embeddings.position_embeddings",
    "embeddings.token_type_embeddings": "embeddings.token_type_embeddings",
    "embeddings.embed_proj": "embeddings.projection",
    "embeddings.LayerNorm": "embeddings.layer_norm",
    "encoder.rel_embeddings": "encoder.relative_embeddings",
    "encoder.LayerNorm": "encoder.relative_layer_norm",
    "encoder.conv.conv": "encoder.conv.conv",
    "encoder.conv.LayerNorm": "encoder.conv.layer_norm",
    "lm_predictions.lm_head": "mlm_head",
    "lm_predictions.lm_head.dense": "mlm_head.dense",
    "lm_predictions.lm_head.LayerNorm": "mlm_head.layer_norm",
}
# inside encoder.layer.{i} -> encoder.layers.{i}
LAYER_MODULES = {
    "attention.self.query_proj": "attention.query",
    "attention.self.key_proj": "attention.key",
    "attention.self.value_proj": "attention.value",
    "attention.self.pos_key_proj": "attention.relative_key",       # v2, share_att_key false
    "attention.self.pos_query_proj": "attention.relative_query",
    "attention.self.pos_proj": "attention.relative_key",           # v1
    "attention.self.pos_q_proj": "attention.relative_query",
    "attention.output.dense": "attention.output_projection",
    "attention.output.LayerNorm": "attention_layer_norm",
    "intermediate.dense": "feed_forward.w1",
    "output.dense": "feed_forward.w2",
    "output.LayerNorm": "feed_forward_layer_norm",
}


def ours_from_transformers(hf_state, config):
    """transformers' state dict -> ours, v1's fused in_proj split per head."""
    tensors = {}
    for name, tensor in hf_state.items():
        name = name.removeprefix("deberta.")
        layer = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)", name)
        if layer is None:
            module, param = name.rsplit(".", 1)
            tensors[f"{MODULES[module]}.{param}"] = tensor
            continue
        prefix, rest = f"encoder.layers.{layer[1]}.attention.", layer[2]
        if rest == "attention.self.in_proj.weight":
            q, k, v = split_v1_in_proj(tensor, config.num_attention_heads)
            tensors.update({prefix + "query.weight": q, prefix + "key.weight": k, prefix + "value.weight": v})
        elif rest in ("attention.self.q_bias", "attention.self.v_bias"):
            tensors[prefix + ("query.bias" if rest.endswith("q_bias") else "value.bias")] = tensor
        else:
            module, param = rest.rsplit(".", 1)
            tensors[f"encoder.layers.{layer[1]}.{LAYER_MODULES[module]}.{param}"] = tensor
    return tensors


def pair(transformers, shape):
    """(config, transformers model, our model) with the same random weights.
    transformers' model is its ForMaskedLM with the real `lm_predictions`
    head (legacy=False) where that head can run (E == H), else the bare model.
    EMD's absolute table, which transformers does not build, gets random values."""
    config = DebertaConfig(**TINY, **shape)
    classes = {"deberta": (transformers.DebertaConfig, transformers.DebertaModel, transformers.DebertaForMaskedLM),
               "deberta-v2": (transformers.DebertaV2Config, transformers.DebertaV2Model,
                              transformers.DebertaV2ForMaskedLM)}
    config_class, bare, masked_lm = classes[config.model_type]
    with_head = config.embedding_dim == config.hidden_size
    hf = randomize((masked_lm if with_head else bare)(config_class(**config.to_dict(), legacy=False)))
    ours = DebertaModel(config, with_mlm_head=with_head).eval()
    missing, unexpected = ours.load_state_dict(ours_from_transformers(hf.state_dict(), config), strict=False)
    assert unexpected == []
    assert missing == (["embeddings.position_embeddings.weight"] if ours.uses_emd else [])
    if ours.uses_emd:
        randomize(ours.embeddings.position_embeddings, seed=2)
    return config, hf, ours


def hf_base(hf):
    return getattr(hf, "deberta", hf)


# ----------------------------------------------------------------------------
# Parity with transformers
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("length", [11, 24], ids=["length-11", "length-24"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_hidden_state_matches_transformers_at_real_positions(transformers, shape, length):
    config, hf, ours = pair(transformers, SHAPES[shape])
    input_ids, attention_mask, token_type_ids = batch(length)
    with torch.no_grad():
        theirs = hf_base(hf)(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                             output_hidden_states=True).hidden_states
        mine = ours(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).hidden_states
    assert len(mine) == len(theirs) == config.num_hidden_layers + 1
    # Padded query rows legitimately differ: XSoftmax zeroes them, transformers 5 spreads them (deberta.md 1.6).
    real = attention_mask.bool()
    for depth, (a, b) in enumerate(zip(mine, theirs)):
        assert_close(a[real], b[real], f"hidden state {depth}")
    assert (mine[0][~real] == 0).all()     # the embedding output is zeroed at padding


@pytest.mark.parametrize("shape", [s for s in SHAPES if "E != H" not in s])
def test_the_head_on_the_last_layer_matches_transformers_masked_lm(transformers, shape):
    """model.mlm_head(h, E) (the probe's way, no EMD) is transformers'
    DebertaForMaskedLM(legacy=False); for a position-biased model it is also
    the model's own mlm_logits, as in the official code."""
    config, hf, ours = pair(transformers, SHAPES[shape])
    input_ids, attention_mask, token_type_ids = batch(11)
    real = attention_mask.bool()
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids).logits
        output = ours(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        direct = ours.mlm_head(output.last_hidden_state, ours.embeddings.word_embeddings.weight)
    assert_close(direct[real], theirs[real], "head on the last layer")
    if config.position_biased_input:
        assert_close(output.mlm_logits[real], theirs[real], "MLM logits")


def test_the_pooler_matches_transformers_context_pooler(transformers):
    from transformers.models.deberta_v2.modeling_deberta_v2 import ContextPooler
    config = DebertaConfig(**TINY, **V3)
    theirs = randomize(ContextPooler(transformers.DebertaV2Config(**config.to_dict())))
    ours = DebertaPooler(config).eval()
    ours.load_state_dict(theirs.state_dict())
    hidden = torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(0))
    assert_close(ours(hidden), theirs(hidden), "pooled output")


# ----------------------------------------------------------------------------
# The Enhanced Mask Decoder against a computation written out here
# ----------------------------------------------------------------------------


def projections(attention, config):
    """(W, b) for q, k, v, K_r and Q_r of one transformers attention module;
    v1's in_proj cut per head the way transformers' own EMD branch cuts it."""
    H = config.hidden_size
    zero = torch.zeros(H)
    if config.model_type == "deberta":
        pieces = attention.in_proj.weight.chunk(3 * config.num_attention_heads, dim=0)   # q, k, v of head 0, head 1...
        q, k, v = (torch.cat(pieces[part::3]) for part in range(3))
        relative_key = (attention.pos_proj.weight, zero) if "c2p" in config.pos_att_type else None
        relative_query = ((attention.pos_q_proj.weight, attention.pos_q_proj.bias)
                          if "p2c" in config.pos_att_type else None)
        return (q, attention.q_bias), (k, zero), (v, attention.v_bias), relative_key, relative_query
    linear = {name: (m.weight, m.bias) for name, m in attention.named_children() if hasattr(m, "weight")}
    shared = config.share_att_key
    return (linear["query_proj"], linear["key_proj"], linear["value_proj"],
            linear["key_proj" if shared else "pos_key_proj"], linear["query_proj" if shared else "pos_query_proj"])


def written_out_delta(T, config):
    """delta(i, j) as deberta.md 1.2 states it: v1 clamp(i - j + k, 0, 2k - 1);
    v2 clamp(bucket(i - j) + S, 0, 2S - 1), with transformers' bucket function."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position
    i = torch.arange(T)
    r = i[:, None] - i[None, :]
    S = config.attention_span
    if config.position_buckets > 0:
        r = make_log_bucket_position(r, config.position_buckets, config.max_relative).long()
    return (r + S).clamp(0, 2 * S - 1)


def written_out_layer(layer, kv, query, real, P, delta, config):
    """One DeBERTa layer, its attention spelled out from deberta.md 1.1 (per
    head, every term of every (i, j) pair):

        A[i, j] = (Q_i . K_j + Q_i . K_r[delta(i, j)] + K_j . Q_r[delta(i, j)]) / sqrt(3 D)

    then softmax over real keys, the context, and transformers' own residual
    blocks (dense + LayerNorm, FFN) around it."""
    B, T, H = query.shape
    A, D = config.num_attention_heads, config.head_size
    (Wq, bq), (Wk, bk), (Wv, bv), relative_key, relative_query = projections(layer.attention.self, config)
    Q = (query @ Wq.T + bq).view(B, T, A, D)
    K = (kv @ Wk.T + bk).view(B, T, A, D)
    V = (kv @ Wv.T + bv).view(B, T, A, D)
    scores = torch.einsum("biad,bjad->baij", Q, K)                                      # content -> content
    if "c2p" in config.pos_att_type:
        K_r = (P @ relative_key[0].T + relative_key[1]).view(-1, A, D)[delta]           # (T, T, A, D)
        scores = scores + torch.einsum("biad,ijad->baij", Q, K_r)                        # content -> position
    if "p2c" in config.pos_att_type:
        Q_r = (P @ relative_query[0].T + relative_query[1]).view(-1, A, D)[delta]
        scores = scores + torch.einsum("bjad,ijad->baij", K, Q_r)                        # position -> content
    scores = scores / math.sqrt(3 * D)
    allowed = real[:, None, :, None] & real[:, None, None, :]
    probs = scores.masked_fill(~allowed, -math.inf).softmax(dim=-1).nan_to_num(0.0)
    context = torch.einsum("baij,bjad->biad", probs, V).reshape(B, T, H)
    h = layer.attention.output(context, query)
    return layer.output(layer.intermediate(h), h)


@pytest.mark.parametrize("shape", EMD_SHAPES)
def test_mlm_logits_are_the_enhanced_mask_decoder_written_out(transformers, shape):
    """deberta.md 2: I = H_{L-1} + Z; twice I = Layer_L(kv = H_{L-1}, queries = I);
    then the lm head. transformers has no EMD (its MLM reads H_L), so the
    reference is written out here, on transformers' weights and layers."""
    config, hf, ours = pair(transformers, SHAPES[shape])
    input_ids, attention_mask, _ = batch(24)
    T, real = input_ids.shape[1], attention_mask.bool()
    base = hf_base(hf)
    with torch.no_grad():
        states = base(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states
        P = base.encoder.get_rel_embedding()                      # LayerNorm'd in v2/v3
        delta = written_out_delta(T, config)
        last = base.encoder.layer[-1]
        # The written-out layer is the layer: it reproduces transformers' last encoder layer.
        again = written_out_layer(last, states[-2], states[-2], real, P, delta, config)
        assert_close(again[real], states[-1][real], "written-out last layer")

        Z = ours.embeddings.position_embeddings.weight[:T]       # raw absolute positions, (T, H)
        queries = states[-2] + Z
        for _ in range(2):                                        # n = 2, the same layer
            queries = written_out_layer(last, states[-2], queries, real, P, delta, config)
        expected = hf.lm_predictions(queries, base.embeddings.word_embeddings)          # (B, T, V)

        chosen = real & (torch.arange(T) % 3 == 1)
        full = ours(input_ids, attention_mask=attention_mask).mlm_logits
        selected = ours(input_ids, attention_mask=attention_mask, mlm_positions=chosen).selected_mlm_logits
    assert_close(full[real], expected[real], "EMD logits, every position")
    assert_close(selected, expected[chosen], "EMD logits, chosen positions")
    assert not torch.allclose(full[real], hf(input_ids=input_ids, attention_mask=attention_mask).logits[real],
                              atol=1e-3)                          # EMD is not the head on H_L


def test_emd_adds_no_parameters_but_the_absolute_position_table():
    config = DebertaConfig(**TINY, **V3)
    with_head = {n for n, _ in DebertaModel(config).named_parameters()}
    without = {n for n, _ in DebertaModel(config, with_mlm_head=False).named_parameters()}
    extra = {n for n in with_head - without if not n.startswith("mlm_head.")}
    assert extra == {"embeddings.position_embeddings.weight"}


# ----------------------------------------------------------------------------
# Building blocks, by hand
# ----------------------------------------------------------------------------


def test_log_buckets_keep_near_distances_and_squeeze_far_ones():
    # deberta-v3's position_buckets 256, max_relative_positions 512: values from deberta.md 1.2
    r = torch.tensor([0, 5, -128, 128, 129, 135, 150, 200, 256, 300, 400, 500, 510, 511, -200])
    expected = [0, 5, -128, 128, 129, 133, 143, 169, 192, 207, 233, 254, 255, 255, -169]
    assert log_bucket(r, 256, 512).tolist() == expected


def test_log_buckets_worked_by_hand():
    # position_buckets 8, max_relative_positions M = 16: m = 8 // 2 = 4, ln((M - 1) / m) = ln 3.75 = 1.3218.
    #   |r| <= 4 keeps its own bucket: b(3) = 3, b(4) = 4
    #   b(5)  = 4 + ceil(3 ln(5/4)  / 1.3218) = 4 + ceil(0.506) = 5
    #   b(6)  = 4 + ceil(3 ln(6/4)  / 1.3218) = 4 + ceil(0.920) = 5     (5 and 6 share a bucket)
    #   b(8)  = 4 + ceil(3 ln(8/4)  / 1.3218) = 4 + ceil(1.573) = 6
    #   b(12) = 4 + ceil(3 ln(12/4) / 1.3218) = 4 + ceil(2.494) = 7
    #   b(15) = 4 + ceil(3 ln(15/4) / 1.3218) = 4 + ceil(3.000) = 7     (exactly 3: must not round up to 8)
    #   b(40) = 4 + ceil(3 ln(40/4) / 1.3218) = 4 + ceil(5.226) = 10    (beyond M; the index clamps it)
    #   b(-8) = -b(8) = -6
    r = torch.tensor([3, 4, 5, 6, 8, 12, 15, 40, -8])
    assert log_bucket(r, 8, 16).tolist() == [3, 4, 5, 5, 6, 7, 7, 10, -6]


# The 4-token example: one head, D = 2, hand-chosen content and relative vectors.
Q_C = [[1, 0], [0, 1], [1, 1], [2, -1]]      # Q_i, query i = 0..3
K_C = [[1, 2], [0, 1], [-1, 0], [1, -1]]     # K_j, key j = 0..3
K_R = [[1, 0], [0, 1], [1, 1], [-1, 0]]      # K_r[row], rows 0..3 of the relative table (2k rows, k = 2)
Q_R = [[0, 1], [1, 0], [1, 1], [0, -1]]      # Q_r[row]: K_R with its two columns swapped
# delta(i, j) = clamp(i - j + k, 0, 2k - 1) with k = 2 ([DeBERTa] Eq. 3):
#   i - j:  [ 0 -1 -2 -3]        delta:  [2 1 0 0]     (-3 + 2 = -1 -> clamped to 0)
#           [ 1  0 -1 -2]                [3 2 1 0]
#           [ 2  1  0 -1]                [3 3 2 1]     ( 2 + 2 =  4 -> clamped to 3)
#           [ 3  2  1  0]                [3 3 3 2]
DELTA = [[2, 1, 0, 0], [3, 2, 1, 0], [3, 3, 2, 1], [3, 3, 3, 2]]
# c2c[i, j] = Q_i . K_j, e.g. c2c[3, 0] = [2, -1] . [1, 2] = 0
C2C = [[1, 0, -1, 1], [2, 1, 0, -1], [3, 1, -1, 0], [0, -1, -2, 3]]
# c2p[i, j] = Q_i . K_r[delta(i, j)], e.g. c2p[2, 0] = [1, 1] . K_r[3] = [1, 1] . [-1, 0] = -1
C2P = [[1, 0, 1, 1], [0, 1, 1, 0], [-1, -1, 2, 1], [-2, -2, -2, 1]]
# p2c[i, j] = K_j . Q_r[delta(i, j)], e.g. p2c[0, 0] = K_0 . Q_r[2] = [1, 2] . [1, 1] = 3 and
# p2c[1, 0] = K_0 . Q_r[3] = [1, 2] . [0, -1] = -2. (The paper's Q_r[delta(j, i)] would give row 0 =
# [3, -1, 0, 1]; the released code, and so the checkpoints, use delta(i, j): row 0 = [3, 0, 0, -1].)
P2C = [[3, 0, 0, -1], [-2, 1, -1, -1], [-2, -1, -1, 1], [-2, -1, 0, 0]]
# A = c2c + c2p + p2c, before the scale 1 / sqrt(3 D) = 1 / sqrt(6)
SCORES = [[5, 0, 0, 1], [0, 3, 0, -2], [0, -1, 0, 2], [-4, -4, -4, 4]]


def hand_tensor(rows):
    return torch.tensor(rows, dtype=torch.float32)


def hand_worked_attention():
    """A one-head, D = 2 v1 attention whose projections make the example's
    vectors: W_q = W_k = W_v = W_k,r = I, W_q,r swaps the two columns, no
    biases, and the output projection is I."""
    config = DebertaConfig(**{**V1, "max_relative_positions": 2}, vocab_size=10, hidden_size=2, num_hidden_layers=1,
                           num_attention_heads=1, intermediate_size=4, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
    attention = DisentangledSelfAttention(config).eval()
    identity, swap = torch.eye(2), torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    with torch.no_grad():
        for linear in (attention.query, attention.key, attention.value, attention.relative_key,
                       attention.relative_query, attention.output_projection):
            linear.weight.copy_(swap if linear is attention.relative_query else identity)
            if linear.bias is not None:
                linear.bias.zero_()
    return config, attention


def test_v1_relative_distances_of_the_4_token_example_by_hand():
    config, _ = hand_worked_attention()
    assert relative_index(4, config).tolist() == DELTA


def test_v2_buckets_of_4_tokens_by_hand():
    # position_buckets 2: m = 1, so b(r) = r for |r| <= 1 and sign(r) (1 + ceil(0 * ...)) = +-1 beyond:
    #   i - j:  [ 0 -1 -2 -3]    b:  [ 0 -1 -1 -1]    delta = b + S, S = 2:  [2 1 1 1]
    #           [ 1  0 -1 -2]        [ 1  0 -1 -1]                           [3 2 1 1]
    #           [ 2  1  0 -1]        [ 1  1  0 -1]                           [3 3 2 1]
    #           [ 3  2  1  0]        [ 1  1  1  0]                           [3 3 3 2]
    config = DebertaConfig(**{**TINY, **V3, "position_buckets": 2, "max_relative_positions": 8})
    r = torch.arange(4)[:, None] - torch.arange(4)[None, :]
    assert log_bucket(r, 2, 8).tolist() == [[0, -1, -1, -1], [1, 0, -1, -1], [1, 1, 0, -1], [1, 1, 1, 0]]
    assert relative_index(4, config).tolist() == [[2, 1, 1, 1], [3, 2, 1, 1], [3, 3, 2, 1], [3, 3, 3, 2]]


@pytest.mark.parametrize("scores", [relative_scores_written_out, relative_scores_gathered])
def test_c2p_and_p2c_scores_of_the_4_token_example_by_hand(scores):
    q, k = hand_tensor(Q_C)[None, None], hand_tensor(K_C)[None, None]        # (B, A, T, D) = (1, 1, 4, 2)
    K_r, Q_r = hand_tensor(K_R)[None, None], hand_tensor(Q_R)[None, None]    # (1, A, R, D) = (1, 1, 4, 2)
    delta = torch.tensor(DELTA)
    assert torch.allclose(q @ k.transpose(-1, -2), hand_tensor(C2C))
    assert torch.allclose(scores(q, k, K_r, None, delta), hand_tensor(C2P), atol=1e-5)
    assert torch.allclose(scores(q, k, None, Q_r, delta), hand_tensor(P2C), atol=1e-5)


@pytest.mark.parametrize("shape", ["v1, relative span 6 < length", "v3, buckets reach their last row"])
def test_written_out_and_gathered_relative_scores_are_equal(shape):
    """The formula's lookup of one row per (i, j) and the fast gather over
    (T, R) products give the same c2p + p2c, with clamped and bucketed rows."""
    config = DebertaConfig(**TINY, **SHAPES[shape])
    generator = torch.Generator().manual_seed(0)
    T, A, D = 24, config.num_attention_heads, config.head_size
    delta = relative_index(T, config)
    R = 2 * config.attention_span
    q, k = torch.randn(3, A, T, D, generator=generator), torch.randn(3, A, T, D, generator=generator)
    K_r, Q_r = torch.randn(1, A, R, D, generator=generator), torch.randn(1, A, R, D, generator=generator)
    for terms in [(K_r, Q_r), (K_r, None), (None, Q_r)]:
        assert_close(relative_scores_gathered(q, k, *terms, delta), relative_scores_written_out(q, k, *terms, delta),
                     "c2p + p2c")


@pytest.mark.parametrize("written_out", [True, False], ids=["written-out", "gathered"])
def test_the_attention_module_scores_and_attends_as_worked_by_hand(written_out):
    config, attention = hand_worked_attention()
    attention.written_out = written_out
    q, k = hand_tensor(Q_C)[None, None], hand_tensor(K_C)[None, None]
    P = hand_tensor(K_R)                                 # W_k,r = I gives K_r = P; W_q,r swaps: Q_r = Q_R
    delta = relative_index(4, config)
    relative = attention.relative_scores(q, k, P, delta)
    assert torch.allclose(q @ k.transpose(-1, -2) + relative, hand_tensor(SCORES), atol=1e-5)
    # The whole attention: softmax(A / sqrt(3 D)) V, with V = K_C (W_v = I) and W^O = I.
    expected = (hand_tensor(SCORES) / math.sqrt(6)).softmax(dim=-1) @ hand_tensor(K_C)
    mask = pairwise_mask(torch.ones(1, 4, dtype=torch.long))
    with torch.no_grad():
        out = attention(hand_tensor(Q_C)[None], hand_tensor(K_C)[None], mask, P, delta)
    assert torch.allclose(out[0], expected, atol=1e-5)


def test_v1_relative_index_is_query_minus_key_plus_k_clamped():
    config = DebertaConfig(**{**TINY, **V1, "max_relative_positions": 4})
    delta = relative_index(7, config)                     # k = 4: rows 0..7
    assert delta[0].tolist() == [4, 3, 2, 1, 0, 0, 0]     # key after the query: i - j < 0
    assert delta[6].tolist() == [7, 7, 7, 7, 6, 5, 4]     # distances beyond k share the end rows
    assert torch.equal(delta.diagonal(), torch.full((7,), 4))


def official_newest_relative_index(T, position_buckets, k):
    """The newest official code's rule (da_utils.py, the fast path), written
    out here: the distance clamped to +-(k - 1), then looked up in a table of
    the buckets of -k .. k - 1, then the final clamp (docs/deberta.md 1.2)."""
    S, m = position_buckets, position_buckets // 2
    distances = torch.arange(-k, k)
    near = (distances < m) & (distances > -m)
    magnitude = torch.where(near, torch.full_like(distances, m - 1), distances.abs())
    far_bucket = torch.ceil(torch.log(magnitude / m) / math.log((k - 1) / m) * (m - 1)) + m
    table = torch.where(magnitude <= m, distances, (far_bucket * torch.sign(distances)).long())
    positions = torch.arange(T)
    r = (positions[:, None] - positions[None, :]).clamp(-(k - 1), k - 1)
    return (table[r + k] + S).clamp(0, 2 * S - 1)


def test_beyond_k_tokens_only_keys_k_or_more_after_the_query_read_another_row_than_the_newest_official_code():
    """docs/deberta.md 1.2: with 256 buckets, k = 512 and 1024 tokens, the
    pairs with j - i >= k, and only those, differ: row 0 here (as transformers
    and the 0.1.12 release), row 1 in the newest official code, which clamps
    the distance before bucketing. (T - k)(T - k + 1) / 2 = 512 * 513 / 2 pairs."""
    S, k, T = 256, 512, 1024
    config = DebertaConfig(**{**TINY, **V3, "position_buckets": S, "max_relative_positions": k,
                              "max_position_embeddings": T})
    ours, official = relative_index(T, config), official_newest_relative_index(T, S, k)
    positions = torch.arange(T)
    key_k_or_more_after = (positions[None, :] - positions[:, None]) >= k          # j - i >= k
    differ = ours != official
    assert int(differ.sum()) == 131_328 == (T - k) * (T - k + 1) // 2
    assert torch.equal(differ, key_k_or_more_after)
    assert set(ours[differ].tolist()) == {0} and set(official[differ].tolist()) == {1}
    assert torch.equal(relative_index(k, config), official_newest_relative_index(k, S, k))   # T <= k: equal


def test_masked_softmax_is_zero_on_padding_and_on_padded_query_rows():
    scores = torch.tensor([[0.0, math.log(3.0), 5.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    mask = pairwise_mask(torch.tensor([[1, 1, 0]]))[0, 0]                # query 2 is padding
    probs = masked_softmax(scores, mask)
    assert torch.allclose(probs[0], torch.tensor([0.25, 0.75, 0.0]))
    assert torch.equal(probs[2], torch.zeros(3))


@pytest.mark.parametrize("shape", ["deberta-base (v1)", "deberta-v2-xlarge (conv branch)"])
def test_written_out_path_equals_the_fused_kernel_everywhere(shape):
    config = DebertaConfig(**TINY, **SHAPES[shape])
    model = randomize(DebertaModel(config))
    input_ids, attention_mask, _ = batch(11)
    with torch.no_grad():
        fused = model(input_ids, attention_mask=attention_mask)
        written = model.use_written_out()(input_ids, attention_mask=attention_mask)
    for depth, (a, b) in enumerate(zip(fused.hidden_states, written.hidden_states)):
        assert_close(a, b, f"hidden state {depth}")       # padded rows too: both zero them
    assert_close(fused.mlm_logits, written.mlm_logits, "MLM logits")


def test_gradients_are_finite_with_padded_rows():
    config = DebertaConfig(**TINY, **V3)
    model = randomize(DebertaModel(config)).train()
    input_ids, attention_mask, _ = batch(11)
    model(input_ids, attention_mask=attention_mask).mlm_logits.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_only_the_absolute_table_limits_the_length():
    short = dict(TINY, max_position_embeddings=16)
    long_ids = torch.ones(1, 20, dtype=torch.long)
    relative_only = DebertaModel(DebertaConfig(**short, **V3), with_mlm_head=False)
    assert relative_only(long_ids).last_hidden_state.shape == (1, 20, 32)
    with pytest.raises(MiniBertError, match=r"20 tokens.*max_position_embeddings \(16\)"):
        DebertaModel(DebertaConfig(**short, **V3))(long_ids)                       # EMD reads the table
    with pytest.raises(MiniBertError, match=r"20 tokens"):
        DebertaModel(DebertaConfig(**short, **{**V1, "position_biased_input": True}))(long_ids)


def test_probing_reads_every_layer_without_running_emd():
    config = DebertaConfig(**TINY, **V3)
    model = randomize(DebertaModel(config))
    input_ids, attention_mask, token_type_ids = batch(11)
    states = probe_hidden_states(model, dict(input_ids=input_ids, attention_mask=attention_mask,
                                             token_type_ids=token_type_ids))
    assert len(states) == len(config.depth_labels()) == 4
    last_only = model(input_ids, attention_mask=attention_mask, all_hidden_states=False)
    assert last_only.hidden_states is None
    assert_close(last_only.last_hidden_state.detach(), states[-1], "last hidden state")


# ----------------------------------------------------------------------------
# Config
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["deberta-base (v1)", "deberta-v2-xlarge (conv branch)"])
def test_config_round_trips_through_transformers_config_json(transformers, shape):
    config = DebertaConfig(**TINY, **SHAPES[shape])
    config_class = transformers.DebertaConfig if config.is_v1 else transformers.DebertaV2Config
    assert DebertaConfig.from_dict(config_class(**config.to_dict()).to_dict()) == config


def test_config_reads_released_style_fields_and_transformers_defaults():
    v3 = DebertaConfig.from_dict({"model_type": "deberta-v2", "relative_attention": True, "pos_att_type": "P2C|c2p",
                                  "position_buckets": 256, "norm_rel_ebd": "layer_norm", "share_att_key": True,
                                  "position_biased_input": False, "hidden_size": 768, "num_attention_heads": 12,
                                  "intermediate_size": 3072, "num_hidden_layers": 12, "attention_head_size": 64})
    assert v3.pos_att_type == ["p2c", "c2p"] and v3.attention_span == 256 and v3.vocab_size == 128100
    assert v3.to_dict()["model_type"] == "deberta-v2" and "written_out" not in v3.to_dict()
    bare = DebertaConfig.from_dict({"model_type": "deberta-v2"})
    assert (bare.hidden_size, bare.position_biased_input, bare.position_buckets, bare.conv_kernel_size) == \
        (1536, True, -1, 0)
    v1 = DebertaConfig.from_dict({"model_type": "deberta", "relative_attention": True, "max_relative_positions": -1})
    assert v1.attention_span == 512 and v1.vocab_size == 50265 and "embedding_size" not in v1.to_dict()


def test_a_model_with_emd_needs_embedding_size_equal_to_hidden_size():
    with pytest.raises(MiniBertError, match="Enhanced Mask Decoder"):
        DebertaModel(DebertaConfig(**TINY, **V1, embedding_size=16))


@pytest.mark.parametrize("shape", ["deberta-v3-small/base", "v2, own relative projections"])
def test_written_out_path_and_fused_kernel_give_the_same_gradients(shape):
    """The fused path gathers c2p and p2c another way (along the last
    dimension, p2c transposed) and scales K_r, Q_r instead of the scores:
    the gradients it sends into every parameter are the written-out path's."""
    config = DebertaConfig(**TINY, **SHAPES[shape])
    input_ids, attention_mask, _ = batch(11)
    gradients = []
    for written_out in (False, True):
        model = randomize(DebertaModel(config)).train()       # dropout 0 in TINY: the same function
        if written_out:
            model.use_written_out()
        model(input_ids, attention_mask=attention_mask).mlm_logits.square().mean().backward()
        gradients.append({name: p.grad for name, p in model.named_parameters()})
    fused, written = gradients
    assert fused.keys() == written.keys()
    for name in fused:
        assert_close(fused[name], written[name], f"gradient of {name}")


# ---- coursework exercises: log-bucket, c2p-p2c --------------------------------------------------


def test_exercise_log_bucket_by_hand():
    # m = 4, M = 32: |r| <= 4 keeps r; beyond, 4 + ceil(3 ln(|r| / 4) / ln(31 / 4)); |r| = 31 is exactly 4 + 3
    r = torch.tensor([0, 3, 4, 5, 6, 10, 20, 31, 32, 100, -4, -5, -31])
    assert log_bucket(r, 8, 32).tolist() == [0, 3, 4, 5, 5, 6, 7, 7, 8, 9, -4, -5, -7]


def test_exercise_log_bucket_matches_the_formula_everywhere():
    def bucket(r, position_buckets, M):
        m = position_buckets // 2
        if abs(r) <= m:
            return r
        return int(math.copysign(m + math.ceil((m - 1) * math.log(abs(r) / m) / math.log((M - 1) / m)), r))
    for position_buckets, M in ((256, 512), (32, 128)):
        r = torch.arange(-2 * M, 2 * M)
        assert log_bucket(r, position_buckets, M).tolist() == [bucket(x, position_buckets, M) for x in r.tolist()]
    assert log_bucket(torch.tensor([511, -511, 512]), 256, 512).tolist() == [255, -255, 256]


def _exercise_relative_inputs(T=5, S=3, B=2, A=3, D=4):
    torch.manual_seed(0)
    q, k = torch.randn(B, A, T, D), torch.randn(B, A, T, D)
    K_r, Q_r = torch.randn(1, A, 2 * S, D), torch.randn(1, A, 2 * S, D)
    positions = torch.arange(T)
    delta = (positions[:, None] - positions[None, :] + S).clamp(0, 2 * S - 1)     # no buckets: v1's index
    return q, k, K_r, Q_r, delta


def test_exercise_c2p_p2c_gathers_each_pairs_row():
    q, k, K_r, Q_r, delta = _exercise_relative_inputs()
    B, A, T, _ = q.shape
    expected = torch.zeros(B, A, T, T)
    for b in range(B):
        for a in range(A):
            for i in range(T):
                for j in range(T):
                    row = delta[i, j]
                    expected[b, a, i, j] = q[b, a, i] @ K_r[0, a, row] + k[b, a, j] @ Q_r[0, a, row]
    torch.testing.assert_close(relative_scores_gathered(q, k, K_r, Q_r, delta), expected, rtol=1e-5, atol=1e-5)


def test_exercise_c2p_p2c_each_term_alone():
    q, k, K_r, Q_r, delta = _exercise_relative_inputs(T=4, S=2)
    c2p = torch.einsum("baid,aijd->baij", q, K_r[0][:, delta])          # Q_i . K_r[delta(i, j)]
    p2c = torch.einsum("bajd,aijd->baij", k, Q_r[0][:, delta])          # K_j . Q_r[delta(i, j)]
    torch.testing.assert_close(relative_scores_gathered(q, k, K_r, None, delta), c2p, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(relative_scores_gathered(q, k, None, Q_r, delta), p2c, rtol=1e-5, atol=1e-5)
    assert relative_scores_gathered(q, k, None, None, delta) == 0
