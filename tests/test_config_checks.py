"""Config validation (minibert/support/config_checks.py): a bad field in a
BertConfig or a DebertaConfig is a one-line MiniBertError that names the
field, its value and what was expected; a config.json's errors name the file.
"""

import math

import pytest

from minibert.deberta import DebertaConfig
from minibert.model import ACTIVATIONS, BertConfig
from minibert.support.config_checks import check_encoder_fields, field_error, is_int, is_number
from minibert.support.errors import MiniBertError

# A tiny DeBERTa, as in test_deberta.py.
TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_act="gelu", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


# ----------------------------------------------------------------------------
# The helpers
# ----------------------------------------------------------------------------


def test_is_int_refuses_booleans_and_is_number_refuses_nan_and_infinity():
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(0.5) and is_number(2) and not is_number(math.nan) and not is_number(math.inf)
    assert not is_number(False) and not is_number("0.1")


def test_field_error_names_the_field_its_value_and_what_was_expected():
    config = BertConfig()
    config.hidden_size = "big"
    with pytest.raises(MiniBertError, match=r"^config field 'hidden_size' = 'big': expected a positive integer$"):
        field_error(config)("hidden_size", "a positive integer")
    with pytest.raises(MiniBertError, match="'hidden_size' = 'big'"):
        check_encoder_fields(config, ACTIVATIONS)


# ----------------------------------------------------------------------------
# DebertaConfig
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("overrides,message", [
    (dict(hidden_size=30), "'hidden_size' = 30: expected a multiple of num_attention_heads"),
    (dict(pos_att_type="c2p|p2p"), "'pos_att_type'"),
    (dict(position_buckets=8), "'position_buckets' = 8: expected its default for model_type 'deberta'"),
    (dict(share_att_key=True), "'share_att_key'.*'deberta-v2' switch"),
    (dict(model_type="deberta-v2", conv_kernel_size=4), "'conv_kernel_size' = 4: expected 0 .* or an odd"),
    (dict(model_type="deberta-v2", position_buckets=200),
     r"'position_buckets' = 200: expected less than 2 \* \(max_relative_positions - 1\) = 126"),
    (dict(norm_rel_ebd="batch_norm"), "'norm_rel_ebd'"),
    (dict(hidden_dropout_prob=1.5), "'hidden_dropout_prob' = 1.5: expected a probability"),
    (dict(relative_attention="yes"), "'relative_attention' = 'yes': expected true or false"),
    (dict(attention_head_size=16), "'attention_head_size' = 16: expected absent or .* \\(8\\)"),
    (dict(model_type="bert"), "'model_type' = 'bert'"),
    (dict(layer_norm_eps=float("nan")), "'layer_norm_eps'"),
    (dict(type_vocab_size=-1), "'type_vocab_size' = -1: expected an integer >= 0"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_bad_deberta_config_fields_are_named(overrides, message):
    with pytest.raises(MiniBertError, match=message):
        DebertaConfig(**{**TINY, **overrides})


@pytest.mark.parametrize("field,value", [("vocab_size", 0), ("hidden_dropout_prob", "0.1"), ("hidden_act", "swish"),
                                         ("pad_token_id", -1), ("initializer_range", float("inf")),
                                         ("written_out", "no")])
def test_the_encoder_fields_bert_and_deberta_share_are_checked_once_with_one_message(field, value):
    # check_encoder_fields runs for both configs: the same bad value, the same words.
    with pytest.raises(MiniBertError) as bert_error:
        BertConfig(**{field: value})
    with pytest.raises(MiniBertError) as deberta_error:
        DebertaConfig(**{**TINY, field: value})
    assert str(bert_error.value) == str(deberta_error.value)
    assert str(bert_error.value).startswith(f"config field '{field}'")


def test_deberta_from_dict_names_the_file_and_refuses_what_it_cannot_compute():
    with pytest.raises(MiniBertError, match=r"^models/x/config.json: config field 'hidden_size' = 'big'"):
        DebertaConfig.from_dict({"model_type": "deberta", "hidden_size": "big"}, source="models/x/config.json")
    with pytest.raises(MiniBertError, match="talking_head"):
        DebertaConfig.from_dict({"model_type": "deberta", "talking_head": True})
    with pytest.raises(MiniBertError, match=r"^models/x/config.json: expected a JSON object .* got list"):
        DebertaConfig.from_dict([1, 2], source="models/x/config.json")


# ----------------------------------------------------------------------------
# BertConfig
# ----------------------------------------------------------------------------


BAD_FIELDS = [("num_hidden_groups", "2"), ("embedding_size", 0), ("hidden_act", ["gelu"]), ("num_attention_heads", 5),
              ("hidden_dropout_prob", "0.1"), ("hidden_dropout_prob", 1.5), ("attention_probs_dropout_prob", -0.1),
              ("initializer_range", -0.02), ("layer_norm_eps", "1e-12"), ("layer_norm_eps", None),
              ("layer_norm_eps", -1e-12), ("layer_norm_eps", float("nan")), ("pad_token_id", -1),
              # ALBERT-only fields on a BERT: they would build layers no BERT checkpoint fills
              ("inner_group_num", 2), ("num_hidden_groups", 2), ("embedding_size", 16)]


@pytest.mark.parametrize("field,value", BAD_FIELDS)
def test_bad_config_fields_are_named_in_a_minibert_error(field, value):
    with pytest.raises(MiniBertError, match=f"'{field}'" if field != "num_attention_heads" else "hidden_size"):
        BertConfig.from_dict({"hidden_size": 48, "num_hidden_layers": 4, field: value})


def test_a_duplicated_bert_must_run_every_distinct_layer():
    with pytest.raises(MiniBertError, match="'layer_order'.*every one of the 3 layers"):
        BertConfig(num_hidden_layers=4, num_hidden_groups=3, layer_order=[0, 0, 1, 1])


def test_a_config_deeper_than_any_runnable_encoder_is_refused_before_a_layer_is_built():
    # An edited config.json of 100,000,000 shared ALBERT layers would load one
    # layer of weights and then run until the allocator gives up.
    with pytest.raises(MiniBertError, match=r"^config field 'num_hidden_layers' = 100000000: expected at most 1,000"):
        BertConfig(model_type="albert", num_hidden_layers=100_000_000, num_hidden_groups=1)
    with pytest.raises(MiniBertError, match=r"'num_hidden_layers' = 1001: expected at most 1,000 layers"):
        DebertaConfig(num_hidden_layers=1001)
    assert BertConfig(num_hidden_layers=1000).num_hidden_layers == 1000
