"""minibert/support/checks.py: the checks of config fields (BERT, DeBERTa, the student), layer orders
and the metrics' inputs.
"""

import math

import numpy as np
import pytest

from minibert.deberta import DebertaConfig
from minibert.lstm import StudentConfig
from minibert.model import ACTIVATIONS, BertConfig
from minibert.support.checks import (MAX_DEPTH, check_depth, check_encoder_fields, check_predictions,
                                     check_student_fields, check_v2_inputs, field_error, is_int, is_number, paired,
                                     parse_indices, squad_questions, student_fields_from)
from minibert.support import MiniBertError


# ==============================================================================
# Config validation (minibert/support/checks.py): a bad field in a
# BertConfig or a DebertaConfig is a one-line MiniBertError that names the
# field, its value and what was expected; a config.json's errors name the file.
# ==============================================================================

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


# ==============================================================================
# minibert.support.checks: a script's layer indices read, and the depth limit.
# ==============================================================================

def test_parse_indices_reads_comma_separated_ascii_integers_and_names_the_flag():
    assert parse_indices(" 0, 2 ,5", "--order") == [0, 2, 5]
    for text, flag, message in [("", "--order", "--order: empty"),
                                ("1,x", "--duplicate", "--duplicate '1,x'"),
                                ("٢,١", "--order", "--order '٢,١'.*digits 0-9"),
                                ("1,２", "--order", "digits 0-9")]:          # Arabic-Indic digits, a fullwidth 2
        with pytest.raises(MiniBertError, match=message):
            parse_indices(text, flag)


def test_check_depth_allows_the_limit_itself_and_names_what_asked():
    check_depth(MAX_DEPTH, "layer_order")
    with pytest.raises(MiniBertError, match="layer_order: would make a model of 1,001 layers; the limit is 1,000"):
        check_depth(MAX_DEPTH + 1, "layer_order")


# ==============================================================================
# minibert.support.checks: what the metrics cannot score is refused
# in one line (the metrics' own tests check the messages through them).
# ==============================================================================

DATA = [{"paragraphs": [{"context": "a b", "qas": [{"id": "q1", "answers": []}, {"id": "q2", "answers": []}]}]}]


def test_paired_turns_arrays_into_lists_of_one_length():
    assert paired(np.array([1, 0]), (1, 1)) == ([1, 0], [1, 1])
    with pytest.raises(MiniBertError, match="2 predictions but 1 labels"):
        paired([1, 0], [1])


def test_squad_questions_are_in_file_order_and_distinct():
    assert [qa["id"] for qa in squad_questions(DATA)] == ["q1", "q2"]
    with pytest.raises(MiniBertError, match="pass json\\['data'\\]"):
        squad_questions({"data": DATA})
    twice = [{"paragraphs": [{"qas": [{"id": "q", "answers": []}] * 2}]}]
    with pytest.raises(MiniBertError, match="appears twice"):
        squad_questions(twice)


def test_predictions_and_no_answer_scores_cover_the_dataset():
    questions = squad_questions(DATA)
    check_predictions({"q1": ""}, questions)
    with pytest.raises(MiniBertError, match="expected a string"):
        check_predictions({"q1": None}, questions)
    with pytest.raises(MiniBertError, match="predictions: 1 questions have none, e.g. 'q2'"):
        check_v2_inputs({"q1": ""}, None, questions)
    with pytest.raises(MiniBertError, match="na_probs: 1 question ids are not in the dataset"):
        check_v2_inputs({"q1": "", "q2": ""}, {"q1": 0.0, "q2": 0.0, "q3": 0.0}, questions)
    check_v2_inputs({"q1": "", "q2": ""}, {"q1": 0.0, "q2": 1.0}, questions)


# ==============================================================================
# minibert/support/checks.py: a bad student config field is a
# one-line error naming the source, the field, its value and what was expected.
# ==============================================================================

def test_student_config_errors_name_the_source_and_the_field():
    with pytest.raises(MiniBertError, match=r"^student\.json: student config field 'pooling' = 'mean': "
                                            r"expected 'final' or 'max'$"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "pooling": "mean"}, "student.json")
    with pytest.raises(MiniBertError, match="'padding_id' = 50: expected an integer in 0..49"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "padding_id": 50}, "student.json")
    with pytest.raises(MiniBertError, match="'hidden_size' = True: expected a positive integer"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "hidden_size": True}, "student.json")
    with pytest.raises(MiniBertError, match=r"'dropout' = 1\.0: expected a probability in \[0, 1\)"):
        StudentConfig(vocab_size=50, num_classes=2, dropout=1.0)
    with pytest.raises(MiniBertError, match="student.json: student config field 'num_classes' is missing"):
        StudentConfig.from_dict({"vocab_size": 50}, "student.json")
    with pytest.raises(MiniBertError, match="unknown student config field 'hiden_size'"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "hiden_size": 3}, "student.json")


def test_fields_are_completed_with_the_defaults_and_checked():
    defaults = {"embedding_dim": 300, "hidden_size": 150, "fc_size": 200, "pair": False, "pooling": "final",
                "dropout": 0.1, "padding_id": 0, "embeddings_mode": "rand"}
    values = student_fields_from({"vocab_size": 10, "num_classes": 2, "pair": True}, "s.json", defaults)
    assert values == {**defaults, "vocab_size": 10, "num_classes": 2, "pair": True}
    with pytest.raises(MiniBertError, match="s.json: expected an object of student config fields, got list"):
        student_fields_from([1], "s.json", defaults)
    with pytest.raises(MiniBertError, match="'pair' = 1: expected true or false"):
        check_student_fields({**values, "pair": 1}, "s.json")
