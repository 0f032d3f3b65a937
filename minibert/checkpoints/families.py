"""The model families, one entry each: what the code outside the model files
needs to know about a family, in one place.

    family      model_type   model class    transformers   prefix     tokenizer             deepens (Kao et al.)
    BERT        bert         BertModel      Bert           bert.      WordPiece             layer copies, untied or tied
    ALBERT      albert       BertModel      Albert         albert.    SentencePiece unigram shared group
    DeBERTa v1  deberta      DebertaModel   Deberta        deberta.   byte-level BPE        untied layer copies
    DeBERTa v2  deberta-v2   DebertaModel   DebertaV2      deberta.   spm                   untied layer copies
    DeBERTa v3  deberta-v2   DebertaModel   DebertaV2      deberta.   spm                   untied layer copies

Generic code (the loader and saver, the duplication lesson, the pretraining
run, train_mlm.py) asks `family_of(config or model)` for the entry and reads
its fields; it never asks which family a model is. What a family computes
is its model file's (model.py, deberta.py); how its tensors are named is its
name map's (name_maps.py). Adding a family: docs/guide.md,
"Adding a model family".

v3 is v2's encoder and v2's checkpoint format, pre-trained another way
(ELECTRA's replaced-token detection, [DeBERTaV3]); a config.json cannot tell
them apart, so a loaded model finds the v2 entry. train_mlm.py --arch deberta
builds v3's encoder (its switches) and pretrains it with v1/v2's MLM.
"""

from dataclasses import dataclass, field, replace

from minibert.deberta import DebertaConfig, DebertaModel
from minibert.model import ALBERT_DEFAULTS, BertConfig, BertModel

# Tokenizer kinds: the tokenizer the family's released models ship.
WORDPIECE = "wordpiece"                          # vocab.txt (Schuster & Nakajima; BERT's)
SENTENCEPIECE_UNIGRAM = "sentencepiece unigram"  # spiece.model (Kudo 2018; ALBERT's)
BYTE_LEVEL_BPE = "byte-level BPE"                # vocab.json + merges.txt (GPT-2's; DeBERTa v1's)
SPM = "spm"                                      # spm.model, a SentencePiece model behind DeBERTa's own splitting

# How a family deepens (Kao et al. 2020, minibert/duplication.py).
LAYER_COPIES = "layer copies"    # a copy of a layer at each new depth (untied), or one layer run at several
                                 # depths through the config's layer_order (tied)
SHARED_GROUP = "shared group"    # the shared layer group copied into a group per depth (untied), or run at
                                 # more depths, no new weights (tied: repeat_albert)
RELATIVE_LAYER_COPIES = "untied layer copies"   # untied only: the relative-position table P and its
                                 # LayerNorm belong to the encoder, not to a layer, so copies need nothing new;
                                 # the config has no layer_order to run one layer at several depths

# DebertaConfig fields that only v2/v3's code reads: left out of a v1
# config.json, as in microsoft/deberta-base's (their defaults are v1's anyway).
DEBERTA_V2_ONLY_FIELDS = ("position_buckets", "share_att_key", "norm_rel_ebd", "conv_kernel_size", "conv_act",
                          "conv_groups", "attention_head_size")


@dataclass(frozen=True)
class Family:
    name: str                 # in messages
    model_type: str           # config.json's "model_type"
    config_class: type
    model_class: type
    architecture: str         # transformers' class prefix: <architecture>ForMaskedLM, ...ForSequenceClassification
    base_prefix: str          # the encoder's tensors in a Hugging Face file: "bert.embeddings...."
    tokenizer: str            # one of the tokenizer kinds above
    deepens: str              # one of the ways to deepen above
    pair_objective: str       # train_mlm.py's --pair-objective auto: "nsp", "sop" or "none"
    with_pair_head: bool      # whether its model class has a sentence-pair head (NSP/SOP) to pretrain
    paper: str                # where the family comes from (minibert/model.py's, deberta.py's references)
    config_defaults: dict = field(default_factory=dict)   # what its code assumes where a config leaves a field out
    unwritten_fields: tuple = ()   # config fields its transformers config class lacks (left out of config.json)
    copies_tokenizer: bool = False  # save_pretrained copies a released tokenizer's files as they are


BERT = Family("BERT", "bert", BertConfig, BertModel, "Bert", "bert.", WORDPIECE, LAYER_COPIES, "nsp", True,
              "[BERT] Devlin et al. 2018")
ALBERT = Family("ALBERT", "albert", BertConfig, BertModel, "Albert", "albert.", SENTENCEPIECE_UNIGRAM, SHARED_GROUP,
                "sop", True, "[ALBERT] Lan et al. 2019", config_defaults=ALBERT_DEFAULTS)
DEBERTA_V1 = Family("DeBERTa", "deberta", DebertaConfig, DebertaModel, "Deberta", "deberta.", BYTE_LEVEL_BPE,
                    RELATIVE_LAYER_COPIES, "none", False, "[DeBERTa] He et al. 2020",
                    unwritten_fields=DEBERTA_V2_ONLY_FIELDS, copies_tokenizer=True)
DEBERTA_V2 = Family("DeBERTa", "deberta-v2", DebertaConfig, DebertaModel, "DebertaV2", "deberta.", SPM,
                    RELATIVE_LAYER_COPIES, "none", False, "[DeBERTa] He et al. 2020 (the v2 models)",
                    copies_tokenizer=True)
DEBERTA_V3 = replace(DEBERTA_V2, paper="[DeBERTaV3] He et al. 2021")   # v2's entry otherwise: see above

FAMILIES = {"bert": BERT, "albert": ALBERT, "deberta-v1": DEBERTA_V1, "deberta-v2": DEBERTA_V2,
            "deberta-v3": DEBERTA_V3}
# config.json's model_type -> the entry (v2 and v3 share one model_type: v2's entry answers)
BY_MODEL_TYPE = {family.model_type: family for family in (BERT, ALBERT, DEBERTA_V1, DEBERTA_V2)}


def family_of(thing):
    """The entry for a model, a config, or a config.json's model_type (a
    config's is one of BY_MODEL_TYPE's: its check says so when it is made)."""
    model_type = thing if isinstance(thing, str) else getattr(thing, "config", thing).model_type
    return BY_MODEL_TYPE[model_type]
