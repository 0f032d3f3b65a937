"""The checks of values where they enter minibert: a model's config fields
(BertConfig, DebertaConfig, the student's StudentConfig), a duplicated model's
layer order, and what the official metrics are given.

Each raises a one-line MiniBertError (a ParameterError for a lesson's
parameter) naming the field or parameter, its value and what was expected; the
lesson that calls a check says what the value means. This module imports
nothing of minibert but the error types (support/__init__.py): the model files (model.py, deberta.py,
lstm.py) call it, and they know no file format.
"""

import math
import re
from contextlib import contextmanager

from minibert.support import MiniBertError, ParameterError

# ==============================================================================
# Config validation for the model files: every field of a BertConfig or a
# DebertaConfig has the type and range the model needs, or a one-line
# MiniBertError names the field, its value and what was expected.
#
# A config is user input (a config.json, a script's flags): a string dropout or
# a NaN epsilon must not reach torch, where it would fail obscurely or silently
# give NaN outputs. The configs call these checks in one line when they are
# built (`__post_init__`); the model files say what each field means.
#
# `activations` is the model's table of activation names (model.ACTIVATIONS),
# passed in so that this module imports no lesson module.
# ==============================================================================


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


# ==============================================================================
# Support for minibert/duplication.py: the checks of a layer order (the
# source layer index run at each new depth) before any layer is copied.
#
# Nothing else bounds how deep a duplicated model gets: `--repeat 100000000`
# on an ALBERT builds a config of 100,000,003 layers (a model no script can
# run), and an untied `--order` of 60,000 entries copies 60,000 layers until
# the allocator gives up. MAX_DEPTH is far above any model of the paper
# (BERT-large duplicated whole is 48 layers) and still fits: 1,000 untied
# BERT-base layers are 7.1M parameters each, 28 GB in float32.
# ==============================================================================

MAX_DEPTH = MAX_LAYERS              # what a config may hold
INDEX = re.compile(r"-?[0-9]+")     # ASCII digits only: int() would also read "٢" (Arabic-Indic two) as 2


def parse_indices(text, flag):
    """"0,1,2" -> [0, 1, 2]; anything else is a MiniBertError naming the flag."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise MiniBertError(f"{flag}: empty; expected comma-separated layer indices such as 0,1,2")
    if not all(INDEX.fullmatch(p) for p in parts):
        raise MiniBertError(f"{flag} {text!r}: expected comma-separated integer layer indices such as 0,1,2 "
                            f"(digits 0-9)")
    return [int(p) for p in parts]


def check_depth(depth, name):
    """A deeper model of `depth` layers is one that fits (MAX_DEPTH above);
    `name`: the lesson's parameter that asked for it."""
    if depth > MAX_DEPTH:
        raise ParameterError(f"{name}: would make a model of {depth:,} layers; the limit is {MAX_DEPTH:,}")


# ==============================================================================
# The checks on what minibert/metrics.py is given: what the official
# scripts would silently misread or crash on raises a one-line MiniBertError
# instead (lengths that differ, question ids the dataset does not have,
# answers that are not text, a question without a prediction).
# ==============================================================================


def as_list(values):
    """A Python list of a list, tuple, NumPy array or torch tensor."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def paired(predictions, labels):
    """Both as lists, which must pair up one to one and not be empty."""
    predictions, labels = as_list(predictions), as_list(labels)
    if len(predictions) != len(labels):
        raise MiniBertError(f"{len(predictions)} predictions but {len(labels)} labels: they must pair up one to one")
    if not predictions:
        raise MiniBertError("no predictions to score")
    return predictions, labels


def squad_questions(dataset):
    """The question dicts ("qas") of a SQuAD "data" list, in file order: the
    order in which the official scripts loop, and so add up, the scores."""
    questions = []
    try:
        for article in dataset:
            for paragraph in article["paragraphs"]:
                questions.extend(paragraph["qas"])
    except (KeyError, TypeError):
        raise MiniBertError("SQuAD dataset: expected the JSON's 'data' list (articles -> 'paragraphs' -> 'qas'); "
                            "pass json['data'], not the whole file") from None
    seen = set()
    for qa in questions:
        if not isinstance(qa, dict) or "id" not in qa or "answers" not in qa:
            raise MiniBertError(f"SQuAD dataset: every question needs an 'id' and 'answers', got {str(qa)[:80]}")
        if qa["id"] in seen:
            raise MiniBertError(f"SQuAD dataset: question id {qa['id']!r} appears twice")
        seen.add(qa["id"])
    if not questions:
        raise MiniBertError("SQuAD dataset: it holds no questions")
    return questions


def check_known_ids(by_id, questions, what):
    """Every key of `by_id` must be a question of the dataset. The official
    scripts silently ignore other ids; here they are an error, because they
    mean the predictions were made for another dataset or version."""
    known = {qa["id"] for qa in questions}
    unknown = [qid for qid in by_id if qid not in known]
    if unknown:
        raise MiniBertError(f"{what}: {len(unknown)} question ids are not in the dataset, e.g. {unknown[0]!r}")


def check_answers_are_text(predictions):
    for qid, answer in predictions.items():
        if not isinstance(answer, str):
            raise MiniBertError(f"predictions: the answer to {qid!r} is {type(answer).__name__}, expected a string")


def check_predictions(predictions, questions):
    """SQuAD predictions: {question id: answer text}, for questions of the dataset only."""
    check_known_ids(predictions, questions, "predictions")
    check_answers_are_text(predictions)


def check_v2_inputs(predictions, na_probs, questions):
    """evaluate-v2.0.py needs a prediction, and with na_probs a no-answer
    score, for every question (it fails with a KeyError without one)."""
    check_predictions(predictions, questions)
    missing = [qa["id"] for qa in questions if qa["id"] not in predictions]
    if missing:
        raise MiniBertError(f"predictions: {len(missing)} questions have none, e.g. {missing[0]!r} "
                            "(predict \"\" for no answer)")
    if na_probs is not None:
        check_known_ids(na_probs, questions, "na_probs")
        missing = [qa["id"] for qa in questions if qa["id"] not in na_probs]
        if missing:
            raise MiniBertError(f"na_probs: {len(missing)} questions have none, e.g. {missing[0]!r}")


# ==============================================================================
# Support for minibert/lstm.py: the checks of the fields of the student's
# config (lstm.StudentConfig), so that a config that exists is a valid one and a
# bad student.json ends in one line naming the file, the field, its value and
# what was expected.
# ==============================================================================


REQUIRED = ("vocab_size", "num_classes")
EMBEDDINGS_MODES = ("rand", "static", "nonstatic", "multichannel")    # the authors' names (d-bert model/base.py)
# The widest published word vectors are 300-d (word2vec, GloVe, fastText) and BERT-large's embeddings 1,024-d; a
# width beyond this is a typo or a broken file (a vectors header "1 100000000000" asked for 18.4 TB).
MAX_EMBEDDING_DIM = 10_000


def check_student_fields(values, source):
    """Every field has the type and range the model needs, or a MiniBertError
    names the source, the field, its value and what was expected."""
    def fail(name, expected):
        raise MiniBertError(f"{source}: student config field '{name}' = {values[name]!r}: expected {expected}")

    def is_int(value):
        return isinstance(value, int) and not isinstance(value, bool)

    for name in ("vocab_size", "num_classes", "embedding_dim", "hidden_size", "fc_size"):
        if not is_int(values[name]) or values[name] < 1:
            fail(name, "a positive integer")
    if not isinstance(values["pair"], bool):
        fail("pair", "true or false")
    if values["embeddings_mode"] not in EMBEDDINGS_MODES:
        fail("embeddings_mode", "'rand', 'static', 'nonstatic' or 'multichannel'")
    if values["pooling"] not in ("final", "max"):
        fail("pooling", "'final' or 'max'")
    dropout = values["dropout"]
    if (not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not math.isfinite(dropout)
            or not 0 <= dropout < 1):
        fail("dropout", "a probability in [0, 1)")
    if not is_int(values["padding_id"]) or not 0 <= values["padding_id"] < values["vocab_size"]:
        fail("padding_id", f"an integer in 0..{values['vocab_size'] - 1} (below vocab_size)")


def student_fields_from(values, source, defaults):
    """The fields of a dict read from `source` (a file name, for the messages),
    completed with `defaults` and checked: unknown fields are errors (a typo
    must not silently fall back to a default), and so are missing REQUIRED ones."""
    if not isinstance(values, dict):
        raise MiniBertError(f"{source}: expected an object of student config fields, got {type(values).__name__}")
    names = [*REQUIRED, *defaults]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise MiniBertError(f"{source}: unknown student config field '{unknown[0]}' (known: {', '.join(names)})")
    for name in REQUIRED:
        if name not in values:
            raise MiniBertError(f"{source}: student config field '{name}' is missing")
    merged = {**defaults, **values}
    check_student_fields(merged, source)
    return merged
