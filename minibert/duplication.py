"""Deeper models for free: duplicating layers (Kao et al. 2020, Finding 2).

Kao et al. made BERT deeper with no training at all: after some layers they
insert a copy of the same layer, e.g. "duplicate the first three layers" of
BERT-base gives 15 layers that run

    0, 0, 1, 1, 2, 2, 3, 4, ..., 11

The copies are *untied* (deep copies that can drift apart when the deeper
model is fine-tuned), and fine-tuning it with the base model's settings
improved SQuAD 2.0 (up to +1.5 F1) and SNLI (+0.6) ([Kao] section 4).

A `layer_order` is the list of source layer indices run at each new depth
(`duplicate_order` makes the paper's; any list of existing indices works);
`distinct` are the layers the new model keeps. `deepen(model, layer_order)`:

* BERT, untied (the paper's scheme): every depth its own deep copy, a plain
  BERT with more layers. Tied (an ablation): each distinct layer once, and
  the config's `layer_order` runs it at several depths (saved untied for
  transformers, with a "layer_order" key from which minibert ties it again).
* ALBERT: the shared group is copied into a distinct group at every depth
  (num_hidden_groups = depth), a layout transformers' ALBERT loads as it is.
  Its tied form is `repeat_albert`: more depths, no new weights.
* DeBERTa: untied only. The relative-position table P belongs to the
  encoder, not to a layer, so the copies need nothing new; the Enhanced Mask
  Decoder reruns whatever layer is last.

Indices are depths of the source (Hugging Face's `encoder.layer.i`), so a
duplicated model duplicates the same way. Embeddings, pooler and heads are
copied unchanged. Reference: [Kao] arXiv:2001.09309.
"""

import dataclasses

from minibert.checkpoints.families import RELATIVE_LAYER_COPIES, SHARED_GROUP, family_of
from minibert.deberta import DebertaModel
from minibert.support.checks import check_depth
from minibert.support import ParameterError
from minibert.model import BertModel


def check_layers(indices, num_layers, name):
    """Every index names a source layer (Python would read -1 as the last one)."""
    if not indices:
        raise ParameterError(f"{name}: empty; expected at least one layer index")
    for i in indices:
        if not 0 <= i < num_layers:
            raise ParameterError(f"{name}: layer index {i} is out of range; the model has {num_layers} layers "
                                 f"(indices 0..{num_layers - 1})")


def duplicate_order(num_layers, duplicate):
    """The paper's scheme: layer i runs once, then once more for every time it
    is listed. duplicate_order(12, [0, 1, 2]) -> 0,0,1,1,2,2,3,...,11 (15 layers)."""
    check_layers(duplicate, num_layers, "duplicate")
    check_depth(num_layers + len(duplicate), "duplicate")
    layer_order = []
    for i in range(num_layers):
        layer_order += [i] * (1 + duplicate.count(i))
    return layer_order


def source_layer_order(model, layer_order):
    """`layer_order` as the source's own layers (ALBERT: groups): a tied source runs one at several depths."""
    depth_plan = model.config.depth_plan()
    return [depth_plan[depth] for depth in layer_order]


def heads_of(model):
    return dict(with_pooler=model.pooler is not None, with_mlm_head=model.mlm_head is not None,
                with_pair_head=model.pair_head is not None)


def copy_outside_encoder(source, target):
    """Embeddings, pooler and heads: unchanged (copied, not shared)."""
    for name in ("embeddings", "pooler", "mlm_head", "pair_head"):
        module = getattr(source, name)
        if module is not None:
            getattr(target, name).load_state_dict(module.state_dict())


def deepen(model, layer_order, tied=False):
    """A new model that runs source layer `layer_order[d]` at each new depth d.

    BERT untied: `len(layer_order)` distinct layers, each a copy of its source
    layer. Tied: one copy of each source layer used, in order of first use,
    and a config `layer_order` saying which runs where (None when no layer
    repeats). An ALBERT or a DeBERTa is deepened untied only."""
    check_layers(layer_order, model.config.num_hidden_layers, "layer_order")
    check_depth(len(layer_order), "layer_order")
    layer_order = source_layer_order(model, layer_order)   # depths -> the source's own layers (a tied one shares)
    family = family_of(model)           # how it deepens: checkpoints/families.py
    if family.deepens == RELATIVE_LAYER_COPIES:
        if tied:
            raise ParameterError("tied: minibert's DeBERTa has no layer_order to run one layer at several depths; "
                                 "duplicate it untied")
        return copy_deberta_layers(model, layer_order)
    if family.deepens == SHARED_GROUP:
        if tied:
            raise ParameterError("tied: ALBERT's layers are already shared; its tied form runs the shared group "
                                 "more times (repeat_albert)")
        return untie_albert(model, layer_order)
    distinct, tied_order = tied_layers(layer_order) if tied else (layer_order, None)   # untied: a copy per depth
    return copy_layers(model, len(layer_order), distinct, tied_order)


def tied_layers(layer_order):
    """Tied: the distinct source layers, each once in order of first use, and
    the new model's layer order (indices into them; None when nothing
    repeats). tied_layers([0, 0, 1, 2]) -> ([0, 1, 2], [0, 0, 1, 2])."""
    # exercise: duplicate-tied
    distinct = list(dict.fromkeys(layer_order))      # each source layer once, in order of first use
    tied_order = [distinct.index(i) for i in layer_order]
    if tied_order == list(range(len(layer_order))):   # nothing repeats: an ordinary BERT
        tied_order = None
    return distinct, tied_order
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


def untie_albert(model, layer_order):
    """ALBERT, untied: a copy of source group `layer_order[d]` at every new
    depth d, one group per depth (num_hidden_groups = depth), which
    transformers' AlbertModel loads and runs in the same order. Group g holds
    layers g * inner .. g * inner + inner - 1."""
    inner = model.config.inner_group_num
    distinct = [g * inner + i for g in layer_order for i in range(inner)]     # source layers, group by group
    deeper = copy_layers(model, len(layer_order), distinct)                   # one group per depth
    deeper.config.num_hidden_groups = len(layer_order)   # copy_layers left None, which means the same; say it
    return deeper


def copy_deberta_layers(model, layer_order):
    """DeBERTa, untied: new layer d <- a copy of source layer layer_order[d].
    Everything outside the layers (embeddings, the shared relative table and
    its LayerNorm, v2's convolution branch after depth 0, pooler, MLM head)
    is copied unchanged: it has the same shape at any depth."""
    new_config = dataclasses.replace(model.config, num_hidden_layers=len(layer_order))
    deeper = DebertaModel(new_config, with_pooler=model.pooler is not None, with_mlm_head=model.mlm_head is not None)
    state = {name: value for name, value in model.state_dict().items() if not name.startswith("encoder.layers.")}
    deeper.load_state_dict(state, strict=False)      # all but the layers, which are filled next
    for new_index, source_index in enumerate(layer_order):
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
    if family_of(model).deepens != SHARED_GROUP:
        raise ParameterError(f"k: only an ALBERT's shared layers run more times; this {type(model).__name__}'s "
                             f"layers are distinct: duplicate them instead (deepen)")
    if not isinstance(k, int) or k < 1:
        raise ParameterError(f"k {k!r}: expected a positive integer")
    G, L = config.num_groups, config.num_hidden_layers
    check_depth(L + k, f"k {k}")
    if G > 1 and (L % G or k % G):
        raise ParameterError(f"k {k}: this ALBERT has {G} layer groups over {L} layers; the layer count and the "
                             f"depths added must both be multiples of {G}, so that each group runs as many more "
                             f"times as every other")
    deeper = BertModel(dataclasses.replace(config, num_hidden_layers=L + k), **heads_of(model))
    deeper.load_state_dict(model.state_dict())      # same tensors: only the depth changed
    return deeper.eval()
