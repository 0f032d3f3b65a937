"""The family table (minibert/checkpoints/families.py): one entry per model
family, which generic code asks instead of testing a model's family."""

import re

from helpers import REPO
from minibert.checkpoints.families import (BYTE_LEVEL_BPE, FAMILIES, LAYER_COPIES, RELATIVE_LAYER_COPIES,
                                           SENTENCEPIECE_UNIGRAM, SHARED_GROUP, SPM, WORDPIECE, family_of)
from minibert.deberta import DebertaConfig, DebertaModel
from minibert.model import ALBERT_DEFAULTS, BertConfig, BertModel


def tiny_bert(model_type="bert"):
    return BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
                      model_type=model_type)


def tiny_deberta(model_type):
    return DebertaConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=16, model_type=model_type, relative_attention=True)


def test_each_family_knows_its_classes_names_tokenizer_depth_and_pair_objective():
    rows = {key: (f.model_type, f.config_class, f.model_class, f.architecture, f.base_prefix, f.tokenizer, f.deepens,
                  f.pair_objective) for key, f in FAMILIES.items()}
    assert rows == {
        "bert": ("bert", BertConfig, BertModel, "Bert", "bert.", WORDPIECE, LAYER_COPIES, "nsp"),
        "albert": ("albert", BertConfig, BertModel, "Albert", "albert.", SENTENCEPIECE_UNIGRAM, SHARED_GROUP, "sop"),
        "deberta-v1": ("deberta", DebertaConfig, DebertaModel, "Deberta", "deberta.", BYTE_LEVEL_BPE,
                       RELATIVE_LAYER_COPIES, "none"),
        "deberta-v2": ("deberta-v2", DebertaConfig, DebertaModel, "DebertaV2", "deberta.", SPM,
                       RELATIVE_LAYER_COPIES, "none"),
        "deberta-v3": ("deberta-v2", DebertaConfig, DebertaModel, "DebertaV2", "deberta.", SPM,
                       RELATIVE_LAYER_COPIES, "none"),
    }
    assert FAMILIES["albert"].config_defaults == ALBERT_DEFAULTS and FAMILIES["bert"].config_defaults == {}
    assert [f.with_pair_head for f in FAMILIES.values()] == [True, True, False, False, False]
    assert "position_buckets" in FAMILIES["deberta-v1"].unwritten_fields and not FAMILIES["deberta-v2"].unwritten_fields


def test_family_of_reads_a_config_a_model_or_a_model_type():
    assert family_of(tiny_bert()) is FAMILIES["bert"]
    assert family_of(BertModel(tiny_bert("albert"))) is FAMILIES["albert"]
    assert family_of(tiny_deberta("deberta")) is FAMILIES["deberta-v1"]
    assert family_of(DebertaModel(tiny_deberta("deberta-v2"))).architecture == "DebertaV2"   # v2 and v3 alike
    assert family_of("albert").name == "ALBERT"


# What measure-style scans count as testing a model's family: isinstance of a
# family's class, a model_type comparison, an is_deberta / is_v1 style flag.
FAMILY_CHECK = re.compile(r"isinstance\([^)]*\b(Deberta\w*|Albert\w*|Bert\w*|BiLSTM\w*)|model_type\s*[!=]=|"
                          r"\bis_deberta\b|\bis_v1\b|\bis_albert\b|\bis_v2\b|\bis_v3\b")


def family_check_lines():
    files = sorted(list((REPO / "minibert").rglob("*.py")) + list(REPO.glob("*.py")))
    return [f"{path.relative_to(REPO)}:{number}" for path in files
            if not (path.parent.name == "minibert" and path.name in ("model.py", "deberta.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if FAMILY_CHECK.search(line)]


def test_the_scan_finds_family_checks():
    assert FAMILY_CHECK.search("if isinstance(model, DebertaModel):")
    assert FAMILY_CHECK.search('albert = config.model_type == "albert"')
    assert FAMILY_CHECK.search("if config.is_v1:")
    assert not FAMILY_CHECK.search("if isinstance(e, MiniBertError):")
    assert not FAMILY_CHECK.search("if family.deepens == SHARED_GROUP:")


def test_generic_code_asks_the_family_table():
    """At most 12 lines outside the model files test a model's family (the
    family-specific name maps and config checks, the tokenizer rules); the
    rest asks the entry."""
    found = family_check_lines()
    assert len(found) <= 12, found
