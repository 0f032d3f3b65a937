"""Name map for DeBERTa: our DebertaModel <-> Hugging Face's DeBERTa files.

One explicit table, like name_maps.py's for BERT, in the same row format
(ours, Hugging Face, kind; DeBERTa has no TensorFlow release to map). The
Hugging Face names are those of `DebertaModel` (v1, model_type "deberta")
and `DebertaV2Model` (v2 and v3, "deberta-v2") under the `deberta.` prefix,
plus the heads around them (docs/deberta.md 4.3, 4.4):

    lm_predictions.lm_head.*   the MLM head (DebertaForMaskedLM, legacy=False,
                               and every released file)
    pooler.dense.*             the sequence-classification pooler

v1's fused projection. One attention class (minibert/deberta.py) serves
both versions, in v2's layout: separate `query`, `key`, `value`
projections, and `relative_key` (W_k,r, for c2p) and `relative_query`
(W_q,r, for p2c) when share_att_key is false. v1's files store Q, K and V
as one fused `in_proj` (no bias) plus `q_bias`, `v_bias`, and `pos_proj`
(no bias), `pos_q_proj` (bias). A v1 model therefore has exactly v1's
parameters, renamed: its `key` and `relative_key` have no bias (v1 has none
to put there), and

    in_proj.weight [3H, H]   <-> query.weight, key.weight, value.weight
                                 (split_v1_in_proj / fuse_v1_in_proj below)
    q_bias                   <-> query.bias
    v_bias                   <-> value.bias
    pos_proj.weight          <-> relative_key.weight
    pos_q_proj.{weight,bias} <-> relative_query.{weight,bias}

A `FusedInProj` name stands for the one file tensor and our three. The
newest official code converts v1 files the same way (docs/deberta.md 4.5);
the map is exact in both directions, so a v1 model saved back is a v1 file.

`python -m minibert.checkpoints.deberta_names v1` (or v3) prints the table.
"""

import sys
from dataclasses import dataclass

import torch

from minibert.checkpoints.name_maps import (EMBEDDING, LAYER_NORM, LINEAR, PARAM, TASK_HEAD_PREFIXES, TASK_HEAD_SKIPPED,
                                            expand)
from minibert.support.errors import MiniBertError

PREFIX = "deberta."
POSITION_TABLE = "deberta.embeddings.position_embeddings.weight"
MLM_HEAD = "lm_predictions.lm_head."
POOLER = "pooler.dense."

# Inside one layer, the same in v1 and v2: ours, Hugging Face (under encoder.layer.N.), kind.
LAYER_ROWS = [
    ("attention.output_projection", "attention.output.dense", LINEAR),
    ("attention_layer_norm", "attention.output.LayerNorm", LAYER_NORM),
    ("feed_forward.w1", "intermediate.dense", LINEAR),
    ("feed_forward.w2", "output.dense", LINEAR),
    ("feed_forward_layer_norm", "output.LayerNorm", LAYER_NORM),
]


def split_v1_in_proj(in_proj_weight, num_heads):
    """v1's fused projection [3H, H] -> (W_q, W_k, W_v), each [H, H].

    v1 views in_proj's 3H outputs as (A, 3D): per head, D query features,
    then D key features, then D value features (not all queries first), so
    the weight is reshaped to [A, 3, D, H] and cut along the "3" axis
    (docs/deberta.md 1.3)."""
    three_h, H = in_proj_weight.shape
    if three_h != 3 * H or H % num_heads:
        raise MiniBertError(f"in_proj.weight of shape {list(in_proj_weight.shape)}: expected [3H, H] with H a "
                            f"multiple of {num_heads} heads")
    per_head = in_proj_weight.reshape(num_heads, 3, H // num_heads, H)      # (A, q/k/v, D, H)
    return tuple(per_head[:, part].reshape(H, H) for part in range(3))


def fuse_v1_in_proj(query_weight, key_weight, value_weight, num_heads):
    """The inverse of split_v1_in_proj: three [H, H] weights -> v1's [3H, H]."""
    H = query_weight.shape[0]
    parts = [w.reshape(num_heads, 1, H // num_heads, H) for w in (query_weight, key_weight, value_weight)]
    return torch.cat(parts, dim=1).reshape(3 * H, H)


@dataclass
class FusedInProj:
    """v1's `in_proj.weight` [3H, H]: one tensor in the file, our query,
    key and value weights [H, H] each. Behaves like a TensorName to the
    loader and the saver (our_names, shape_in_file, to_ours, from_ours)."""
    ours: tuple          # (query.weight, key.weight, value.weight)
    theirs: str
    num_heads: int
    transpose: bool = False

    @property
    def our_names(self):
        return self.ours

    def shape_in_file(self, shapes):
        H_out, H_in = shapes[self.ours[0]]
        return (3 * H_out, H_in)

    def to_ours(self, value):
        return dict(zip(self.ours, split_v1_in_proj(value, self.num_heads)))

    def from_ours(self, state):
        return fuse_v1_in_proj(*(state[name] for name in self.ours), self.num_heads)


def attention_rows(config):
    """(ours, Hugging Face, kind) for one layer's attention projections,
    relative to `attention.` (ours) and `attention.self.` (Hugging Face).
    v1's fused in_proj is not among them (see layer_names)."""
    terms = config.pos_att_type if config.relative_attention else []
    own_relative = config.relative_attention and not config.share_att_key
    if config.is_v1:
        rows = [("query.bias", "q_bias", PARAM), ("value.bias", "v_bias", PARAM)]   # v1 has no key bias
        if own_relative and "c2p" in terms:
            rows.append(("relative_key.weight", "pos_proj.weight", PARAM))       # W_k,r, no bias in v1
        if own_relative and "p2c" in terms:
            rows.append(("relative_query", "pos_q_proj", LINEAR))                # W_q,r and its bias
        return rows
    rows = [("query", "query_proj", LINEAR), ("key", "key_proj", LINEAR), ("value", "value_proj", LINEAR)]
    if own_relative and "c2p" in terms:
        rows.append(("relative_key", "pos_key_proj", LINEAR))
    if own_relative and "p2c" in terms:
        rows.append(("relative_query", "pos_query_proj", LINEAR))
    return rows


def layer_names(config, i):
    """The tensor names of encoder layer i (ours `encoder.layers.i.`,
    Hugging Face `deberta.encoder.layer.i.`)."""
    ours, theirs = f"encoder.layers.{i}.", f"{PREFIX}encoder.layer.{i}."
    rows = [(f"{ours}attention.{o}", f"{theirs}attention.self.{h}", None, kind)
            for o, h, kind in attention_rows(config)]
    rows += [(ours + o, theirs + h, None, kind) for o, h, kind in LAYER_ROWS]
    names = expand(rows, "huggingface")
    if config.is_v1:
        fused = tuple(f"{ours}attention.{part}.weight" for part in ("query", "key", "value"))
        names.insert(0, FusedInProj(fused, f"{theirs}attention.self.in_proj.weight", config.num_attention_heads))
    return names


def deberta_tensor_names(config, with_position_table, with_pooler=False, with_mlm_head=False):
    """Every tensor of a DebertaModel with these parts: TensorName rows (and
    FusedInProj for v1) pairing our name with the Hugging Face one."""
    d = PREFIX
    rows = [("embeddings.word_embeddings", f"{d}embeddings.word_embeddings", None, EMBEDDING)]
    if with_position_table:
        rows.append(("embeddings.position_embeddings", f"{d}embeddings.position_embeddings", None, EMBEDDING))
    if config.type_vocab_size > 0:
        rows.append(("embeddings.token_type_embeddings", f"{d}embeddings.token_type_embeddings", None, EMBEDDING))
    if config.embedding_dim != config.hidden_size:
        rows.append(("embeddings.projection.weight", f"{d}embeddings.embed_proj.weight", None, PARAM))   # no bias
    rows.append(("embeddings.layer_norm", f"{d}embeddings.LayerNorm", None, LAYER_NORM))
    if config.relative_attention:
        rows.append(("encoder.relative_embeddings", f"{d}encoder.rel_embeddings", None, EMBEDDING))
        if config.relative_layer_norm:
            rows.append(("encoder.relative_layer_norm", f"{d}encoder.LayerNorm", None, LAYER_NORM))
    if config.conv_kernel_size > 0:
        rows += [("encoder.conv.conv", f"{d}encoder.conv.conv", None, LINEAR),   # Conv1d: weight and bias
                 ("encoder.conv.layer_norm", f"{d}encoder.conv.LayerNorm", None, LAYER_NORM)]
    if with_pooler:
        rows.append(("pooler.dense", "pooler.dense", None, LINEAR))
    if with_mlm_head:
        rows += [("mlm_head.dense", f"{MLM_HEAD}dense", None, LINEAR),
                 ("mlm_head.layer_norm", f"{MLM_HEAD}LayerNorm", None, LAYER_NORM),
                 ("mlm_head.bias", f"{MLM_HEAD}bias", None, PARAM)]
    names = expand(rows, "huggingface")
    for i in range(config.num_hidden_layers):
        names += layer_names(config, i)
    return names


# ----------------------------------------------------------------------------
# Source key normalisation: what is renamed, and what is skipped on purpose
# ----------------------------------------------------------------------------

# transformers' DebertaForMaskedLM with legacy=True (its default) keeps the
# head under BERT's names. The computation is the same (dense, activation,
# LayerNorm, tied decoder plus bias; transformers' modeling_deberta*.py), so
# those names are read as the lm_predictions head's.
LEGACY_HEAD = {"cls.predictions.transform.dense.": f"{MLM_HEAD}dense.",
               "cls.predictions.transform.LayerNorm.": f"{MLM_HEAD}LayerNorm.",
               "cls.predictions.bias": f"{MLM_HEAD}bias"}
LEGACY_TIED = {"cls.predictions.decoder.weight": "tied to the word embeddings",
               "cls.predictions.decoder.bias": "same tensor as cls.predictions.bias"}
RTD_HEAD = "mask_predictions."
BUFFERS = ("embeddings.position_ids",)


def normalize_deberta_names(tensors):
    """Undo the spellings that differ between DeBERTa files: `module.` and
    `_orig_mod.` prefixes, LayerNorm `gamma`/`beta`, a bare DebertaModel's
    names without the `deberta.` prefix, and transformers' legacy MLM head
    names. Drop what minibert does not build, each with its reason: buffers,
    the legacy head's tied decoder, and v3's replaced-token-detection head
    (`mask_predictions.*`, the ELECTRA-style discriminator head of
    [DeBERTaV3]; docs/deberta.md 4.4). Returns (tensors, skipped)."""
    kept, skipped = {}, []
    for original, value in tensors.items():
        name = original
        while name.startswith(("module.", "_orig_mod.")):
            name = name.split(".", 1)[1]
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if name.startswith(("embeddings.", "encoder.")):
            name = PREFIX + name           # a DebertaModel / DebertaV2Model file, saved without its prefix
        for legacy, current in LEGACY_HEAD.items():
            if name.startswith(legacy):
                name = current + name[len(legacy):]
        if name.endswith(BUFFERS):
            skipped.append((original, "buffer, not a weight"))
        elif name in LEGACY_TIED:
            skipped.append((original, LEGACY_TIED[name]))
        elif name.startswith(TASK_HEAD_PREFIXES):
            skipped.append((original, TASK_HEAD_SKIPPED))
        elif name.startswith(RTD_HEAD):
            skipped.append((original, "DeBERTaV3's replaced-token-detection head, which minibert does not build"))
        else:
            kept[name] = value
    return kept, skipped


def detect_deberta_heads(names):
    """Which optional parts a (normalised) DeBERTa file holds."""
    return dict(with_pooler=any(n.startswith(POOLER) for n in names),
                with_mlm_head=any(n.startswith(MLM_HEAD) for n in names),
                with_position_table=POSITION_TABLE in names)


def print_deberta_name_map(config, file=sys.stdout):
    """Print ours -> Hugging Face for every tensor of a DeBERTa model with its MLM head."""
    names = deberta_tensor_names(config, with_position_table=True, with_mlm_head=True)
    for name in names:
        ours = " + ".join(name.our_names) if isinstance(name, FusedInProj) else name.ours
        print(f"{ours:50s} {name.theirs}", file=file)


if __name__ == "__main__":
    from minibert.deberta import DebertaConfig
    version = sys.argv[1] if len(sys.argv) > 1 else "v3"
    v1 = dict(model_type="deberta", relative_attention=True, pos_att_type="c2p|p2c", position_biased_input=False)
    v3 = dict(model_type="deberta-v2", relative_attention=True, pos_att_type="p2c|c2p", position_buckets=256,
              share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, vocab_size=128100,
              hidden_size=768, num_attention_heads=12, intermediate_size=3072)
    print_deberta_name_map(DebertaConfig(**(v1 if version == "v1" else v3), num_hidden_layers=1))
