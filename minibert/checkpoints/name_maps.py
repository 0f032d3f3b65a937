"""Name maps: our parameter names <-> Hugging Face's <-> Google's TensorFlow names.

One explicit table per model family (BERT and ALBERT first; DeBERTa and the
task heads fine-tuning adds in their own sections below). Each row names one
module of ours, the same module in a Hugging Face state dict, the same scope
in a Google TF checkpoint, and its kind, which says how the row expands into
tensors:

    kind         ours              Hugging Face       TensorFlow
    linear       .weight [out,in]  .weight            /kernel [in,out]  (transposed)
                 .bias             .bias              /bias
    layer_norm   .weight / .bias   .weight / .bias    /gamma / /beta
    embedding    .weight           .weight            (the scope itself)
    param        (the name)        (the name)         (the name)        (no transpose)

`python -m minibert.checkpoints.name_maps TABLE` prints one expanded table,
TABLE one of bert, albert, deberta-v1, deberta-v3 and task-heads. Sources:
docs/formats.md sections 1.3, 2.3, 3.1 and 3.2 (Google's modeling.py scopes,
Hugging Face's module trees), docs/deberta.md 4.3 to 4.5.
"""

import sys
import warnings
from dataclasses import dataclass, field

import torch

from minibert.checkpoints.families import LAYER_COPIES, family_of
from minibert.heads import OutputLayer, SpanHead
from minibert.support import MiniBertError

# `python -m minibert.checkpoints.name_maps` imports the package first, whose
# __init__ imports this module; runpy then warns that the module it is about
# to run is already loaded. Harmless here (the module only defines tables and
# functions), so that one warning is silenced.
warnings.filterwarnings("ignore", message="'minibert.checkpoints.name_maps' found in sys.modules",
                        category=RuntimeWarning)

LINEAR, LAYER_NORM, EMBEDDING, PARAM = "linear", "layer_norm", "embedding", "param"


# ----------------------------------------------------------------------------
# BERT and ALBERT (Hugging Face and Google TF)
# ----------------------------------------------------------------------------

# Inside one transformer layer: ours, Hugging Face BERT, TF BERT (under layer_N/).
BERT_LAYER_ROWS = [
    ("attention.query", "attention.self.query", "attention/self/query", LINEAR),
    ("attention.key", "attention.self.key", "attention/self/key", LINEAR),
    ("attention.value", "attention.self.value", "attention/self/value", LINEAR),
    ("attention.output_projection", "attention.output.dense", "attention/output/dense", LINEAR),
    ("attention_layer_norm", "attention.output.LayerNorm", "attention/output/LayerNorm", LAYER_NORM),
    ("feed_forward.w1", "intermediate.dense", "intermediate/dense", LINEAR),
    ("feed_forward.w2", "output.dense", "output/dense", LINEAR),
    ("feed_forward_layer_norm", "output.LayerNorm", "output/LayerNorm", LAYER_NORM),
]

# The same layer in ALBERT: Hugging Face under albert_layer_groups.G.albert_layers.J.,
# TF under bert/encoder/transformer/group_G/inner_group_J/. Note TF nests the
# FFN output *inside* `intermediate`, and names the two LayerNorms by TF's
# automatic suffixes (docs/formats.md 2.3).
ALBERT_LAYER_ROWS = [
    ("attention.query", "attention.query", "attention_1/self/query", LINEAR),
    ("attention.key", "attention.key", "attention_1/self/key", LINEAR),
    ("attention.value", "attention.value", "attention_1/self/value", LINEAR),
    ("attention.output_projection", "attention.dense", "attention_1/output/dense", LINEAR),
    ("attention_layer_norm", "attention.LayerNorm", "LayerNorm", LAYER_NORM),
    ("feed_forward.w1", "ffn", "ffn_1/intermediate/dense", LINEAR),
    ("feed_forward.w2", "ffn_output", "ffn_1/intermediate/output/dense", LINEAR),
    ("feed_forward_layer_norm", "full_layer_layer_norm", "LayerNorm_1", LAYER_NORM),
]


def module_rows(config, with_pooler=True, with_mlm_head=True, with_pair_head=True):
    """(ours, huggingface, tensorflow, kind) for every module of a model with this config."""
    albert = config.model_type == "albert"
    hf = "albert" if albert else "bert"
    rows = [
        ("embeddings.word_embeddings", f"{hf}.embeddings.word_embeddings", "bert/embeddings/word_embeddings", EMBEDDING),
        ("embeddings.position_embeddings", f"{hf}.embeddings.position_embeddings", "bert/embeddings/position_embeddings", EMBEDDING),
        ("embeddings.token_type_embeddings", f"{hf}.embeddings.token_type_embeddings", "bert/embeddings/token_type_embeddings", EMBEDDING),
        ("embeddings.layer_norm", f"{hf}.embeddings.LayerNorm", "bert/embeddings/LayerNorm", LAYER_NORM),
    ]
    if albert:
        rows.append(("embeddings.projection", "albert.encoder.embedding_hidden_mapping_in",
                     "bert/encoder/embedding_hidden_mapping_in", LINEAR))
        for group in range(config.num_groups):
            for inner in range(config.inner_group_num):
                ours = f"encoder.layers.{group * config.inner_group_num + inner}."
                theirs_hf = f"albert.encoder.albert_layer_groups.{group}.albert_layers.{inner}."
                theirs_tf = f"bert/encoder/transformer/group_{group}/inner_group_{inner}/"
                rows += [(ours + o, theirs_hf + h, theirs_tf + t, kind) for o, h, t, kind in ALBERT_LAYER_ROWS]
    else:
        # Distinct layer i is stored at the first depth that runs it (a tied,
        # duplicated model stores its copies at the other depths too; see
        # `tied_copy_rows`).
        plan = config.depth_plan()
        for layer in range(config.num_groups):
            depth = plan.index(layer)
            rows += [(f"encoder.layers.{layer}.{o}", f"bert.encoder.layer.{depth}.{h}",
                      f"bert/encoder/layer_{depth}/{t}", kind) for o, h, t, kind in BERT_LAYER_ROWS]
    if with_pooler:
        rows.append(("pooler.dense", "albert.pooler" if albert else "bert.pooler.dense", "bert/pooler/dense", LINEAR))
    if with_mlm_head:
        mlm = "predictions" if albert else "cls.predictions.transform"
        rows += [
            ("mlm_head.dense", f"{mlm}.dense", "cls/predictions/transform/dense", LINEAR),
            ("mlm_head.layer_norm", f"{mlm}.LayerNorm", "cls/predictions/transform/LayerNorm", LAYER_NORM),
            ("mlm_head.bias", "predictions.bias" if albert else "cls.predictions.bias", "cls/predictions/output_bias", PARAM),
        ]
    if with_pair_head:
        nsp = "sop_classifier.classifier" if albert else "cls.seq_relationship"
        rows += [
            ("pair_head.weight", f"{nsp}.weight", "cls/seq_relationship/output_weights", PARAM),  # TF stores it [2, H]
            ("pair_head.bias", f"{nsp}.bias", "cls/seq_relationship/output_bias", PARAM),
        ]
    return rows


def tied_copy_rows(config):
    """For a BERT whose depth plan runs a layer more than once (Kao et al.,
    tied): (depth, distinct layer) for every depth that is not the first to run
    its layer. Hugging Face has no tied layers, so these depths are written as
    copies and skipped on load."""
    if family_of(config).deepens != LAYER_COPIES:   # ALBERT stores each shared group once, whatever runs it
        return []
    plan = config.depth_plan()
    return [(depth, layer) for depth, layer in enumerate(plan) if plan.index(layer) != depth]


@dataclass
class TensorName:
    """One tensor: our name, the file's name, and whether the file stores it
    transposed. The four methods are what the loader and saver ask of a name
    (FusedInProj, in DeBERTa's section, answers them for one file tensor that
    is three of ours)."""
    ours: str
    theirs: str
    transpose: bool = False

    @property
    def our_names(self):
        return (self.ours,)

    def shape_in_file(self, shapes):
        """The shape the file's tensor must have (after transposing), from our {name: shape}."""
        return tuple(shapes[self.ours])

    def to_ours(self, value):
        """{our name: tensor} from the file's (checked, transposed) tensor."""
        return {self.ours: value}

    def from_ours(self, state):
        """The file's tensor from our state dict (Hugging Face names are never transposed)."""
        return state[self.ours]


def expand(rows, source):
    """Expand module rows into tensor names for `source` ("huggingface" or "tensorflow")."""
    tf = source == "tensorflow"
    names = []
    for ours, hf, tf_scope, kind in rows:
        theirs = tf_scope if tf else hf
        if kind == LINEAR:
            names.append(TensorName(f"{ours}.weight", f"{theirs}/kernel" if tf else f"{theirs}.weight", transpose=tf))
            names.append(TensorName(f"{ours}.bias", f"{theirs}/bias" if tf else f"{theirs}.bias"))
        elif kind == LAYER_NORM:
            names.append(TensorName(f"{ours}.weight", f"{theirs}/gamma" if tf else f"{theirs}.weight"))
            names.append(TensorName(f"{ours}.bias", f"{theirs}/beta" if tf else f"{theirs}.bias"))
        elif kind == EMBEDDING:
            names.append(TensorName(f"{ours}.weight", theirs if tf else f"{theirs}.weight"))
        else:
            names.append(TensorName(ours, theirs))
    return names


# ----------------------------------------------------------------------------
# BERT and ALBERT's source key normalisation: what is renamed, and what is skipped on purpose
# ----------------------------------------------------------------------------

# TensorFlow: optimizer slots and bookkeeping are not weights.
TF_SKIP_SUFFIXES = ("/adam_m", "/adam_v")
TF_SKIP_NAMES = ("global_step",)
TF_SKIP_PARTS = ("AdamWeightDecayOptimizer", "LAMB")

# Hugging Face: buffers and tied duplicates, with the reason each is skipped.
HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# A fine-tuned folder's task head (the task heads' table below): left to load_task_model,
# which reads it with its task; load_pretrained gives the encoder.
TASK_HEAD_PREFIXES = ("classifier.", "qa_outputs.")
TASK_HEAD_SKIPPED = "a task head: load_task_model (minibert/finetuning.py) reads it with its task"
HF_TIED = {"cls.predictions.decoder.weight": "tied to the word embeddings",
           "predictions.decoder.weight": "tied to the word embeddings",
           "cls.predictions.decoder.bias": "same tensor as cls.predictions.bias",
           "predictions.decoder.bias": "same tensor as predictions.bias"}


def normalize_tf_names(tensors):
    """Strip TF-Hub's `module/` scope; drop optimizer slots. Returns (tensors, skipped)."""
    kept, skipped = {}, []
    for name, value in tensors.items():
        if name.endswith(TF_SKIP_SUFFIXES) or name in TF_SKIP_NAMES or any(p in name for p in TF_SKIP_PARTS):
            skipped.append((name, "optimizer state"))
            continue
        if name.startswith("module/"):
            name = name[len("module/"):]
        kept[name] = value
    return kept, skipped


def normalize_hf_names(tensors, base_prefix="bert."):
    """Undo the spellings that differ between Hugging Face files:
    old `LayerNorm.gamma/beta`; `module.` (DistributedDataParallel) and
    `_orig_mod.` (torch.compile) prefixes, in any order; `BertModel` /
    `AlbertModel` files (e.g. sentence-transformers models) saved without the
    `bert.` / `albert.` prefix (the family's base_prefix, families.py). Drop
    buffers and tied duplicates. Returns (tensors, skipped)."""
    kept, skipped, tied = {}, [], {}
    for original, value in tensors.items():
        name = original
        while name.startswith(("module.", "_orig_mod.")):
            name = name.split(".", 1)[1]
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if name.startswith(("embeddings.", "encoder.", "pooler.")):
            name = base_prefix + name  # a BertModel / AlbertModel file, saved without its prefix
        if name.endswith(HF_BUFFERS):
            skipped.append((original, "buffer, not a weight"))
        elif name.startswith(TASK_HEAD_PREFIXES):
            skipped.append((original, TASK_HEAD_SKIPPED))
        elif name in HF_TIED:
            skipped.append((original, HF_TIED[name]))
            tied[name] = original, value
        else:
            kept[name] = value
    # A file that kept only the decoder's name for the shared MLM bias (tools
    # that drop one name of each shared tensor may keep either): use that.
    for bias in ("cls.predictions.bias", "predictions.bias"):
        alias = bias.replace(".bias", ".decoder.bias")
        if bias not in kept and alias in tied:
            original, kept[bias] = tied[alias]
            skipped = [(n, r) for n, r in skipped if n != original]
    return kept, skipped


def detect_heads(names, source):
    """Which optional parts a checkpoint holds, from its (normalised) names."""
    tf = source == "tensorflow"
    has = lambda *prefixes: any(n.startswith(prefixes) for n in names)
    if tf:
        return dict(with_pooler=has("bert/pooler/"), with_mlm_head=has("cls/predictions/"),
                    with_pair_head=has("cls/seq_relationship/"))
    return dict(with_pooler=has("bert.pooler.", "albert.pooler."),
                with_mlm_head=has("cls.predictions.", "predictions."),
                with_pair_head=has("cls.seq_relationship.", "sop_classifier."))


@dataclass
class LoadReport:
    """What a load did, tensor by tensor. A load with anything missing,
    unexpected or mis-shaped is an error; `skipped` lists what was left out on
    purpose (optimizer slots, buffers, tied duplicates, heads minibert does
    not build); `notes` says anything else about how the file was read."""
    source: str
    loaded: list = field(default_factory=list)
    missing: list = field(default_factory=list)            # our names the checkpoint lacks
    unexpected: list = field(default_factory=list)         # checkpoint names we have no place for
    shape_mismatches: list = field(default_factory=list)   # (name, expected shape, found shape)
    skipped: list = field(default_factory=list)            # (checkpoint name, reason)
    notes: list = field(default_factory=list)              # what else the reader should know about the load

    @property
    def ok(self):
        return not (self.missing or self.unexpected or self.shape_mismatches)

    def __str__(self):
        lines = [f"load report for {self.source}",
                 f"  loaded            {len(self.loaded)} tensors",
                 f"  missing           {len(self.missing)}",
                 f"  unexpected        {len(self.unexpected)}",
                 f"  shape mismatches  {len(self.shape_mismatches)}",
                 f"  skipped on purpose {len(self.skipped)}"]
        for title, items in (("missing", self.missing), ("unexpected", self.unexpected),
                             ("shape mismatch", self.shape_mismatches), ("skipped", self.skipped),
                             ("note", self.notes)):
            lines += [f"    {title}: {item}" for item in items]
        return "\n".join(lines)

    def raise_if_bad(self, show=5):
        """One-line MiniBertError naming the file and (up to `show` of) each
        kind of problem: missing and unexpected tensors, and mis-shaped ones
        with both shapes."""
        if self.ok:
            return

        def listing(items, separator=", "):
            more = f"{separator}... {len(items) - show} more" if len(items) > show else ""
            return separator.join(items[:show]) + more

        problems = []
        if self.missing:
            problems.append(f"{len(self.missing)} missing tensors ({listing(self.missing)})")
        if self.unexpected:
            problems.append(f"{len(self.unexpected)} unexpected tensors, which minibert has no place for "
                            f"({listing(self.unexpected)})")
        if self.shape_mismatches:
            shapes = [f"{name}: config says {list(want)}, file has {list(got)}"
                      for name, want, got in self.shape_mismatches]
            problems.append(f"{len(shapes)} shape mismatches ({listing(shapes, separator='; ')})")
        raise MiniBertError(f"{self.source}: " + " | ".join(problems))


def print_name_map(config, file=sys.stdout):
    """Print ours -> Hugging Face -> TensorFlow for every tensor of a model."""
    rows = module_rows(config)
    for hf_name, tf_name in zip(expand(rows, "huggingface"), expand(rows, "tensorflow")):
        flag = "  (transposed)" if tf_name.transpose else ""
        print(f"{hf_name.ours:50s} {hf_name.theirs:70s} {tf_name.theirs}{flag}", file=file)


# ----------------------------------------------------------------------------
# DeBERTa
# ----------------------------------------------------------------------------

# Name map for DeBERTa: our DebertaModel <-> Hugging Face's DeBERTa files.
#
# One explicit table, like BERT's above, in the same row format
# (ours, Hugging Face, kind; DeBERTa has no TensorFlow release to map). The
# Hugging Face names are those of `DebertaModel` (v1, model_type "deberta")
# and `DebertaV2Model` (v2 and v3, "deberta-v2") under the `deberta.` prefix,
# plus the heads around them (docs/deberta.md 4.3, 4.4):
#
#     lm_predictions.lm_head.*   the MLM head (DebertaForMaskedLM, legacy=False,
#                                and every released file)
#     pooler.dense.*             the sequence-classification pooler
#
# v1's fused projection. One attention class (minibert/deberta.py) serves
# both versions, in v2's layout: separate `query`, `key`, `value`
# projections, and `relative_key` (W_k,r, for c2p) and `relative_query`
# (W_q,r, for p2c) when share_att_key is false. v1's files store Q, K and V
# as one fused `in_proj` (no bias) plus `q_bias`, `v_bias`, and `pos_proj`
# (no bias), `pos_q_proj` (bias). A v1 model therefore has exactly v1's
# parameters, renamed: its `key` and `relative_key` have no bias (v1 has none
# to put there), and
#
#     in_proj.weight [3H, H]   <-> query.weight, key.weight, value.weight
#                                  (split_v1_in_proj / fuse_v1_in_proj below)
#     q_bias                   <-> query.bias
#     v_bias                   <-> value.bias
#     pos_proj.weight          <-> relative_key.weight
#     pos_q_proj.{weight,bias} <-> relative_query.{weight,bias}
#
# A `FusedInProj` name stands for the one file tensor and our three. The
# newest official code converts v1 files the same way (docs/deberta.md 4.5);
# the map is exact in both directions, so a v1 model saved back is a v1 file.
#
# `python -m minibert.checkpoints.name_maps deberta-v1` (or deberta-v3) prints the table.

DEBERTA_PREFIX = "deberta."
DEBERTA_POSITION_TABLE = "deberta.embeddings.position_embeddings.weight"
DEBERTA_MLM_HEAD = "lm_predictions.lm_head."
DEBERTA_POOLER = "pooler.dense."

# Inside one layer, the same in v1 and v2: ours, Hugging Face (under encoder.layer.N.), kind.
DEBERTA_LAYER_ROWS = [
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


def deberta_attention_rows(config):
    """(ours, Hugging Face, kind) for one layer's attention projections,
    relative to `attention.` (ours) and `attention.self.` (Hugging Face).
    v1's fused in_proj is not among them (see deberta_layer_names)."""
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


def deberta_layer_names(config, i):
    """The tensor names of encoder layer i (ours `encoder.layers.i.`,
    Hugging Face `deberta.encoder.layer.i.`)."""
    ours, theirs = f"encoder.layers.{i}.", f"{DEBERTA_PREFIX}encoder.layer.{i}."
    rows = [(f"{ours}attention.{o}", f"{theirs}attention.self.{h}", None, kind)
            for o, h, kind in deberta_attention_rows(config)]
    rows += [(ours + o, theirs + h, None, kind) for o, h, kind in DEBERTA_LAYER_ROWS]
    names = expand(rows, "huggingface")
    if config.is_v1:
        fused = tuple(f"{ours}attention.{part}.weight" for part in ("query", "key", "value"))
        names.insert(0, FusedInProj(fused, f"{theirs}attention.self.in_proj.weight", config.num_attention_heads))
    return names


def deberta_tensor_names(config, with_position_table, with_pooler=False, with_mlm_head=False):
    """Every tensor of a DebertaModel with these parts: TensorName rows (and
    FusedInProj for v1) pairing our name with the Hugging Face one."""
    d = DEBERTA_PREFIX
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
        rows += [("mlm_head.dense", f"{DEBERTA_MLM_HEAD}dense", None, LINEAR),
                 ("mlm_head.layer_norm", f"{DEBERTA_MLM_HEAD}LayerNorm", None, LAYER_NORM),
                 ("mlm_head.bias", f"{DEBERTA_MLM_HEAD}bias", None, PARAM)]
    names = expand(rows, "huggingface")
    for i in range(config.num_hidden_layers):
        names += deberta_layer_names(config, i)
    return names


# ----------------------------------------------------------------------------
# DeBERTa's source key normalisation: what is renamed, and what is skipped on purpose
# ----------------------------------------------------------------------------

# transformers' DebertaForMaskedLM with legacy=True (its default) keeps the
# head under BERT's names. The computation is the same (dense, activation,
# LayerNorm, tied decoder plus bias; transformers' modeling_deberta*.py), so
# those names are read as the lm_predictions head's.
DEBERTA_LEGACY_HEAD = {"cls.predictions.transform.dense.": f"{DEBERTA_MLM_HEAD}dense.",
                       "cls.predictions.transform.LayerNorm.": f"{DEBERTA_MLM_HEAD}LayerNorm.",
                       "cls.predictions.bias": f"{DEBERTA_MLM_HEAD}bias"}
DEBERTA_LEGACY_TIED = {"cls.predictions.decoder.weight": "tied to the word embeddings",
                       "cls.predictions.decoder.bias": "same tensor as cls.predictions.bias"}
DEBERTA_RTD_HEAD = "mask_predictions."
DEBERTA_BUFFERS = ("embeddings.position_ids",)


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
            name = DEBERTA_PREFIX + name           # a DebertaModel / DebertaV2Model file, saved without its prefix
        for legacy, current in DEBERTA_LEGACY_HEAD.items():
            if name.startswith(legacy):
                name = current + name[len(legacy):]
        if name.endswith(DEBERTA_BUFFERS):
            skipped.append((original, "buffer, not a weight"))
        elif name in DEBERTA_LEGACY_TIED:
            skipped.append((original, DEBERTA_LEGACY_TIED[name]))
        elif name.startswith(TASK_HEAD_PREFIXES):
            skipped.append((original, TASK_HEAD_SKIPPED))
        elif name.startswith(DEBERTA_RTD_HEAD):
            skipped.append((original, "DeBERTaV3's replaced-token-detection head, which minibert does not build"))
        else:
            kept[name] = value
    return kept, skipped


def detect_deberta_heads(names):
    """Which optional parts a (normalised) DeBERTa file holds."""
    return dict(with_pooler=any(n.startswith(DEBERTA_POOLER) for n in names),
                with_mlm_head=any(n.startswith(DEBERTA_MLM_HEAD) for n in names),
                with_position_table=DEBERTA_POSITION_TABLE in names)


def print_deberta_name_map(config, file=sys.stdout):
    """Print ours -> Hugging Face for every tensor of a DeBERTa model with its MLM head."""
    names = deberta_tensor_names(config, with_position_table=True, with_mlm_head=True)
    for name in names:
        ours = " + ".join(name.our_names) if isinstance(name, FusedInProj) else name.ours
        print(f"{ours:50s} {name.theirs}", file=file)


# ----------------------------------------------------------------------------
# The task heads fine-tuning adds, in every family
# ----------------------------------------------------------------------------

# Name map for the task heads fine-tuning adds: ours <-> transformers' For<Task> models.
#
# A fine-tuned folder is a complete Hugging Face model folder: config.json and
# model.safetensors as transformers' BertForSequenceClassification (and its
# kin) write them, so AutoModelForSequenceClassification & co. and the
# pipelines load it as it is (docs/formats.md, "The fine-tuned folder"). The
# encoder keeps the names of the tables above (BERT, ALBERT; DeBERTa) under
# its prefix (`bert.`, `albert.`, `deberta.`), and so does the
# pooler a sentence head reads (`bert.pooler.dense`, `albert.pooler`, DeBERTa's
# ContextPooler `pooler.dense`). The head itself is one more table, the same
# in every family (transformers' modeling_bert.py, modeling_albert.py,
# modeling_deberta.py, modeling_deberta_v2.py):
#
#     kind      minibert's head (heads.py)   ours        Hugging Face   transformers' model
#     sentence  OutputLayer on [CLS]         classifier  classifier     <Family>ForSequenceClassification
#     token     OutputLayer on every token   classifier  classifier     <Family>ForTokenClassification
#     span      SpanHead                     span        qa_outputs     <Family>ForQuestionAnswering
#
# with <Family> Bert, Albert, Deberta (v1) or DebertaV2 (v2, v3). config.json
# gets `architectures` and the labels: `num_labels`, `id2label`, `label2id`
# (transformers' pipelines name their answers by id2label). The question
# answering head's two outputs are its start and end logits.
#
# `python -m minibert.checkpoints.name_maps task-heads` prints the table.

# kind: (transformers' class suffix, rows (ours, inside the head; Hugging Face; kind))
TASK_HEADS = {
    "sentence": ("ForSequenceClassification", [("classifier", "classifier", LINEAR)]),
    "token": ("ForTokenClassification", [("classifier", "classifier", LINEAR)]),
    "span": ("ForQuestionAnswering", [("span", "qa_outputs", LINEAR)]),
}
assert all(theirs + "." in TASK_HEAD_PREFIXES for _, rows in TASK_HEADS.values() for _, theirs, _ in rows)

SPAN_LABELS = ["start", "end"]     # what the question answering head's two outputs are


def head_kind(head):
    """"sentence", "token" or "span": which transformers model the head is the head of."""
    if isinstance(head, SpanHead):
        return "span"
    if isinstance(head, OutputLayer):
        return "token" if head.per_token else "sentence"
    raise MiniBertError(f"a {type(head).__name__} head has no Hugging Face name")


def head_tensor_names(kind):
    """TensorName rows: our name inside the head <-> the Hugging Face name."""
    return expand([(ours, theirs, None, row_kind) for ours, theirs, row_kind in TASK_HEADS[kind][1]],
                  "huggingface")


def head_config(model, head, labels):
    """The config.json fields a task model adds: its architecture and labels."""
    kind = head_kind(head)
    labels = SPAN_LABELS if kind == "span" else list(labels)
    return {"architectures": [family_of(model).architecture + TASK_HEADS[kind][0]], "num_labels": len(labels),
            "id2label": {str(i): label for i, label in enumerate(labels)},
            "label2id": {label: i for i, label in enumerate(labels)}}


def head_state_dict(head):
    """The head's tensors under Hugging Face names (cpu, contiguous copies)."""
    state = head.state_dict()
    return {name.theirs: name.from_ours(state).detach().to("cpu").contiguous().clone()
            for name in head_tensor_names(head_kind(head))}


def print_task_heads(file=sys.stdout):
    """Print the table: kind, ours (in TaskModel), Hugging Face, transformers' model."""
    for kind, (suffix, _) in TASK_HEADS.items():
        for name in head_tensor_names(kind):
            print(f"{kind:10s} head.{name.ours:25s} {name.theirs:25s} <Family>{suffix}", file=file)


if __name__ == "__main__":
    from minibert.deberta import DebertaConfig
    from minibert.model import BertConfig
    TABLES = ("bert", "albert", "deberta-v1", "deberta-v3", "task-heads")
    table = sys.argv[1] if len(sys.argv) > 1 else "bert"
    if table not in TABLES:
        sys.exit(f"name_maps: unknown table {table!r}; expected one of {', '.join(TABLES)}")
    if table == "bert":
        print_name_map(BertConfig(num_hidden_layers=2))
    elif table == "albert":
        print_name_map(BertConfig(model_type="albert", embedding_size=128, num_hidden_groups=1,
                                  num_hidden_layers=12, hidden_act="gelu_new"))
    elif table == "task-heads":
        print_task_heads()
    else:
        v1 = dict(model_type="deberta", relative_attention=True, pos_att_type="c2p|p2c", position_biased_input=False)
        v3 = dict(model_type="deberta-v2", relative_attention=True, pos_att_type="p2c|c2p", position_buckets=256,
                  share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False, vocab_size=128100,
                  hidden_size=768, num_attention_heads=12, intermediate_size=3072)
        print_deberta_name_map(DebertaConfig(**(v1 if table == "deberta-v1" else v3), num_hidden_layers=1))
