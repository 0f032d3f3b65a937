"""Deeper models for free: duplicating layers (Kao et al. 2020, Finding 2).

Kao et al. made BERT deeper with no training at all: after some layers they
insert a copy of the same layer, e.g. "duplicate the first three layers" of
BERT-base gives 15 layers that run

    0, 0, 1, 1, 2, 2, 3, 4, ..., 11

The copies are *untied* (deep copies that can drift apart when the deeper
model is fine-tuned), and fine-tuning it with the base model's settings
improved SQuAD 2.0 (up to +1.5 F1) and SNLI (+0.6) ([Kao] section 4).

Three ways to say which layers run, all reduced to an `order`, the list of
source-layer indices run at each new depth:

    duplicate_order(L, [0, 1, 2])   each listed layer is followed by a copy
    an explicit order               any sequence of existing layer indices
    repeat_albert(model, k)         ALBERT: run the shared group k more times

`deepen_bert(model, order, tied=False)` builds the deeper model:

* untied (the paper's scheme): every depth gets its own deep copy, and the
  result is a plain BERT with more layers (`layer_order` None);
* tied (a cheap ablation): the distinct layers are kept once and the config's
  `layer_order` makes the encoder run the same module at several depths.
  Hugging Face has no tied layers, so `save_pretrained` writes every depth as
  its own layer (transformers loads it as an ordinary, untied BERT) and adds
  "layer_order" to config.json, from which minibert ties them again on load.

The same untied scheme serves the other two families:

* ALBERT: the shared group's weights are copied into a distinct group at
  every new depth (num_hidden_groups = depth, inner_group_num unchanged), a
  layout transformers' ALBERT loads as it is (depth l runs group l). Its tied
  form is `repeat_albert`, which adds depths and no weights.
* DeBERTa: the layers are copied as for BERT; the relative-position table P
  belongs to the encoder, not to a layer, and every depth reads it, so the
  copies need nothing new. The Enhanced Mask Decoder reruns whatever layer
  is last, which `order` keeps unless it ends elsewhere. minibert's DeBERTa
  has no `layer_order`, so it has no tied form.

Layer indices are *depths of the source model* (Hugging Face's
`encoder.layer.i`), so duplicating an already-duplicated model works the same
way. Embeddings, pooler and heads are copied unchanged.

Reference: [Kao] arXiv:2001.09309.
"""

import dataclasses
import json
from pathlib import Path

from minibert.deberta import DebertaModel
from minibert.support.errors import MiniBertError
from minibert.support.fileio import write_json
from minibert.support.layer_orders import check_depth, parse_indices   # parse_indices: the scripts' flags
from minibert.model import BertModel


# ----------------------------------------------------------------------------
# Orders
# ----------------------------------------------------------------------------


def check_indices(indices, num_layers, flag):
    if not indices:
        raise MiniBertError(f"{flag}: empty; expected at least one layer index")
    for i in indices:
        if not 0 <= i < num_layers:
            raise MiniBertError(f"{flag}: layer index {i} is out of range; the model has {num_layers} layers "
                                f"(indices 0..{num_layers - 1})")


def duplicate_order(num_layers, duplicate):
    """The paper's scheme: layer i runs once, then once more for every time it
    is listed. duplicate_order(12, [0, 1, 2]) -> 0,0,1,1,2,2,3,...,11 (15 layers)."""
    check_indices(duplicate, num_layers, "--duplicate")
    check_depth(num_layers + len(duplicate), "--duplicate")
    order = []
    for i in range(num_layers):
        order += [i] * (1 + duplicate.count(i))
    return order


# ----------------------------------------------------------------------------
# Building the deeper model
# ----------------------------------------------------------------------------


def heads_of(model):
    return dict(with_pooler=model.pooler is not None, with_mlm_head=model.mlm_head is not None,
                with_pair_head=model.pair_head is not None)


def copy_outside_encoder(source, target):
    """Embeddings, pooler and heads: unchanged (copied, not shared)."""
    for name in ("embeddings", "pooler", "mlm_head", "pair_head"):
        module = getattr(source, name)
        if module is not None:
            getattr(target, name).load_state_dict(module.state_dict())


def deepen_bert(model, order, tied=False):
    """A new BERT that runs source depth `order[d]` at each new depth d.

    Untied: `len(order)` distinct layers, each a copy of its source layer.
    Tied: one copy of each source layer used, in order of first use, and a
    `layer_order` saying which runs where (None when no layer repeats).
    An ALBERT or a DeBERTa is deepened untied only (module docstring)."""
    config = model.config
    plan = config.depth_plan()                       # source depth -> distinct source layer (ALBERT: group)
    check_indices(order, len(plan), "--order")
    check_depth(len(order), "--order")
    sources = [plan[depth] for depth in order]       # distinct source layer run at each new depth
    if isinstance(model, DebertaModel):
        if tied:
            raise MiniBertError("--tied: minibert's DeBERTa has no layer_order to run one layer at several "
                                "depths; duplicate it untied (without --tied)")
        return copy_deberta_layers(model, sources)
    if config.model_type == "albert":
        if tied:
            raise MiniBertError("--tied: ALBERT's layers are already shared; --repeat K gives the tied form "
                                "(--duplicate/--order give the untied one)")
        return untie_albert(model, sources)
    if tied:
        distinct, layer_order = tied_layers(sources)
    else:
        distinct, layer_order = sources, None         # untied: every new depth its own copy
    return copy_layers(model, len(order), distinct, layer_order)


def tied_layers(sources):
    """Tied: the distinct source layers, each once in order of first use, and
    the `layer_order` that runs them at every new depth (None when nothing
    repeats). tied_layers([0, 0, 1, 2]) -> ([0, 1, 2], [0, 0, 1, 2])."""
    # exercise: duplicate-tied
    distinct = list(dict.fromkeys(sources))      # each source layer once, in order of first use
    layer_order = [distinct.index(s) for s in sources]
    if layer_order == list(range(len(sources))):   # nothing repeats: an ordinary BERT
        layer_order = None
    return distinct, layer_order
    # end exercise


def copy_layers(model, num_layers, distinct, layer_order=None):
    """A new BERT of `num_layers` depths whose distinct layers are copies of
    the source layers `distinct` (new layer i <- source layer distinct[i]),
    run in `layer_order` (None: each once, in order: the untied scheme)."""
    # exercise: duplicate-untied
    new_config = dataclasses.replace(model.config, num_hidden_layers=num_layers, layer_order=layer_order,
                                     num_hidden_groups=len(distinct) if layer_order is not None else None)
    deeper = BertModel(new_config, **heads_of(model))
    copy_outside_encoder(model, deeper)
    for new_index, source_index in enumerate(distinct):
        # load_state_dict copies the values: the new layer owns its storage.
        deeper.encoder.layers[new_index].load_state_dict(model.encoder.layers[source_index].state_dict())
    return deeper.eval()
    # end exercise


def untie_albert(model, groups):
    """ALBERT, untied: a copy of source group `groups[d]` at every new depth d.
    The result is an ALBERT with one group per depth (num_hidden_groups =
    depth), which transformers' AlbertModel loads and runs in the same order.
    Group g holds layers g * inner .. g * inner + inner - 1."""
    inner = model.config.inner_group_num
    distinct = [g * inner + i for g in groups for i in range(inner)]     # source layers, group by group
    deeper = copy_layers(model, len(groups), distinct)                   # one group per depth
    deeper.config.num_hidden_groups = len(groups)      # copy_layers left None, which means the same; say it
    return deeper


def copy_deberta_layers(model, sources):
    """DeBERTa, untied: new layer d <- a copy of source layer sources[d].
    Everything outside the layers (embeddings, the shared relative table and
    its LayerNorm, v2's convolution branch after depth 0, pooler, MLM head)
    is copied unchanged: it has the same shape at any depth."""
    new_config = dataclasses.replace(model.config, num_hidden_layers=len(sources))
    deeper = DebertaModel(new_config, with_pooler=model.pooler is not None, with_mlm_head=model.mlm_head is not None)
    state = {name: value for name, value in model.state_dict().items() if not name.startswith("encoder.layers.")}
    deeper.load_state_dict(state, strict=False)      # all but the layers, which are filled next
    for new_index, source_index in enumerate(sources):
        deeper.encoder.layers[new_index].load_state_dict(model.encoder.layers[source_index].state_dict())
    return deeper.eval()


def repeat_albert(model, k):
    """ALBERT shares its layers, so "duplicating" means running them more
    times: num_hidden_layers L -> L + k, no new weights.

    With G > 1 groups, depth l runs group l * G // L (ALBERT's modeling.py and
    transformers alike), so the groups run in G equal blocks. Adding k depths
    keeps that meaning, "each group runs k / G more times", only when L and k
    are both multiples of G; other cases would silently reshuffle which group
    runs where, and are refused."""
    config = model.config
    if config.model_type != "albert":
        kind = "DeBERTa" if isinstance(model, DebertaModel) else "BERT"
        raise MiniBertError(f"--repeat: this is a {kind} model with distinct layers; use --duplicate or --order")
    if not isinstance(k, int) or k < 1:
        raise MiniBertError(f"--repeat {k}: expected a positive integer")
    G, L = config.num_groups, config.num_hidden_layers
    check_depth(L + k, f"--repeat {k}")
    if G > 1 and (L % G or k % G):
        raise MiniBertError(f"--repeat {k}: this ALBERT has {G} layer groups over {L} layers; --repeat needs "
                            f"the layer count and K to be multiples of {G} (each group then runs K/{G} more times)")
    deeper = BertModel(dataclasses.replace(config, num_hidden_layers=L + k), **heads_of(model))
    deeper.load_state_dict(model.state_dict())      # same tensors: only the depth changed
    return deeper.eval()


def source_order(model, order):
    """For labelling probe rows: the order as distinct source layers."""
    plan = model.config.depth_plan()
    return [plan[depth] for depth in order]


def recorded_layers_run(folder, config):
    """The source layer run at each depth, from the duplication.json that
    `write_model` left in `folder`; None if there is none or it does not fit
    this config. Only used to label probe rows ("layer 0 (copy)"), since an
    untied duplicated model's config is a plain BERT that cannot say it."""
    try:
        record = json.loads((Path(folder) / "duplication.json").read_text(encoding="utf-8"))
        layers = record["layers_run"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    fits = (isinstance(layers, list) and len(layers) == config.num_hidden_layers
            and all(isinstance(i, int) for i in layers))
    return layers if fits else None


# ----------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------


def check_output_dir(output, force=False, source=None):
    """--output must be a new or empty folder (--force: any folder), and never
    the source model's folder, one inside it or one holding it: writing there
    would overwrite the model being copied or nest one model folder in the
    other (even --force cannot allow that).
    `source`: the --model path (a folder or a file in one), when known."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise MiniBertError(f"--output {output}: exists and is not a folder")
    if source is not None and Path(source).exists():
        source_dir = Path(source).resolve()
        source_dir = source_dir if source_dir.is_dir() else source_dir.parent
        target = output.resolve()
        where = ("is" if target == source_dir else "is inside" if source_dir in target.parents
                 else "holds" if target in source_dir.parents else None)
        if where is not None:
            raise MiniBertError(f"--output {output}: {where} the folder of the model being copied ({source_dir}); "
                                f"choose a folder apart from it (--force does not allow this)")
    if output.is_dir() and any(output.iterdir()) and not force:
        raise MiniBertError(f"--output {output}: folder exists and is not empty; pass --force to write into it")


def write_model(deeper, output, source_dir=None, record=None, force=False):
    """Hugging Face layout (config.json, model.safetensors, tokenizer files
    from `source_dir`), plus duplication.json saying how it was made,
    written as one unit (support/folders.write_folder): a kill or a full
    disk leaves the old folder or the new one. Over an old model (--force),
    the new one replaces all its model files; a user's other files stay."""
    from minibert.checkpoints import save_pretrained
    from minibert.support.folders import write_folder
    from minibert.support.outputs import MODEL_FOLDER_FILES
    check_output_dir(output, force, source=source_dir)
    if source_dir is not None:
        deeper.source_dir = source_dir               # save_pretrained copies the tokenizer from here

    def write_into(staging):
        save_pretrained(deeper, staging)
        if record is not None:
            write_json(staging / "duplication.json", record)
    write_folder(output, write_into, leave_behind=MODEL_FOLDER_FILES)
