"""minibert.support.tokenizer_files and minibert.support.protobuf:
finding a folder's tokenizer files, deciding the casing, reading the
SentencePiece protobuf; then the `tokenizers` pipelines assembled from them
(below). (Google's written-out recipe is in tests/test_tokenization.py,
DeBERTa's tokenizers in tests/test_deberta_tokenizers.py.)"""

import io
import json
import random
import shutil
import struct
import unicodedata

import pytest

from helpers import varint
from minibert.support import MiniBertError
from minibert.support.protobuf import read_model_file, read_sentencepiece_model
from minibert.support.tokenizer_files import find_tokenizer_files, read_merges, read_vocab
from minibert.tokenization import (BERT_SPECIAL_TOKENS, Tokenizer, albert_piece_score, load_tokenizer, preprocess_text,
                                   sentencepiece_words)
from test_tokenization import (TEXTS, assert_offsets_point_into, assert_transformers_loads, needs_transformers,
                               transformers)


SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_wordpiece_folder_casing_from_config_then_name_then_vocab(tmp_path):
    vocab = "".join(token + "\n" for token in SPECIALS + ["Hello", "world"])
    found = find_tokenizer_files(write(tmp_path / "plain" / "vocab.txt", vocab).parent)
    assert (found.kind, found.model_type, found.file.name, found.do_lower_case) == (
        "wordpiece", "bert", "vocab.txt", False)  # "Hello"
    assert found.vocab["Hello"] == 5
    assert find_tokenizer_files(write(tmp_path / "uncased_L-2" / "vocab.txt", vocab).parent).do_lower_case is True
    write(tmp_path / "plain" / "tokenizer_config.json", json.dumps({"do_lower_case": True}))
    assert find_tokenizer_files(tmp_path / "plain").do_lower_case is True


def test_tf_hub_assets_and_sentencepiece_are_found(tmp_path):
    write(tmp_path / "hub" / "assets" / "30k-clean.model", "")
    found = find_tokenizer_files(tmp_path / "hub")
    assert (found.kind, found.model_type, found.file.name, found.do_lower_case) == (
        "sentencepiece", "albert", "30k-clean.model", True)


def test_deberta_folders_are_recognised_by_their_files(tmp_path):
    write(tmp_path / "v3" / "spm.model", "")
    write(tmp_path / "v3" / "config.json", json.dumps({"model_type": "deberta-v2"}))
    found = find_tokenizer_files(tmp_path / "v3")
    assert (found.kind, found.model_type) == ("sentencepiece", "deberta-v2")  # as Tokenizer.kind and .model_type
    write(tmp_path / "v1" / "vocab.json", "{}")
    write(tmp_path / "v1" / "merges.txt", "")
    found = find_tokenizer_files(tmp_path / "v1")
    assert (found.kind, found.model_type, found.merges_file.name, found.do_lower_case) == (
        "byte-level-bpe", "deberta", "merges.txt", False)
    write(tmp_path / "half" / "vocab.json", "{}")
    with pytest.raises(MiniBertError, match="half: has vocab.json but no merges.txt"):
        find_tokenizer_files(tmp_path / "half")


def test_file_errors_name_the_file(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(MiniBertError, match="empty: no tokenizer file found"):
        find_tokenizer_files(tmp_path / "empty")
    with pytest.raises(MiniBertError, match=r"vocab.txt line 3: token 'a' already appears on line 1"):
        read_vocab(write(tmp_path / "vocab.txt", "a\nb\na\n"))
    with pytest.raises(MiniBertError, match=r"merges.txt line 2: expected two tokens"):
        read_merges(write(tmp_path / "merges.txt", "#version: 0.2\na b c\n"))
    with pytest.raises(MiniBertError, match=r"missing.model: cannot read the SentencePiece model"):
        read_model_file(tmp_path / "missing.model")
    with pytest.raises(MiniBertError, match="no pieces found"):
        read_sentencepiece_model(b"", source="empty.model")


@pytest.mark.parametrize("change", ["a token fewer", "a token more"])
def test_a_vocabulary_that_does_not_fit_the_model_is_one_line_in_every_reader(tmp_path, capsys, change):
    from helpers import run_script_in_process
    from minibert.tokenization import load_tokenizer
    from tiny_models import save_tiny_model
    model = tmp_path / "model"
    save_tiny_model(model)
    tokens = (model / "vocab.txt").read_text().splitlines()
    rows = len(tokens)
    tokens = tokens[:-1] if change == "a token fewer" else tokens + ["[unused99]"]
    (model / "vocab.txt").write_text("\n".join(tokens) + "\n")
    message = (f"{model}: its tokenizer has {len(tokens)} tokens but config.json says vocab_size {rows}: the "
               f"tokenizer files are not this model's")
    with pytest.raises(MiniBertError) as caught:
        load_tokenizer(model)
    assert str(caught.value).startswith(message)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nthe cat sat\t1\nthe mat\t0\n")
    for script, args in (("probe.py", ["--model", model]), ("minibert/walkthrough.py", ["the cat", "--model", model]),
                         ("finetune.py", ["--task", "sst2", "--model", model, "--train", tmp_path / "train.tsv",
                                          "--output", tmp_path / "out", "--max-seq-len", "32"])):
        code, captured = run_script_in_process(capsys, script, *args)
        assert code == 1 and captured.err.count("\n") == 1 and message in captured.err, (script, captured.err)
    assert load_tokenizer(model / "vocab.txt").vocab_size == len(tokens)      # the file alone is only a vocabulary


def test_a_vocab_txt_and_a_tokenizer_json_that_disagree_are_one_line(tmp_path):
    from tiny_models import save_tiny_model
    from minibert.tokenization import load_tokenizer
    from minibert.support.tokenizer_files import write_tokenizer_files
    save_tiny_model(tmp_path / "model")
    write_tokenizer_files(load_tokenizer(tmp_path / "model"), tmp_path / "model")   # tokenizer.json too
    assert (tmp_path / "model" / "tokenizer.json").is_file()         # both written, one vocabulary
    assert load_tokenizer(tmp_path / "model").vocab_size == len((tmp_path / "model" / "vocab.txt").read_text().split())
    tokens = (tmp_path / "model" / "vocab.txt").read_text().splitlines()
    tokens[5], tokens[6] = tokens[6], tokens[5]                         # the same size, two ids swapped
    (tmp_path / "model" / "vocab.txt").write_text("\n".join(tokens) + "\n")
    with pytest.raises(MiniBertError) as caught:
        load_tokenizer(tmp_path / "model")
    assert str(caught.value) == (f"{tmp_path / 'model'}: vocab.txt and tokenizer.json hold different vocabularies "
                                 f"({len(tokens)} and {len(tokens)} tokens; {tokens[5]!r} has id 5 in vocab.txt, 6 in "
                                 f"tokenizer.json): keep the model's own files")


# ==============================================================================
# minibert.support.tokenizer_files: the `tokenizers` pipelines it assembles,
# against the references (BERT's WordPiece pipeline against Google's written-out
# recipe is in tests/test_tokenization.py; DeBERTa's in tests/test_deberta_tokenizers.py).
#
# ALBERT (SentencePiece): a unigram model trained here with `sentencepiece` the way
# ALBERT's README trains 30k-clean.model, compared with (a) Google's recipe run on
# the real SentencePiece library: ALBERT's `preprocess_text` + `encode_pieces`
# (google-research/albert tokenization.py, as create_pretraining_data.py calls
# them), written out below, and (b) transformers' AlbertTokenizer. transformers 5
# no longer has a sentencepiece-based AlbertTokenizer, so (a) is the
# Google-faithful "slow" reference.
#
# Training a WordPiece vocabulary (Tokenizer.train_wordpiece): its special ids, and
# a round trip through save, load_tokenizer and transformers.
#
# Every input is made here; nothing touches the network.
# ==============================================================================

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
    ours = Tokenizer.albert(path)
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


def test_the_lessons_albert_rules_are_googles_and_the_pipelines(albert):
    """tokenization.py's preprocess_text is Google's (but for the documented
    quotes), and the pipeline cuts the text into the words sentencepiece_words
    names: the rules the lesson writes out are the ones that run."""
    ours, _, _ = albert
    for text in ALBERT_TEXTS + GOOGLE_ONLY_TEXTS:
        assert preprocess_text(text) == albert_preprocess_text(text), repr(text)
        assert preprocess_text(text, lower=False) == albert_preprocess_text(text, lower=False), repr(text)
        normalized = ours.backend.normalizer.normalize_str(text)
        assert [word for word, _ in ours.backend.pre_tokenizer.pre_tokenize_str(normalized)] == \
            sentencepiece_words(normalized), repr(text)
    for text in LATEX_QUOTE_TEXTS:
        assert preprocess_text(text) == albert_preprocess_text(text.replace("``", '"').replace("''", '"'))
    assert sentencepiece_words(" the  cat ") == ["▁the", "▁cat"]
    assert albert_piece_score("▁1,", -3.0) == -103.0 and albert_piece_score("9,", -1.0) == -101.0
    assert albert_piece_score("▁1", -3.0) == -3.0 and albert_piece_score(",", -1.0) == -1.0
    assert albert_piece_score("▁a,", -2.0) == -2.0
    assert not any(len(p) > 1 and p[-1] == "," and p[-2].isdigit() for p in ours.tokenize("1, 2, 3, 4, 5,"))


def test_albert_random_strings_equal_google(albert):
    """Random strings over letters, digits, commas, quotes, ALBERT's user-defined
    symbols, accents, CJK, Hangul, kana and odd whitespace. The one allowed
    difference is the documented digit-comma approximation (see tokenization.albert_piece_score)."""
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
    cased = Tokenizer.albert(path, do_lower_case=False)
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
# Saving ALBERT, and training a WordPiece vocabulary
# ---------------------------------------------------------------------------

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
    tokenizer = Tokenizer.train_wordpiece([corpus], vocab_size=300, min_frequency=2)
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
        Tokenizer.train_wordpiece([tmp_path / "missing.txt"], vocab_size=300)


# ---------------------------------------------------------------------------
# transformers 5's folders: tokenizer.json alone
# ---------------------------------------------------------------------------

def transformers5_folder(tokenizer, folder, keep=("tokenizer.json", "tokenizer_config.json")):
    """`tokenizer` saved by transformers' save_pretrained, with only what
    transformers 5 writes (an older transformers also writes spiece.model)."""
    tokenizer.save_pretrained(str(folder))
    for path in folder.iterdir():
        if path.name not in keep:
            path.unlink()
    return folder


@needs_transformers
def test_an_albert_tokenizer_json_alone_loads_with_transformers_ids(albert, tmp_path):
    _, _, hf = albert
    folder = transformers5_folder(hf, tmp_path / "albert")
    assert sorted(p.name for p in folder.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    ours = load_tokenizer(folder)
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert (ours.kind, ours.model_type, ours.vocab_size) == ("sentencepiece", "albert", 500)
    assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
        theirs.pad_token_id, theirs.unk_token_id, theirs.cls_token_id, theirs.sep_token_id, theirs.mask_token_id)
    hard = ALBERT_TEXTS + LATEX_QUOTE_TEXTS + LITERAL_SPECIALS + ["Ça coûte 1,024 €; naïve Ångström 中文字符",
                                                                 "x" * 150, "Pneumonoultramicroscopicsilicovolcano"]
    for text in hard:
        assert ours.encode(text).ids == theirs(text).input_ids, repr(text)
    for a, b in zip(hard, reversed(hard)):
        mine, reference = ours.encode(a, b), theirs(a, b, return_token_type_ids=True)
        assert (mine.ids, mine.token_type_ids) == (reference.input_ids, reference.token_type_ids), (a, b)
    from_model_file = albert[0]                                 # minibert's own from spiece.model
    assert all(ours.encode(text).ids == from_model_file.encode(text).ids for text in hard)
    ours.save(tmp_path / "saved")                               # saved by minibert, read back the same
    again = load_tokenizer(tmp_path / "saved")
    assert again.model_type == "albert" and all(again.encode(text).ids == ours.encode(text).ids for text in hard)


def test_a_tokenizer_json_of_another_kind_or_family_names_the_right_file(tmp_path):
    import json
    folder = tmp_path / "deberta"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "deberta-v2"}))
    with pytest.raises(MiniBertError, match=r"no tokenizer file found \(config.json says deberta-v2, whose "
                                            r"tokenizer is spm.model or tokenizer.json\)"):
        load_tokenizer(folder)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece", "vocab": {"[UNK]": 0}}}))
    with pytest.raises(MiniBertError, match=r"tokenizer.json: model.type is 'WordPiece'; config.json says "
                                            r"deberta-v2, whose tokenizer is Unigram \(spm.model or tokenizer.json\)"):
        load_tokenizer(folder)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": {}}}))
    (folder / "config.json").unlink()
    with pytest.raises(MiniBertError, match=r"model.type is 'WordLevel'; minibert reads the tokenizer.json of a "
                                            r"WordPiece \(BERT\), Unigram \(ALBERT, DeBERTa-v2/v3\) or BPE"):
        load_tokenizer(folder)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": {}, "merges": []}}))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "AlbertTokenizerFast"}))
    with pytest.raises(MiniBertError, match=r"a BPE tokenizer, but .*tokenizer_config.json says albert, whose "
                                            r"tokenizer is Unigram \(spiece.model\)"):
        load_tokenizer(folder)
