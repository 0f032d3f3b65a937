"""Name maps: our parameter names <-> Hugging Face's <-> Google's TensorFlow names.

One explicit table per model family. Each row names one module of ours, the
same module in a Hugging Face state dict, the same scope in a Google TF
checkpoint, and its kind, which says how the row expands into tensors:

    kind         ours              Hugging Face       TensorFlow
    linear       .weight [out,in]  .weight            /kernel [in,out]  (transposed)
                 .bias             .bias              /bias
    layer_norm   .weight / .bias   .weight / .bias    /gamma / /beta
    embedding    .weight           .weight            (the scope itself)
    param        (the name)        (the name)         (the name)        (no transpose)

`print_name_map(config)` prints the expanded table (`python -m
minibert.checkpoints.name_maps bert`). Sources: docs/formats.md sections 1.3, 2.3,
3.1 and 3.2 (Google's modeling.py scopes, Hugging Face's module trees).
"""

import sys
import warnings
from dataclasses import dataclass, field

from minibert.checkpoints.families import LAYER_COPIES, family_of
from minibert.support.errors import MiniBertError

# `python -m minibert.checkpoints.name_maps` imports the package first, whose
# __init__ imports this module; runpy then warns that the module it is about
# to run is already loaded. Harmless here (the module only defines tables and
# functions), so that one warning is silenced.
warnings.filterwarnings("ignore", message="'minibert.checkpoints.name_maps' found in sys.modules",
                        category=RuntimeWarning)

LINEAR, LAYER_NORM, EMBEDDING, PARAM = "linear", "layer_norm", "embedding", "param"

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
    (deberta_names.FusedInProj answers them for one file tensor that is
    three of ours)."""
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
# Source key normalisation: what is renamed, and what is skipped on purpose
# ----------------------------------------------------------------------------

# TensorFlow: optimizer slots and bookkeeping are not weights.
TF_SKIP_SUFFIXES = ("/adam_m", "/adam_v")
TF_SKIP_NAMES = ("global_step",)
TF_SKIP_PARTS = ("AdamWeightDecayOptimizer", "LAMB")

# Hugging Face: buffers and tied duplicates, with the reason each is skipped.
HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# A fine-tuned folder's task head (task_heads.py): left to load_task_model,
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


if __name__ == "__main__":
    from minibert.model import BertConfig
    family = sys.argv[1] if len(sys.argv) > 1 else "bert"
    if family == "albert":
        print_name_map(BertConfig(model_type="albert", embedding_size=128, num_hidden_groups=1,
                                  num_hidden_layers=12, hidden_act="gelu_new"))
    else:
        print_name_map(BertConfig(num_hidden_layers=2))
