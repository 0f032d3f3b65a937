"""Config validation for the model files: every field of a BertConfig or a
DebertaConfig has the type and range the model needs, or a one-line
MiniBertError names the field, its value and what was expected.

A config is user input (a config.json, a script's flags): a string dropout or
a NaN epsilon must not reach torch, where it would fail obscurely or silently
give NaN outputs. The configs call these checks in one line when they are
built (`__post_init__`); the model files say what each field means.

`activations` is the model's table of activation names (model.ACTIVATIONS),
passed in so that this module imports no lesson module.
"""

import math
from contextlib import contextmanager

from minibert.support.errors import MiniBertError

DEBERTA_MODEL_TYPES = ("deberta", "deberta-v2")
RELATIVE_TERMS = ("c2p", "p2c")   # the official code's "p2p" is in no released model and not supported
# The deepest encoder a config may ask for: far above any released model (48
# layers) or the paper's duplications, and still runnable. Without it an
# edited config.json of 100,000,000 shared ALBERT layers loads (one layer of
# weights) and runs until the allocator gives up.
MAX_LAYERS = 1000


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def field_error(config):
    """fail(field name, what was expected): raises the one-line MiniBertError."""
    def fail(field_name, expected):
        raise MiniBertError(f"config field '{field_name}' = {getattr(config, field_name)!r}: expected {expected}")
    return fail


@contextmanager
def named_by(source):
    """Prefix a config error with the file it came from: 'models/x/config.json: config field ...'."""
    try:
        yield
    except MiniBertError as e:
        raise MiniBertError(f"{source}: {e}") from None


# ----------------------------------------------------------------------------
# What every encoder config has (BERT, ALBERT, DeBERTa)
# ----------------------------------------------------------------------------


def check_encoder_fields(config, activations):
    """The fields of the Transformer encoder itself, which BERT, ALBERT and
    DeBERTa share: sizes, dropouts, initializer range, epsilon, padding id,
    activation and the written_out switch."""
    fail = field_error(config)
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings"):
        if not is_int(getattr(config, name)) or getattr(config, name) < 1:
            fail(name, "a positive integer")
    if config.num_hidden_layers > MAX_LAYERS:
        fail("num_hidden_layers", f"at most {MAX_LAYERS:,} layers")
    if config.embedding_size is not None and (not is_int(config.embedding_size) or config.embedding_size < 1):
        fail("embedding_size", "a positive integer (or absent)")
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
        value = getattr(config, name)
        if not is_number(value) or not 0 <= value < 1:
            fail(name, "a probability in [0, 1)")
    if not is_number(config.initializer_range) or config.initializer_range < 0:
        fail("initializer_range", "a finite number >= 0")
    if not is_number(config.layer_norm_eps) or config.layer_norm_eps <= 0:
        fail("layer_norm_eps", "a finite number > 0")
    if config.pad_token_id is not None and (not is_int(config.pad_token_id) or config.pad_token_id < 0):
        fail("pad_token_id", "a non-negative integer")
    if config.hidden_size % config.num_attention_heads:
        fail("hidden_size", f"a multiple of num_attention_heads ({config.num_attention_heads})")
    if not isinstance(config.hidden_act, str) or config.hidden_act not in activations:
        fail("hidden_act", f"one of {sorted(activations)}")
    if not isinstance(config.written_out, bool):
        fail("written_out", "true or false")


# ----------------------------------------------------------------------------
# BertConfig (BERT, ALBERT, Kao et al.'s duplicated models)
# ----------------------------------------------------------------------------


def check_bert_config(config, activations):
    """The encoder fields, then ALBERT's switches and the layer plan."""
    check_encoder_fields(config, activations)
    fail = field_error(config)
    for name in ("type_vocab_size", "inner_group_num"):
        if not is_int(getattr(config, name)) or getattr(config, name) < 1:
            fail(name, "a positive integer")
    if config.num_hidden_groups is not None and (not is_int(config.num_hidden_groups) or config.num_hidden_groups < 1):
        fail("num_hidden_groups", "a positive integer (or absent)")
    if config.model_type not in ("bert", "albert"):
        fail("model_type", "'bert' or 'albert'")
    if config.model_type == "bert":
        # ALBERT's fields mean something on a BERT only where BERT has the
        # same thing: E == H, one layer per group, and a group per depth
        # (or a duplicated model's explicit layer_order, checked below).
        if config.embedding_size not in (None, config.hidden_size):
            fail("embedding_size", f"absent or equal to hidden_size ({config.hidden_size}) for a BERT model; "
                                   "factorized embeddings are ALBERT's (model_type 'albert')")
        if config.inner_group_num != 1:
            fail("inner_group_num", "1 for a BERT model (layer groups are ALBERT's)")
        if config.layer_order is None and config.num_hidden_groups not in (None, config.num_hidden_layers):
            fail("num_hidden_groups", f"absent or equal to num_hidden_layers ({config.num_hidden_layers}) for a "
                                      "BERT model without layer_order (shared layers are ALBERT's)")
    if config.num_groups > config.num_hidden_layers and config.layer_order is None:
        fail("num_hidden_groups", f"at most num_hidden_layers ({config.num_hidden_layers}): "
                                  "a group that never runs has no place")
    if config.layer_order is not None:
        order = config.layer_order
        if (not isinstance(order, list) or len(order) != config.num_hidden_layers
                or not all(is_int(g) and 0 <= g < config.num_groups for g in order)):
            fail("layer_order", f"a list of {config.num_hidden_layers} group indices in 0..{config.num_groups - 1}")
        if set(order) != set(range(config.num_groups)):
            fail("layer_order", f"to run every one of the {config.num_groups} layers at least once")


# ----------------------------------------------------------------------------
# DebertaConfig (v1, v2, v3)
# ----------------------------------------------------------------------------


def check_deberta_json(values, source):
    """What a DeBERTa config.json must be before its fields are read: a JSON
    object, without the switches no released model uses."""
    if not isinstance(values, dict):
        raise MiniBertError(f"{source}: expected a JSON object of config fields, got {type(values).__name__}")
    if values.get("talking_head"):
        raise MiniBertError(f"{source}: config field 'talking_head' = true is not supported "
                            f"(no released DeBERTa uses it)")


def check_deberta_config(config, activations):
    """The encoder fields (what BERT's config checks too), then what DeBERTa adds."""
    check_encoder_fields(config, activations)
    fail = field_error(config)
    if not is_int(config.conv_groups) or config.conv_groups < 1:
        fail("conv_groups", "a positive integer")
    for name in ("type_vocab_size", "conv_kernel_size"):
        if not is_int(getattr(config, name)) or getattr(config, name) < 0:
            fail(name, "an integer >= 0")
    for name in ("max_relative_positions", "position_buckets"):
        if not is_int(getattr(config, name)):
            fail(name, "an integer (< 1 for the default)")
    if not is_number(config.pooler_dropout) or not 0 <= config.pooler_dropout < 1:
        fail("pooler_dropout", "a probability in [0, 1)")
    for name in ("relative_attention", "position_biased_input", "share_att_key"):
        if not isinstance(getattr(config, name), bool):
            fail(name, "true or false")
    for name in ("conv_act", "pooler_hidden_act"):
        if not isinstance(getattr(config, name), str) or getattr(config, name) not in activations:
            fail(name, f"one of {sorted(activations)}")
    if config.model_type not in DEBERTA_MODEL_TYPES:
        fail("model_type", "'deberta' (v1) or 'deberta-v2' (v2 and v3)")
    if config.attention_head_size not in (None, config.head_size):
        fail("attention_head_size", f"absent or hidden_size / num_attention_heads ({config.head_size})")
    terms = config.pos_att_type
    if (not isinstance(terms, list) or not all(t in RELATIVE_TERMS for t in terms)
            or len(set(terms)) != len(terms)):
        fail("pos_att_type", "'c2p', 'p2c' or both ('c2p|p2c'), each once")
    if not isinstance(config.norm_rel_ebd, str) or not all(
            part.strip() in ("none", "layer_norm") for part in config.norm_rel_ebd.lower().split("|")):
        fail("norm_rel_ebd", "'none' or 'layer_norm'")
    if config.conv_kernel_size and config.conv_kernel_size % 2 == 0:
        fail("conv_kernel_size", "0 (no convolution) or an odd kernel size (the output keeps its length)")
    if config.hidden_size % config.conv_groups:
        fail("conv_groups", f"a divisor of hidden_size ({config.hidden_size})")
    if config.position_buckets > 0:
        if config.position_buckets < 2:
            fail("position_buckets", "at least 2 (or < 1 for no buckets)")
        if config.max_relative - 1 <= config.position_buckets // 2:
            fail("position_buckets", f"less than 2 * (max_relative_positions - 1) = {2 * (config.max_relative - 1)}: "
                                     "the log buckets squeeze the distances beyond position_buckets / 2 "
                                     "into the ones up to max_relative_positions")
    if config.is_v1:
        # v2's switches mean nothing to v1's code (it ignores them); a v1
        # config that sets one is a config for another model.
        v2_only = {"position_buckets": config.position_buckets > 0, "share_att_key": config.share_att_key,
                   "norm_rel_ebd": config.relative_layer_norm, "conv_kernel_size": config.conv_kernel_size > 0}
        for name, is_set in v2_only.items():
            if is_set:
                fail(name, "its default for model_type 'deberta' (v1); it is a 'deberta-v2' switch")
