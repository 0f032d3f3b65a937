"""DeBERTa's tokenizers against the references.

v2/v3 (SentencePiece unigram): a 300-piece model trained here with
`sentencepiece` the way DeBERTa-v3's spm.model is laid out ([PAD]=0, [CLS]=1,
[SEP]=2, [UNK]=3), compared with
  (a) the official recipe run on the real SentencePiece library: DeBERTa's
      SPMTokenizer (microsoft/DeBERTa spm_tokenizer.py) is `encode_as_pieces`
      on the text, after `_run_split_on_punc` when split_by_punct is set, and
      transformers lower-cases first when do_lower_case is set; written out below;
  (b) transformers' DebertaV2Tokenizer (in transformers 5 a `tokenizers`
      pipeline, the only one there is);
  (c) transformers' DebertaV2Converter, which built transformers 4's
      DebertaV2TokenizerFast from the same file.

v1 (GPT-2 byte-level BPE): vocab.json + merges.txt trained here with
`tokenizers`' ByteLevelBPETokenizer, laid out like microsoft/deberta-base
([PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3 first, [MASK] last), compared with
transformers' DebertaTokenizer and with transformers' DebertaConverter (which
built transformers 4's DebertaTokenizerFast).

Where minibert and a reference differ on purpose, a test says so and checks
the difference. Every input is made here; nothing touches the network.
"""

import io
import json
import random
import shutil
import types
import unicodedata

import pytest
import torch

from minibert.support import MiniBertError
from minibert.support.protobuf import read_sentencepiece_model
from minibert.tokenization import (DEBERTA_SPECIAL_TOKENS, Tokenizer, load_tokenizer, run_split_on_punc,
                                   sentencepiece_words, truncate_seq_pair)

CORPUS = """
DeBERTa improves BERT and RoBERTa with disentangled attention and an enhanced mask decoder.
Each word is represented by two vectors, one for its content and one for its relative position.
The attention weight between two words is computed from their contents and their relative positions.
In pre-training the model predicts the masked tokens; the decoder sees the absolute positions as well.
DeBERTaV3 replaces masked language modelling with replaced token detection, as ELECTRA does.
The generator and the discriminator share their embeddings, but the gradients are disentangled.
Students ask: why does the tokenizer split "unbelievably" into three pieces, but keep "the" whole?
Frequent strings get their own pieces; rare ones are spelled out from smaller pieces, or letters.
The large model has 24 layers, 1024 hidden units and 16 heads: about 350M parameters in total.
In 2021 it was the first single model to beat the human baseline on SuperGLUE (90.3 versus 89.8).
Prices went up from £5 to €7.50, i.e. by 50% -- a big jump!!! Really?! Yes... (see page 42).
Café, naïve, résumé, Ångström, Übermensch and façade keep their accents in a cased model.
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG; the quick brown fox jumps over the lazy dog.
中文字符很常见，日本語のひらがなとカタカナも。한국어 문장도 있습니다. Ελληνικά γράμματα.
Emoji such as 😀, 👍 and 🎉 appear in tweets; URLs like https://example.org/a?b=1 do too.
She said: "Don't panic," and he replied, 'It's fine.' They're ready; we've won; I'd agree.
"""

# The edge cases: whitespace, casing, accents, CJK, emoji, long words, punctuation. No literal
# special tokens here (see SPECIAL_TEXTS).
TEXTS = [
    "",
    " ",
    "     ",
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX",
    "tHe QuIcK bRoWn",
    "Café naïve résumé Ångström Übermensch façade",
    "CAFÉ NAÏVE ÅNGSTRÖM",
    "e\u0301te\u0301 (decomposed accents)",
    "中文字符很常见 日本語のひらがなとカタカナも",
    "한국어 문장도 있습니다 Ελληνικά γράμματα",
    "emoji 😀 👍🏽 🎉 🇩🇪 ok",
    "😀😀😀",
    "a" * 300,
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "!!!???...,,,;;;:::---((([[[{{{}}}]]])))",
    "Really?! Yes... (see page 42) -- \"quoted\" 'single' `back`",
    "   leading spaces",
    "trailing spaces   ",
    "  both  ends  and   inner   runs  ",
    "tab\there\nnewline\r\ncarriage",
    "Prices went up from £5 to €7.50, i.e. by 50%",
    "https://example.org/a?b=1&c=d#frag",
    "Don't panic, it's fine; they're ready; we've won; I'd agree",
    "numbers 1,024 3.14159 2021 90.3",
]
# Literal special tokens typed in the text: matched whole, as transformers does.
SPECIAL_TEXTS = [
    "[MASK]",
    "the [MASK] sat on the [MASK].",
    "hello[MASK]world",
    "[MASK][MASK] two masks",
    "   [MASK]   spaces around   ",
    "[mask] and [Mask] stay text",
    "[CLS] [SEP] [PAD] [UNK] are special too",
]
# Text that SentencePiece's compiled NFKC table changes (compatibility
# characters, other spaces, invisible characters).
NFKC_TEXTS = [
    "ﬁne ① ２０２１ ㍿ ™ ½",
    "中文字符很常见，日本語。",  # full-width comma and full stop
    "ideographic\u3000space and\u00a0nbsp and\u2009thin",
    "zero\u200bwidth",
    "x \u200b",
]


def random_texts(seed, count):
    rng = random.Random(seed)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + list(",.!?;:'\"()-%     ")
                + ["é", "ñ", "Å", "ü", "中", "文", "😀", "\t", "\n", "\u00a0", "\u3000", "①", "ﬁ", "\u200b",
                   "e\u0301", "the ", "model ", "ΣΟΦΟΣ"])
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(count)]


def training_lines():
    rng = random.Random(0)
    words = CORPUS.split()
    lines = []
    for _ in range(2000):
        start = rng.randrange(len(words))
        lines.append(" ".join(words[start:start + rng.randint(4, 16)]))
    return lines


# ---------------------------------------------------------------------------
# Fixtures: a tiny DeBERTa-v3 folder and a tiny DeBERTa v1 folder
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def v3_folder(tmp_path_factory):
    """spm.model trained like DeBERTa-v3's (unigram; pad/bos/eos/unk renamed
    [PAD] [CLS] [SEP] [UNK] at ids 0..3), with the hub's other small files."""
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece trains the test's DeBERTa-v3 vocabulary")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()), model_writer=model, vocab_size=300, model_type="unigram",
        pad_id=0, bos_id=1, eos_id=2, unk_id=3, pad_piece="[PAD]", bos_piece="[CLS]", eos_piece="[SEP]",
        unk_piece="[UNK]", minloglevel=2)
    folder = tmp_path_factory.mktemp("deberta-v3-tiny")
    (folder / "spm.model").write_bytes(model.getvalue())
    (folder / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "vocab_size": 400}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "vocab_type": "spm"}))
    (folder / "added_tokens.json").write_text(json.dumps({"[MASK]": 300}))
    return folder


@pytest.fixture(scope="module")
def sp(v3_folder):
    spm = pytest.importorskip("sentencepiece")
    return spm.SentencePieceProcessor(model_file=str(v3_folder / "spm.model"))


@pytest.fixture(scope="module")
def v1_folder(tmp_path_factory):
    """vocab.json + merges.txt of a byte-level BPE with DeBERTa v1's layout:
    [PAD] [CLS] [SEP] [UNK] first, [MASK] after the last learned token."""
    from tokenizers import ByteLevelBPETokenizer
    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator(training_lines(), vocab_size=500, min_frequency=2, show_progress=False,
                                special_tokens=DEBERTA_SPECIAL_TOKENS[:4])
    folder = tmp_path_factory.mktemp("deberta-v1-tiny")
    trainer.save_model(str(folder))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    vocab["[MASK]"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "config.json").write_text(json.dumps({"model_type": "deberta", "vocab_size": len(vocab)}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False, "vocab_type": "gpt2"}))
    return folder


# ---------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------

def is_punctuation(char):
    """microsoft/DeBERTa spm_tokenizer.py `_is_punctuation`."""
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def split_on_punctuation(text):
    """microsoft/DeBERTa spm_tokenizer.py `_run_split_on_punc`."""
    words, start_new_word = [], True
    for char in text:
        if is_punctuation(char):
            words.append(char)
            start_new_word = True
        else:
            if start_new_word:
                words.append("")
            start_new_word = False
            words[-1] += char
    return words


def official_v2_ids(sp, text, lower=False, split_by_punct=False):
    """DeBERTa's SPMTokenizer (with transformers' lower-casing): ids without [CLS]/[SEP]."""
    if lower:
        text = text.lower()
    words = split_on_punctuation(text) if split_by_punct else [text]
    return [sp.piece_to_id(piece) for word in words for piece in sp.encode_as_pieces(word)]


def transformers_v2(transformers, v3_folder, sp, lower=False, split_by_punct=False):
    """transformers' DebertaV2Tokenizer for the test model."""
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    try:  # transformers >= 5: a `tokenizers` pipeline built from the pieces
        return transformers.DebertaV2Tokenizer(vocab=vocab, unk_id=3, do_lower_case=lower,
                                               split_by_punct=split_by_punct)
    except TypeError:  # transformers 4: the sentencepiece-based tokenizer reads the file
        return transformers.DebertaV2Tokenizer(str(v3_folder / "spm.model"), do_lower_case=lower,
                                               split_by_punct=split_by_punct)


def transformers4_fast_v2(transformers, v3_folder, lower=False, split_by_punct=False):
    """transformers' DebertaV2Converter (how transformers 4 built
    DebertaV2TokenizerFast from spm.model), given the file's contents directly:
    the converter's own reader needs the `protobuf` package."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import DebertaV2Converter
    model = read_sentencepiece_model((v3_folder / "spm.model").read_bytes())
    pieces = [types.SimpleNamespace(piece=p, score=s, type=t) for p, s, t in model.pieces]
    vocab = {p.piece: i for i, p in enumerate(pieces)}
    converter = object.__new__(DebertaV2Converter)
    converter.original_tokenizer = types.SimpleNamespace(
        do_lower_case=lower, split_by_punct=split_by_punct, add_prefix_space=True, legacy=True,
        convert_tokens_to_ids=vocab.__getitem__)
    converter.proto = types.SimpleNamespace(
        pieces=pieces, trainer_spec=types.SimpleNamespace(model_type=1, unk_id=model.unk_id),
        normalizer_spec=types.SimpleNamespace(precompiled_charsmap=model.precompiled_charsmap))
    fast = converter.converted()
    fast.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in DEBERTA_SPECIAL_TOKENS])
    return fast


def transformers_v1(transformers, v1_folder):
    """transformers' DebertaTokenizer, its [MASK] taking the spaces before it
    as the class defines it (transformers 5.x's loading drops that flag, see
    test_v1_mask_token_takes_the_space_before_it)."""
    from tokenizers import AddedToken
    mask = AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)
    return transformers.DebertaTokenizer.from_pretrained(str(v1_folder), mask_token=mask)


def transformers4_fast_v1(transformers, v1_folder):
    """transformers' DebertaConverter: how transformers 4 built
    DebertaTokenizerFast, with [CLS] A [SEP] B [SEP] and token types 0/1."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import DebertaConverter
    vocab = json.loads((v1_folder / "vocab.json").read_text(encoding="utf-8"))
    lines = (v1_folder / "merges.txt").read_text(encoding="utf-8").split("\n")[1:]
    merges = [tuple(line.split(" ")) for line in lines if line]
    original = types.SimpleNamespace(encoder=vocab, bpe_ranks={m: i for i, m in enumerate(merges)},
                                     add_prefix_space=False, convert_tokens_to_ids=vocab.__getitem__)
    fast = DebertaConverter(original).converted()
    fast.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=t == "[MASK]")
                             for t in DEBERTA_SPECIAL_TOKENS])
    return fast


def transformers_is_5(transformers):
    return int(transformers.__version__.split(".")[0]) >= 5


# ---------------------------------------------------------------------------
# DeBERTa-v2/v3
# ---------------------------------------------------------------------------

def test_v2_folder_is_recognised_and_ids_follow_deberta(v3_folder, sp, tmp_path):
    ours = load_tokenizer(v3_folder)
    assert (ours.kind, ours.model_type, ours.do_lower_case, ours.split_by_punct) == (
        "sentencepiece", "deberta-v2", False, False)
    assert (ours.pad_id, ours.cls_id, ours.sep_id, ours.unk_id) == (0, 1, 2, 3)
    assert [sp.id_to_piece(i) for i in range(4)] == ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]
    # [MASK] is appended after the last piece (128000 in the released models).
    assert ours.mask_id == sp.get_piece_size() == 300 and ours.vocab_size == 301
    assert ours.convert_ids_to_tokens(300) == "[MASK]" and ours.special_tokens["mask"] == "[MASK]"
    # Either sign is enough: config.json alone, tokenizer_config.json alone, or a path to the file.
    for keep in ("config.json", "tokenizer_config.json"):
        folder = tmp_path / f"only-{keep}"
        folder.mkdir()
        shutil.copy(v3_folder / "spm.model", folder / "spm.model")
        if keep == "config.json":
            shutil.copy(v3_folder / keep, folder / keep)
        else:
            (folder / keep).write_text(json.dumps({"tokenizer_class": "DebertaV2Tokenizer"}))
        assert load_tokenizer(folder).model_type == "deberta-v2"
    assert load_tokenizer(v3_folder / "spm.model").encode("the model").ids == ours.encode("the model").ids
    assert ours.decode(ours.encode("  The model,  Café [MASK] 中文 ").ids) == "The model, Café 中文"


@pytest.mark.parametrize("lower,split_by_punct", [(False, False), (True, False), (False, True), (True, True)])
def test_v2_ids_equal_the_official_sentencepiece_recipe(v3_folder, sp, lower, split_by_punct):
    ours = Tokenizer.deberta_v2(v3_folder / "spm.model", do_lower_case=lower, split_by_punct=split_by_punct)
    for text in TEXTS + NFKC_TEXTS + random_texts(1, 300):
        expected = official_v2_ids(sp, text, lower, split_by_punct)
        if lower and "Σ" in text:  # Python lower-cases a word-final Σ to ς, `tokenizers` to σ
            continue
        assert ours.encode(text).ids == [1] + expected + [2], repr(text)
    assert (ours.tokenize("THE") == ["▁the"]) == lower


@pytest.mark.parametrize("split_by_punct", [False, True])
def test_the_lessons_deberta_rules_are_the_official_ones_and_the_pipelines(v3_folder, split_by_punct):
    """tokenization.py's run_split_on_punc is the official _run_split_on_punc,
    and the pipeline cuts the (normalized) text into the words that
    sentencepiece_words names, "▁" before each."""
    ours = Tokenizer.deberta_v2(v3_folder / "spm.model", split_by_punct=split_by_punct)
    for text in TEXTS + random_texts(2, 300):
        assert run_split_on_punc(text) == split_on_punctuation(text), repr(text)
        normalized = ours.backend.normalizer.normalize_str(text)
        assert [word for word, _ in ours.backend.pre_tokenizer.pre_tokenize_str(normalized)] == \
            sentencepiece_words(normalized, split_by_punct), repr(text)
    assert sentencepiece_words("a, b", split_by_punct=True) == ["▁a", "▁,", "▁b"]
    assert sentencepiece_words("a, b") == ["▁a,", "▁b"]


def test_v2_ids_equal_transformers(transformers, v3_folder, sp):
    for lower in (False, True):
        ours = Tokenizer.deberta_v2(v3_folder / "spm.model", do_lower_case=lower)
        theirs = transformers_v2(transformers, v3_folder, sp, lower=lower)
        assert theirs.mask_token_id == ours.mask_id and theirs.cls_token_id == ours.cls_id
        for text in TEXTS + SPECIAL_TEXTS:
            assert ours.encode(text).ids == theirs(text).input_ids, repr(text)
        for a, b in zip(TEXTS, reversed(TEXTS)):
            mine, reference = ours.encode(a, b), theirs(a, b, return_token_type_ids=True)
            assert mine.ids == reference.input_ids, (a, b)
            assert mine.token_type_ids == reference.token_type_ids, (a, b)
    # A typed [MASK] is one token and the text around it is encoded on its own;
    # "[mask]" is ordinary text, even for an uncased tokenizer.
    cased = Tokenizer.deberta_v2(v3_folder / "spm.model")
    assert cased.tokenize("the [MASK] sat") == cased.tokenize("the") + ["[MASK]"] + cased.tokenize("sat")
    assert ours.encode("[mask]").ids == [1] + official_v2_ids(sp, "[mask]", lower=True) + [2]


def test_v2_ids_equal_transformers4_fast_converter(transformers, v3_folder):
    for lower in (False, True):
        ours = Tokenizer.deberta_v2(v3_folder / "spm.model", do_lower_case=lower)
        fast = transformers4_fast_v2(transformers, v3_folder, lower=lower)
        for text in TEXTS + SPECIAL_TEXTS + NFKC_TEXTS[:3]:
            assert ours.encode(text).ids == fast.encode(text).ids, repr(text)
        pair = fast.encode("the model", "two words")
        assert ours.encode("the model", "two words").token_type_ids == pair.type_ids


def test_v2_documented_divergences(transformers, v3_folder, sp):
    ours = Tokenizer.deberta_v2(v3_folder / "spm.model")
    # 1. NFKC: SentencePiece (and so the checkpoints) apply the model's compiled
    #    table; transformers 5's DebertaV2Tokenizer does not ("①" stays "①",
    #    an unknown piece, where SentencePiece reads "1").
    if transformers_is_5(transformers):
        theirs = transformers_v2(transformers, v3_folder, sp)
        for text in NFKC_TEXTS[:3]:
            assert ours.encode(text).ids == [1] + official_v2_ids(sp, text) + [2]
            assert ours.encode(text).ids != theirs(text).input_ids, repr(text)
    # 2. transformers 4's converter stripped the text before the table, so a
    #    character the table deletes at the end left a trailing "▁".
    fast = transformers4_fast_v2(transformers, v3_folder)
    assert ours.tokenize("x \u200b") == ["▁", "x"] == sp.encode_as_pieces("x \u200b")
    assert fast.encode("x \u200b", add_special_tokens=False).tokens == ["▁", "x", "▁"]
    # 3. split_by_punct: the official code encodes each part on its own, so a
    #    space before punctuation vanishes; transformers keeps a lone "▁".
    ours = Tokenizer.deberta_v2(v3_folder / "spm.model", split_by_punct=True)
    theirs = transformers_v2(transformers, v3_folder, sp, split_by_punct=True)
    assert ours.encode("a , b").ids == [1] + official_v2_ids(sp, "a , b", split_by_punct=True) + [2]
    assert ours.tokenize("a , b") == ours.tokenize("a") + ours.tokenize(",") + ours.tokenize("b")
    assert theirs.tokenize("a , b") == ours.tokenize("a") + ["▁"] + ours.tokenize(",") + ours.tokenize("b")
    # 4. Literal special tokens: the official SPMTokenizer would spell "[MASK]"
    #    out in pieces (microsoft/DeBERTa #86); we match it whole.
    assert ours.encode("[MASK]").ids == [1, 300, 2] != [1] + official_v2_ids(sp, "[MASK]") + [2]
    # 5. Lower-casing: `tokenizers` lower-cases one character at a time, so a
    #    word-final "Σ" becomes "σ"; Python's str.lower() gives "ς".
    uncased = Tokenizer.deberta_v2(v3_folder / "spm.model", do_lower_case=True)
    assert uncased.backend.normalizer.normalize_str("ΣΟΦΟΣ") == "σοφοσ" != "ΣΟΦΟΣ".lower()


# ---------------------------------------------------------------------------
# DeBERTa v1
# ---------------------------------------------------------------------------

def test_v1_folder_is_recognised_and_ids_follow_deberta(v1_folder):
    ours = load_tokenizer(v1_folder)
    vocab = json.loads((v1_folder / "vocab.json").read_text(encoding="utf-8"))
    assert (ours.kind, ours.model_type, ours.do_lower_case) == ("byte-level-bpe", "deberta", False)
    assert (ours.pad_id, ours.cls_id, ours.sep_id, ours.unk_id) == (0, 1, 2, 3)
    assert ours.mask_id == vocab["[MASK]"] == len(vocab) - 1 and ours.vocab_size == len(vocab)
    assert load_tokenizer(v1_folder / "vocab.json").encode("the model").ids == ours.encode("the model").ids
    assert load_tokenizer(v1_folder / "merges.txt").vocab_size == len(vocab)
    direct = Tokenizer.deberta_v1(v1_folder / "vocab.json", v1_folder / "merges.txt")
    assert direct.encode("the model", "two").ids == ours.encode("the model", "two").ids
    # No space is added in front: "the" and " the" differ, as in GPT-2 and RoBERTa.
    assert ours.tokenize("the") == ["the"] and ours.tokenize(" the") == ["Ġthe"]


def test_v1_ids_equal_transformers(transformers, v1_folder):
    ours = load_tokenizer(v1_folder)
    theirs = transformers_v1(transformers, v1_folder)
    fast4 = transformers4_fast_v1(transformers, v1_folder)
    assert (theirs.cls_token_id, theirs.sep_token_id, theirs.pad_token_id, theirs.unk_token_id,
            theirs.mask_token_id) == (ours.cls_id, ours.sep_id, ours.pad_id, ours.unk_id, ours.mask_id)
    for text in TEXTS + SPECIAL_TEXTS + NFKC_TEXTS + random_texts(2, 300):
        assert ours.encode(text).ids == theirs(text).input_ids == fast4.encode(text).ids, repr(text)
    assert ours.decode(ours.encode("Café naïve 😀 [MASK] x").ids) == "Café naïve 😀 x"  # [MASK] skipped


def test_v1_pairs_are_cls_a_sep_b_sep_with_token_types(transformers, v1_folder):
    """[CLS] A [SEP] B [SEP], types 0 then 1, as the official task code and
    transformers 4 (slow and fast) build pairs. transformers 5.x's
    DebertaTokenizer builds RoBERTa's [CLS] A [SEP] [SEP] B [SEP] instead."""
    ours = load_tokenizer(v1_folder)
    fast4 = transformers4_fast_v1(transformers, v1_folder)
    for a, b in zip(TEXTS, reversed(TEXTS)):
        if not b:  # minibert: an empty text_pair means no pair (the converter would add a second [SEP])
            assert ours.encode(a, b).ids == ours.encode(a).ids
            continue
        mine, reference = ours.encode(a, b), fast4.encode(a, b)
        assert mine.ids == reference.ids and mine.token_type_ids == reference.type_ids, (a, b)
    mine = ours.encode("the model", "two words")
    a, b = ours.tokenize("the model"), ours.tokenize("two words")
    assert mine.ids == [1] + ours.convert_tokens_to_ids(a) + [2] + ours.convert_tokens_to_ids(b) + [2]
    assert mine.token_type_ids == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    if transformers_is_5(transformers):
        theirs = transformers_v1(transformers, v1_folder)("the model", "two words", return_token_type_ids=True)
        assert theirs.input_ids == mine.ids[:len(a) + 2] + [2] + mine.ids[len(a) + 2:]
        assert set(theirs.token_type_ids) == {0}


def test_v1_mask_token_takes_the_space_before_it(transformers, v1_folder):
    ours = load_tokenizer(v1_folder)
    the, sat = ours.tokenize("the"), ours.tokenize(" sat")
    assert ours.tokenize("the [MASK] sat") == the + ["[MASK]"] + sat
    assert ours.tokenize("the   [MASK]") == the + ["[MASK]"]
    assert ours.tokenize("[MASK] sat") == ["[MASK]"] + sat  # the space after it stays with "sat"
    # transformers 5.x, loading the folder as it is, drops the lstrip its
    # DebertaTokenizer.mask_token setter asks for, and keeps the space as "Ġ".
    if transformers_is_5(transformers):
        plain = transformers.DebertaTokenizer.from_pretrained(str(v1_folder))
        assert plain.tokenize("the [MASK] sat") == the + ["Ġ", "[MASK]"] + sat


def test_offsets_equal_transformers(both):
    """Character offsets into the original text, as transformers gives them.
    v1: a token's span includes the space it starts with ("Ġthe" -> " the").
    v2: spans may differ in the spaces they cover. SentencePiece's clean-up
    removes the spaces at the start of the text (or of the text after a
    special token) and all but one space of a run before "▁" is added: the
    "▁word" after them covers "word" here, " word" in transformers, and a lone
    "▁" may cover the word's first character here, a space there."""
    ours, theirs = both

    def without_spaces(text, start, end):
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        return start, end

    for text in TEXTS + SPECIAL_TEXTS:
        encoding = ours.encode(text)
        reference = [tuple(o) for o in theirs(text, return_offsets_mapping=True).offset_mapping]
        assert len(encoding.offsets) == len(reference), repr(text)
        for token, mine, (start, end) in zip(encoding.tokens, encoding.offsets, reference):
            if mine == (start, end):
                continue
            assert ours.model_type == "deberta-v2", (text, token, mine, (start, end))
            if token == "▁":  # together they cover spaces and at most one more character
                low, high = min(mine[0], start), max(mine[1], end)
                assert text[low:high - 1].isspace() or high - low == 1, (text, token, mine, (start, end))
            else:
                assert without_spaces(text, *mine) == without_spaces(text, start, end), (text, token)
    text = "  Café naïve, the [MASK] model"
    encoding = ours.encode(text)
    spans = [text[start:end] for start, end in encoding.offsets]
    if ours.model_type == "deberta":  # [MASK] took the space before it
        assert encoding.tokens[-4:] == ["Ġthe", "[MASK]", "Ġmodel", "[SEP]"]
        assert spans[-4:] == [" the", " [MASK]", " model", ""]
    else:  # the space after [MASK] starts a new text, and is cleaned away
        assert encoding.tokens[-4:] == ["▁the", "[MASK]", "▁model", "[SEP]"]
        assert spans[-4:] == [" the", "[MASK]", "model", ""]


# ---------------------------------------------------------------------------
# Both: batches, truncation, saving, errors
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module", params=["v2", "v1"])
def both(request, transformers):
    """(ours, transformers' tokenizer) for either version."""
    if request.param == "v2":
        folder = request.getfixturevalue("v3_folder")
        return load_tokenizer(folder), transformers_v2(transformers, folder, request.getfixturevalue("sp"))
    folder = request.getfixturevalue("v1_folder")
    return load_tokenizer(folder), transformers_v1(transformers, folder)


def test_batch_encode_matches_transformers_padding(both):
    ours, theirs = both
    texts = TEXTS + SPECIAL_TEXTS
    batch = ours.batch_encode(texts)
    reference = theirs(texts, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], reference["input_ids"])
    assert torch.equal(batch["attention_mask"], reference["attention_mask"])
    assert torch.equal(batch["token_type_ids"], torch.zeros_like(batch["input_ids"]))
    assert batch["input_ids"][0].tolist()[:3] == [1, 2, 0]  # "" -> [CLS] [SEP] [PAD] ...
    assert [e.ids for e in ours.encode_many(texts)] == [ours.encode(t).ids for t in texts]


def test_pairs_with_truncation(both, transformers, request):
    """max_length counts [CLS] and both [SEP]. Where one text is short, or the
    budget is even, minibert and transformers cut the same tokens; where both
    are long and the budget is odd, minibert keeps BERT's truncate_seq_pair
    (the first text keeps the odd token), `tokenizers` gives it to the second."""
    ours, theirs = both
    if ours.model_type == "deberta" and transformers_is_5(transformers):
        # transformers 5.x's DebertaTokenizer pairs are RoBERTa's; compare with its 4.x pipeline.
        fast4 = transformers4_fast_v1(transformers, request.getfixturevalue("v1_folder"))

        def theirs(a, b, max_length):
            fast4.enable_truncation(max_length, strategy="longest_first")
            encoding = fast4.encode(a, b)
            return encoding.ids, encoding.type_ids
    else:
        hf = theirs

        def theirs(a, b, max_length):
            encoding = hf(a, b, truncation=True, max_length=max_length, return_token_type_ids=True)
            return encoding.input_ids, encoding.token_type_ids

    long_a = "The attention weight between two words is computed from their contents"
    long_b = "Frequent strings get their own pieces; rare ones are spelled out"
    short = "Yes!"
    len_a, len_b, len_short = (len(ours.tokenize(t)) for t in (long_a, long_b, short))
    assert min(len_a, len_b) > 10 > len_short
    for a, b, max_length in [(long_a, short, 12), (short, long_b, 9), (long_a, long_b, 17), (long_a, long_b, 300),
                             (short, "x", 3)]:
        mine = ours.encode(a, b, max_length=max_length)
        assert (mine.ids, mine.token_type_ids) == theirs(a, b, max_length), (a, b, max_length)
        assert len(mine.ids) == min(max_length, len(ours.encode(a, b).ids))
    mine = ours.encode(long_a, long_b, max_length=17)  # 14 tokens for the texts
    keep_a, keep_b = truncate_seq_pair(len_a, len_b, 14)
    assert (keep_a, keep_b) == (7, 7)
    assert mine.token_type_ids == [0] * (keep_a + 2) + [1] * (keep_b + 1)
    mine = ours.encode(long_a, long_b, max_length=18)  # 15: the odd token goes to the first text
    assert mine.token_type_ids == [0] * (8 + 2) + [1] * (7 + 1)
    assert theirs(long_a, long_b, 18)[1] == [0] * (7 + 2) + [1] * (8 + 1)

    batch = ours.batch_encode([long_a, short], [long_b, ""], max_length=15)
    short_length = len_short + 2  # an empty text_pair means no pair
    assert batch["input_ids"].shape == (2, 15)
    assert batch["attention_mask"][1].tolist() == [1] * short_length + [0] * (15 - short_length)
    assert batch["input_ids"][1, short_length:].tolist() == [0] * (15 - short_length)  # [PAD] = 0
    assert batch["token_type_ids"][0].tolist() == ours.encode(long_a, long_b, max_length=15).token_type_ids


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_save_and_reload(version, request, tmp_path, transformers):
    folder = request.getfixturevalue("v3_folder" if version == "v2" else "v1_folder")
    ours = load_tokenizer(folder)
    ours.save(tmp_path / "saved")
    reloaded = load_tokenizer(tmp_path / "saved")
    assert (reloaded.model_type, reloaded.vocab_size, reloaded.mask_id) == (ours.model_type, ours.vocab_size,
                                                                             ours.mask_id)
    for text in TEXTS + SPECIAL_TEXTS:
        assert reloaded.encode(text).ids == ours.encode(text).ids, repr(text)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    for text in TEXTS[:12]:
        assert theirs(text).input_ids == ours.encode(text).ids, repr(text)


def test_lower_case_and_split_by_punct_come_from_tokenizer_config(v3_folder, sp, tmp_path):
    folder = tmp_path / "uncased"
    folder.mkdir()
    shutil.copy(v3_folder / "spm.model", folder / "spm.model")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "DebertaV2Tokenizer", "do_lower_case": True, "split_by_punct": True}))
    ours = load_tokenizer(folder)
    assert ours.do_lower_case and ours.split_by_punct
    assert ours.encode("THE MODEL, OK").ids == [1] + official_v2_ids(sp, "THE MODEL, OK", True, True) + [2]
    ours.save(tmp_path / "saved")
    assert load_tokenizer(tmp_path / "saved").split_by_punct


def test_loading_errors(v3_folder, v1_folder, tmp_path):
    def expect(path, fragment):
        with pytest.raises(MiniBertError, match=fragment) as e:
            load_tokenizer(path)
        assert "\n" not in str(e.value)

    # spm.model with no DeBERTa sign is read as ALBERT's, which needs a [MASK] piece.
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(v3_folder / "spm.model", bare / "spm.model")
    expect(bare, r"no \[MASK\] piece \(ALBERT needs")
    # A DeBERTa-v2 folder whose spm.model lacks DeBERTa's pieces (ALBERT's layout).
    (bare / "config.json").write_text(json.dumps({"model_type": "deberta-v2"}))
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_lines()), model_writer=model, vocab_size=200, model_type="unigram",
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"], minloglevel=2)
    (bare / "spm.model").write_bytes(model.getvalue())
    expect(bare, r"spm.model: the SentencePiece model has no \[PAD\], \[UNK\] piece")
    # added_tokens.json that disagrees with DeBERTa's rule.
    shifted = tmp_path / "shifted"
    shutil.copytree(v3_folder, shifted)
    (shifted / "added_tokens.json").write_text(json.dumps({"[MASK]": 128000}))
    expect(shifted, r"added_tokens.json: '\[MASK\]' has id 128000 there but 300")

    # v1: one file of the pair, GPT-2's own special tokens, broken merges.
    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(v1_folder / "vocab.json", half / "vocab.json")
    expect(half, "has vocab.json but no merges.txt")
    gpt2 = tmp_path / "gpt2"
    shutil.copytree(v1_folder, gpt2)
    vocab = json.loads((v1_folder / "vocab.json").read_text(encoding="utf-8"))
    renamed = {"[PAD]": "<pad>", "[CLS]": "<s>", "[SEP]": "</s>", "[UNK]": "<unk>", "[MASK]": "<mask>"}
    (gpt2 / "vocab.json").write_text(json.dumps({renamed.get(t, t): i for t, i in vocab.items()}), encoding="utf-8")
    expect(gpt2, r"vocab.json: no \[PAD\], \[CLS\], \[SEP\], \[UNK\], \[MASK\] token")
    (gpt2 / "vocab.json").write_text(json.dumps({("not-a-byte" if t == "Ā" else t): i for t, i in vocab.items()}),
                                     encoding="utf-8")  # "Ā" is the byte symbol of byte 0
    expect(gpt2, r"1 of the 256 byte symbols are missing \(e.g. 'Ā'\)")
    broken = tmp_path / "broken"
    shutil.copytree(v1_folder, broken)
    with open(broken / "merges.txt", "a", encoding="utf-8") as f:
        f.write("a b c\n")
    expect(broken, r"merges.txt line \d+: expected two tokens separated by one space")
    (broken / "merges.txt").write_text("#version: 0.2\nzz qq\n", encoding="utf-8")
    expect(broken, "merges.txt: does not fit vocab.json")
    (broken / "vocab.json").write_text(json.dumps({"[PAD]": 0, "[CLS]": 2}), encoding="utf-8")
    expect(broken, r"ids are not 0..1, each once")


# ---------------------------------------------------------------------------
# transformers 5's folders: tokenizer.json alone (no spm.model, no vocab.json)
# ---------------------------------------------------------------------------

def transformers5_folder(tokenizer, folder, model_type):
    """`tokenizer` saved by transformers' save_pretrained, keeping only what
    transformers 5 writes, beside the model's config.json."""
    tokenizer.save_pretrained(str(folder))
    for path in folder.iterdir():
        if path.name not in ("tokenizer.json", "tokenizer_config.json"):
            path.unlink()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    return folder


def test_a_deberta_v3_tokenizer_json_alone_loads_with_transformers_ids(transformers, v3_folder, sp, tmp_path):
    folder = transformers5_folder(transformers_v2(transformers, v3_folder, sp), tmp_path / "v3", "deberta-v2")
    ours = load_tokenizer(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert (ours.kind, ours.model_type, ours.vocab_size, ours.mask_id) == ("sentencepiece", "deberta-v2", 301, 300)
    assert (ours.pad_id, ours.cls_id, ours.sep_id, ours.unk_id) == (0, 1, 2, 3)
    for text in TEXTS + SPECIAL_TEXTS + random_texts(3, 200):
        assert ours.encode(text).ids == theirs(text).input_ids, repr(text)
    for a, b in zip(TEXTS, reversed(TEXTS)):
        mine, reference = ours.encode(a, b), theirs(a, b, return_token_type_ids=True)
        assert (mine.ids, mine.token_type_ids) == (reference.input_ids, reference.token_type_ids), (a, b)
    from_spm = Tokenizer.deberta_v2(v3_folder / "spm.model")  # the same ids as from the spm.model it came from
    assert all(ours.encode(text).ids == from_spm.encode(text).ids for text in TEXTS)


def test_a_deberta_v1_tokenizer_json_alone_loads_with_transformers_ids(transformers, v1_folder, tmp_path):
    folder = transformers5_folder(transformers_v1(transformers, v1_folder), tmp_path / "v1", "deberta")
    ours = load_tokenizer(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert (ours.kind, ours.model_type) == ("byte-level-bpe", "deberta")
    assert (ours.pad_id, ours.cls_id, ours.sep_id, ours.unk_id, ours.mask_id) == (0, 1, 2, 3, ours.vocab_size - 1)
    for text in TEXTS + NFKC_TEXTS + random_texts(4, 200):
        assert ours.encode(text).ids == theirs(text).input_ids, repr(text)
    assert ours.encode(TEXTS[3]).ids == load_tokenizer(v1_folder).encode(TEXTS[3]).ids


def test_a_deberta_folder_without_its_tokenizer_names_spm_model_not_spiece_model(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "deberta-v2"}))
    with pytest.raises(MiniBertError) as info:
        load_tokenizer(tmp_path)
    assert str(info.value) == (f"{tmp_path}: no tokenizer file found (config.json says deberta-v2, whose tokenizer "
                               f"is spm.model or tokenizer.json)")
