"""Supports tokenization: the tokenizer files of a model folder. Finding them
(vocab.txt, tokenizer.json, spiece.model, spm.model, vocab.json + merges.txt,
here or in a TF-Hub module's assets/), reading and checking them, deciding the
casing from what the folder says, and writing them back in Hugging Face
layout. The second half of this file assembles the `tokenizers` pipelines
and builds the tokenizer from what `find_tokenizer_files` returns; the
rules that cut text into tokens are tokenization.py's.

transformers 5 saves a tokenizer as tokenizer.json alone, for every family
(no vocab.txt, spiece.model or spm.model beside it). Such a file is read by
its model type: WordPiece is BERT's (minibert reads its vocabulary and
assembles BERT's pipeline), Unigram is ALBERT's or DeBERTa-v2/v3's (the
folder's config says which), BPE is DeBERTa v1's; the last two run as the
file describes them, through `tokenizers`.
"""

import functools
import pathlib
import unicodedata
from dataclasses import dataclass
from typing import Optional

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from minibert.support import MiniBertError
from minibert.support.files import atomic_write, read_json_object, write_json
from minibert.support.protobuf import SPM_CONTROL, SPM_UNKNOWN, read_model_file

# Names the tokenizer file may have, in the order find_tokenizer_file looks for them
# (inside the folder and inside its `assets/` subfolder, where TF-Hub modules keep it).
# DeBERTa folders are recognised first, by their own files (see find_tokenizer_files):
# spm.model (v2/v3), vocab.json + merges.txt (v1).
TOKENIZER_FILES = ["vocab.txt", "spiece.model", "30k-clean.model", "tokenizer.json", "spm.model", "vocab.json"]

# Each family's own tokenizer file (named in messages), and its tokenizer's
# algorithm, the model.type of a tokenizer.json. Families are named as
# config.json's model_type.
FAMILY_TOKENIZERS = {"bert": ("vocab.txt", "WordPiece"), "albert": ("spiece.model", "Unigram"),
                     "deberta-v2": ("spm.model", "Unigram"), "deberta": ("vocab.json + merges.txt", "BPE")}
# transformers' tokenizer classes (tokenizer_config.json "tokenizer_class") -> family.
TOKENIZER_CLASSES = {"BertTokenizer": "bert", "AlbertTokenizer": "albert", "DebertaV2Tokenizer": "deberta-v2",
                     "DebertaTokenizer": "deberta"}
# What tokenizer_config.json says of a family's released tokenizer besides its
# special tokens (the options of transformers' tokenizer class); write_tokenizer_files.
SAVED_TOKENIZER_OPTIONS = {
    "albert": {"tokenizer_class": "AlbertTokenizer", "keep_accents": False, "remove_space": True},
    "deberta-v2": {"tokenizer_class": "DebertaV2Tokenizer", "vocab_type": "spm", "split_by_punct": False},
    "deberta": {"tokenizer_class": "DebertaTokenizer", "vocab_type": "gpt2", "add_prefix_space": False},
}


@dataclass
class TokenizerFiles:
    """What a folder (or a file) holds: which tokenizer, from which files, with which casing."""

    kind: str                      # as Tokenizer.kind: "wordpiece", "sentencepiece" or "byte-level-bpe"
    model_type: str                # as Tokenizer.model_type: "bert", "albert", "deberta-v2" (v2/v3) or "deberta" (v1)
    file: pathlib.Path             # vocab.txt or tokenizer.json; the .model file; vocab.json (v1); or a
                                   # Unigram or BPE tokenizer.json (transformers 5), run as it is
    do_lower_case: bool
    folder: pathlib.Path           # where tokenizer_config.json and added_tokens.json would be
    split_by_punct: bool = False   # DeBERTa-v2/v3 only
    merges_file: Optional[pathlib.Path] = None  # DeBERTa v1 only
    vocab: Optional[dict] = None   # WordPiece: token -> id, already read (the casing may depend on it)
    whole_pipeline: bool = False   # a Unigram or BPE tokenizer.json: run as the file describes it


def find_tokenizer_files(path):
    """Which tokenizer the folder (or the file) `path` holds; see
    load_tokenizer_files (below) for the rules, which are applied here in
    that order."""
    folder = path if path.is_dir() else path.parent
    config = read_tokenizer_config(folder)
    lower = config.get("do_lower_case")
    # DeBERTa-v2/v3: spm.model (or the .model file named) in a folder that says
    # DeBERTa-v2 (see says_deberta_v2); without that, a .model file is ALBERT's.
    spm_file = folder / "spm.model" if path.is_dir() else path
    if spm_file.suffix == ".model" and spm_file.is_file() and says_deberta_v2(folder, config):
        return TokenizerFiles("sentencepiece", "deberta-v2", spm_file, config.get("do_lower_case", False), folder,
                              split_by_punct=config.get("split_by_punct", False))
    # DeBERTa v1: vocab.json + merges.txt (GPT-2 byte-level BPE); never lower-cased.
    if path.is_dir() or path.name in ("vocab.json", "merges.txt"):
        present = [name for name in ("vocab.json", "merges.txt") if (folder / name).is_file()]
        if len(present) == 1:
            missing = ({"vocab.json", "merges.txt"} - set(present)).pop()
            raise MiniBertError(f"{folder}: has {present[0]} but no {missing} (a byte-level BPE "
                                f"tokenizer, DeBERTa v1, needs both)")
        if present:
            return TokenizerFiles("byte-level-bpe", "deberta", folder / "vocab.json", False, folder,
                                  merges_file=folder / "merges.txt")
    file = find_tokenizer_file(path) if path.is_dir() else path
    if file.suffix == ".model":  # ALBERT: every released model is uncased
        return TokenizerFiles("sentencepiece", "albert", file, True if lower is None else lower, folder)
    if file.suffix == ".json":
        spec = read_json_object(file)
        model = spec.get("model")
        if isinstance(model, dict) and model.get("type") in ("Unigram", "BPE"):
            return tokenizer_json_files(file, model["type"], folder, config)
    vocab = vocab_from_tokenizer_json(file, folder, config) if file.suffix == ".json" else read_vocab(file)
    if lower is None and (folder / "tokenizer.json").is_file():
        lower = tokenizer_json_lowercase(read_json_object(folder / "tokenizer.json"), folder / "tokenizer.json")
    if lower is None:
        lower = casing_from_folder_name(folder.name)
    if lower is None:
        lower = casing_from_vocab(vocab)
    return TokenizerFiles("wordpiece", "bert", file, lower, folder, vocab=vocab)


def tokenizer_json_files(file, algorithm, folder, config):
    """A Unigram or BPE tokenizer.json (as transformers 5 saves ALBERT,
    DeBERTa-v2/v3 and DeBERTa v1): which family, from what the folder says
    (a Unigram file with no family named is ALBERT's, a BPE one DeBERTa v1's)."""
    family, said_by = folder_family(folder, config)
    if family is None:
        family = "albert" if algorithm == "Unigram" else "deberta"
    if FAMILY_TOKENIZERS[family][1] != algorithm:
        raise MiniBertError(f"{file}: a {algorithm} tokenizer, but {said_by.name} says {family}, whose tokenizer is "
                            f"{FAMILY_TOKENIZERS[family][1]} ({FAMILY_TOKENIZERS[family][0]})")
    kind = "sentencepiece" if algorithm == "Unigram" else "byte-level-bpe"
    return TokenizerFiles(kind, family, file, config.get("do_lower_case", family == "albert"), folder,
                          split_by_punct=config.get("split_by_punct", False), whole_pipeline=True)


def folder_family(folder, tokenizer_config):
    """(family, which file says so) from tokenizer_config.json's
    tokenizer_class or config.json's model_type; (None, None) if neither
    names one of minibert's families."""
    named = str(tokenizer_config.get("tokenizer_class", "")).removesuffix("Fast")
    if named in TOKENIZER_CLASSES:
        return TOKENIZER_CLASSES[named], folder / "tokenizer_config.json"
    config = folder / "config.json"
    model_type = read_json_object(config).get("model_type") if config.is_file() else None
    if model_type in FAMILY_TOKENIZERS:
        return model_type, config
    return None, None


def read_tokenizer_config(folder):
    """tokenizer_config.json as a dict ({} where there is none), its flags checked."""
    path = folder / "tokenizer_config.json"
    config = read_json_object(path) if path.is_file() else {}
    for flag in ("do_lower_case", "split_by_punct"):
        if flag in config and not isinstance(config[flag], bool):
            raise MiniBertError(f"{path}: {flag} must be true or false, got {config[flag]!r}")
    return config


def says_deberta_v2(folder, tokenizer_config):
    """Does the folder say it holds a DeBERTa-v2/v3 model? Either
    tokenizer_config.json names the tokenizer class or config.json has
    model_type "deberta-v2" (v3 models use the v2 code and say so too)."""
    if tokenizer_config.get("tokenizer_class") in ("DebertaV2Tokenizer", "DebertaV2TokenizerFast"):
        return True
    config = folder / "config.json"
    return config.is_file() and read_json_object(config).get("model_type") == "deberta-v2"


def check_added_tokens(folder, tokenizer):
    """Hugging Face's added_tokens.json lists tokens added after the vocabulary
    ({"[MASK]": 128000} for DeBERTa-v2/v3). minibert adds only [MASK], by
    DeBERTa's rule, so the file must agree with the ids it gave."""
    path = folder / "added_tokens.json"
    if path.is_file():
        for token, expected in read_json_object(path).items():
            actual = tokenizer.backend.token_to_id(token)
            if actual != expected:
                raise MiniBertError(f"{path}: {token!r} has id {expected!r} there but "
                                    f"{'none' if actual is None else actual} in minibert's tokenizer "
                                    f"(which adds only DeBERTa's [MASK], after the last piece)")
    return tokenizer


MODEL_CONFIG_FILES = ("config.json", "bert_config.json", "albert_config.json")


def check_fits_model(folder, tokenizer, kind):
    """A model folder's tokenizer has as many tokens as the model's embedding
    table has rows (the config's vocab_size), so that a vocabulary replaced
    by another model's is one line, not ids past the table (an IndexError)
    or, fewer tokens, ids read as other words. SentencePiece and BPE models
    may pad the table beyond their pieces (DeBERTa-v3: 128,000 pieces,
    vocab_size 128,100), so only more tokens than rows is refused there."""
    config = next((folder / name for name in MODEL_CONFIG_FILES if (folder / name).is_file()), None)
    if config is None:
        return tokenizer
    rows = read_json_object(config).get("vocab_size")
    if type(rows) is not int:            # the model's reader says what is wrong with its config
        return tokenizer
    if tokenizer.vocab_size > rows or (kind == "wordpiece" and tokenizer.vocab_size < rows):
        raise MiniBertError(f"{folder}: its tokenizer has {tokenizer.vocab_size:,} tokens but {config.name} says "
                            f"vocab_size {rows:,}: the tokenizer files are not this model's (replaced, or "
                            f"written by another run)")
    return tokenizer


def tokenizer_json_lowercase(spec, path):
    """The "lowercase" flag of a tokenizer.json's BertNormalizer, or None."""
    normalizer = spec.get("normalizer")
    if isinstance(normalizer, dict) and normalizer.get("type") == "BertNormalizer":
        lowercase = normalizer.get("lowercase")
        if lowercase is not None and not isinstance(lowercase, bool):
            raise MiniBertError(f"{path}: normalizer.lowercase = {lowercase!r}; expected true or false")
        return lowercase
    return None


def casing_from_folder_name(name):
    """Google's release folders say the casing in their names:
    uncased_L-12_H-768_A-12, wwm_uncased_..., cased_L-12_H-768_A-12,
    multi_cased_L-12_H-768_A-12 (cased); multilingual_L-12_H-768_A-12 and
    chinese_L-12_H-768_A-12 are lower-cased. Returns None if the name says nothing."""
    name = name.lower()
    if "uncased" in name:
        return True
    if "cased" in name:
        return False
    if name.startswith(("multilingual_l-", "chinese_l-")):
        return True
    return None


def casing_from_vocab(vocab):
    """An uncased vocabulary was made from lower-cased text, so none of its
    tokens (special ones like [CLS] and [unused7] aside) has an upper-case letter."""
    def is_special(token):
        return len(token) > 2 and token.startswith("[") and token.endswith("]")
    return not any(ch.isupper() for token in vocab if not is_special(token) for ch in token)


def find_tokenizer_file(folder):
    """The first of TOKENIZER_FILES (or any *.model) in the folder, else in its assets/."""
    for where in (folder, folder / "assets"):
        for name in TOKENIZER_FILES:
            if (where / name).is_file():
                return where / name
        models_found = sorted(where.glob("*.model")) if where.is_dir() else []
        if models_found:
            return models_found[0]
    family, said_by = folder_family(folder, read_tokenizer_config(folder)) if folder.is_dir() else (None, None)
    if family is not None:
        raise MiniBertError(f"{folder}: no tokenizer file found ({said_by.name} says {family}, whose tokenizer is "
                            f"{FAMILY_TOKENIZERS[family][0]} or tokenizer.json)")
    raise MiniBertError(f"{folder}: no tokenizer file found (looked for {', '.join(TOKENIZER_FILES)} "
                        f"(with merges.txt) or *.model, here and in assets/)")


def vocab_from_tokenizer_json(path, folder=None, config=None):
    """The WordPiece vocabulary (token -> id) of a Hugging Face tokenizer.json
    (a Unigram or BPE one is read by tokenizer_json_files instead)."""
    model = read_json_object(path).get("model")
    algorithm = model.get("type") if isinstance(model, dict) else None
    family, said_by = folder_family(folder, config or {}) if folder is not None else (None, None)
    if family not in (None, "bert"):
        raise MiniBertError(f"{path}: model.type is {algorithm!r}; {said_by.name} says {family}, whose tokenizer "
                            f"is {FAMILY_TOKENIZERS[family][1]} ({FAMILY_TOKENIZERS[family][0]} or tokenizer.json)")
    if algorithm != "WordPiece":
        raise MiniBertError(f"{path}: model.type is {algorithm!r}; minibert reads the tokenizer.json of a "
                            f"WordPiece (BERT), Unigram (ALBERT, DeBERTa-v2/v3) or BPE (DeBERTa v1) tokenizer")
    if not isinstance(model.get("vocab"), dict):
        raise MiniBertError(f"{path}: model.vocab is not an object of token -> id")
    return check_ids(path, model["vocab"], "model.vocab")


def check_same_vocabulary(found):
    """vocab.txt and a WordPiece tokenizer.json beside it hold one vocabulary:
    minibert reads vocab.txt and transformers tokenizer.json, so two that
    disagree would give the same folder two tokenizers. (A tokenizer.json of
    another kind is left to its readers.)"""
    vocab_file, vocab, tokenizer_json = found.file, found.vocab, found.file.parent / "tokenizer.json"
    if found.kind != "wordpiece" or vocab_file.name != "vocab.txt" or not tokenizer_json.is_file():
        return
    model = read_json_object(tokenizer_json).get("model")
    if not isinstance(model, dict) or model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        return
    other = model["vocab"]
    if other != vocab:
        token = next((t for t in vocab if other.get(t) != vocab[t]), None) or next(t for t in other if t not in vocab)
        raise MiniBertError(f"{vocab_file.parent}: vocab.txt and tokenizer.json hold different vocabularies "
                            f"({len(vocab):,} and {len(other):,} tokens; {token!r} has id {vocab.get(token)} in "
                            f"vocab.txt, {other.get(token)} in tokenizer.json): keep the model's own files")


def check_ids(path, vocab, where):
    """`vocab` (token -> id) with ids that can index the embedding matrix:
    the integers 0..V-1, each once. `where` names the field in the file."""
    bad = next((token for token, i in vocab.items() if not isinstance(i, int) or isinstance(i, bool)), None)
    if bad is not None:
        raise MiniBertError(f"{path}: {where}[{bad!r}] = {vocab[bad]!r}; expected an integer id")
    if sorted(vocab.values()) != list(range(len(vocab))):
        ids = f"{where} ids" if where else "the ids"
        raise MiniBertError(f"{path}: {ids} are not 0..{len(vocab) - 1}, each once "
                            f"(duplicate, negative or missing ids)")
    return vocab


def read_vocab(vocab_file):
    """vocab.txt -> dict token -> id (id = 0-based line number). Like Google's
    `load_vocab`, each line is stripped of surrounding whitespace."""
    path = pathlib.Path(vocab_file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MiniBertError(f"{path}: cannot read the vocabulary ({e})") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if not lines:
        raise MiniBertError(f"{path}: the vocabulary is empty (expected one WordPiece per line)")
    vocab = {}
    for index, line in enumerate(lines):
        token = line.strip()
        if token in vocab:  # Google's dict would silently drop the first id
            raise MiniBertError(f"{path} line {index + 1}: token {token!r} already appears on line "
                                f"{vocab[token] + 1} (each token must appear once)")
        vocab[token] = index
    return vocab


def read_bpe_vocab(path):
    """vocab.json -> dict token -> id; the ids must be 0..V-1, each once
    (they index the embedding matrix)."""
    return check_ids(path, read_json_object(path), "")


def read_merges(path):
    """merges.txt -> list of (left, right) pairs, best (first merged) first.
    A first line "#version: ..." is a comment, as in GPT-2's file."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise MiniBertError(f"{path}: cannot read the BPE merges ({e})") from None
    merges = []
    for number, line in enumerate(lines, start=1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        pair = line.split(" ")
        if len(pair) != 2 or not all(pair):
            raise MiniBertError(f"{path} line {number}: expected two tokens separated by one space, got {line!r}")
        merges.append(tuple(pair))
    return merges


def write_tokenizer_files(tokenizer, directory):
    """Write the tokenizer in Hugging Face layout: vocab.txt (BERT),
    spiece.model (ALBERT), spm.model (DeBERTa-v2/v3) or vocab.json +
    merges.txt (DeBERTa v1), then tokenizer_config.json and tokenizer.json,
    so that both load_tokenizer(directory) and transformers'
    AutoTokenizer.from_pretrained(directory) read it back."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokens = tokenizer.special_tokens
    config = {"do_lower_case": tokenizer.do_lower_case, "model_max_length": 512,
              "pad_token": tokens["pad"], "unk_token": tokens["unk"], "cls_token": tokens["cls"],
              "sep_token": tokens["sep"], "mask_token": tokens["mask"]}
    if tokenizer.kind == "wordpiece":
        vocab = [tokenizer.backend.id_to_token(i) for i in range(tokenizer.vocab_size)]
        with atomic_write(directory / "vocab.txt", "w") as f:
            f.write("".join(token + "\n" for token in vocab))
        config.update(tokenizer_class="BertTokenizer", tokenize_chinese_chars=True, strip_accents=None)
    else:
        for name, data in tokenizer.files.items():  # the files it was read from, unchanged
            with atomic_write(directory / name) as f:
                f.write(data)
        options = SAVED_TOKENIZER_OPTIONS[tokenizer.model_type]
        config.update({"bos_token": tokens["cls"], "eos_token": tokens["sep"]}, **options)
        if "split_by_punct" in options:          # DeBERTa v2/v3's pre-splitting: the tokenizer's own setting
            config["split_by_punct"] = tokenizer.split_by_punct
    write_json(directory / "tokenizer_config.json", config)
    with atomic_write(directory / "tokenizer.json", "w") as f:   # through Python, so a full disk is one line
        f.write(tokenizer.backend.to_str(pretty=True))


# ==============================================================================
# Supports tokenization.py: the `tokenizers` library's pipelines that run
# the lesson's rules fast, and loading the one a folder holds. The rules
# themselves (BERT's basic tokenizer and WordPiece, ALBERT's preprocess_text and
# digit-comma rule, DeBERTa's split_by_punct and "▁" placement, the special
# tokens, [CLS] A [SEP] B [SEP]) are the lesson's, written out in
# tokenization.py; each function here takes what it needs of them as arguments
# and returns the fields of a tokenization.Tokenizer (`Tokenizer(**fields)`).
#
# Each pipeline is assembled by hand, one `tokenizers` part per step of the
# lesson's recipe, so each can be printed (`print(tokenizer.backend.normalizer)`):
#
#     text -> normalizer -> pre-tokenizer -> model -> post-processor -> ids
#             (clean,       (split into     (WordPiece  ([CLS] A [SEP] B [SEP],
#              lower-case,   words)          unigram     token type ids 0/1)
#              strip accents)                or BPE)
#
#   BERT          BertNormalizer, BertPreTokenizer, WordPiece (the lesson's
#                 basic_tokenize and wordpiece; tests/test_tokenization.py)
#   ALBERT        preprocess_text as `tokenizers` parts, then SentencePiece's own
#                 table (`precompiled_charsmap`); whitespace split and "▁"; unigram
#                 with the lesson's digit-comma scores (tests/test_tokenizer_files.py)
#   DeBERTa-v2/v3 lower-case if asked, SentencePiece's table and whitespace
#                 clean-up; split_by_punct and "▁"; unigram
#   DeBERTa v1    GPT-2's byte-level pre-tokenizer and BPE (merges.txt)
#                 (tests/test_deberta_tokenizers.py for both DeBERTa kinds)
#
# Where `tokenizers` needs a workaround to give the lesson's result (a regex
# class for Python's character tests, NFC after NFKD, a fixed order for the
# WordPiece trainer), the reason is written next to it.
# ==============================================================================


def check_text(text, what):
    if not isinstance(text, str):
        raise MiniBertError(f"{what} must be a str, got {type(text).__name__}")


def check_batch(texts, text_pairs):
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise MiniBertError("batch_encode: texts must be a list of strings")
    if text_pairs is not None:
        if isinstance(text_pairs, str) or not all(isinstance(t, str) for t in text_pairs):
            raise MiniBertError("batch_encode: text_pairs must be a list of strings")
        if len(text_pairs) != len(texts):
            raise MiniBertError(f"batch_encode: got {len(texts)} texts but {len(text_pairs)} text_pairs")


def check_max_length(max_length):
    if max_length is not None and (not isinstance(max_length, int) or max_length < 3):
        raise MiniBertError(f"max_length must be an int >= 3 (room for [CLS] and two [SEP]), got {max_length!r}")


# ------------------------------------------------------------------------------
# BERT's WordPiece
# ------------------------------------------------------------------------------

def wordpiece_pipeline(vocab, do_lower_case, source, special_tokens, max_input_chars_per_word):
    """BERT from a vocabulary (dict token -> id; `source` names its file in
    messages): the basic tokenizer and WordPiece as `tokenizers` parts."""
    for token in special_tokens:
        if token not in vocab:
            raise MiniBertError(f"{source}: the vocabulary has no {token} token "
                                f"(BERT needs {', '.join(special_tokens)})")
    backend = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]",
                                                    max_input_chars_per_word=max_input_chars_per_word))
    backend.normalizer = _bert_normalizer(do_lower_case)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    # Registered special tokens are matched in the raw text before anything else
    # runs, so "[MASK]" typed by a user is one token (as in transformers).
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special_tokens])
    backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
    return dict(backend=backend, kind="wordpiece", do_lower_case=do_lower_case, pad_token="[PAD]", unk_token="[UNK]")


def trained_wordpiece_vocab(files, vocab_size, do_lower_case, min_frequency, limit_alphabet, progress,
                            special_tokens, max_input_chars_per_word):
    """A WordPiece vocabulary (token -> id) trained by `tokenizers` on text
    files: `special_tokens` first, then the "##" forms of the characters that
    continue words, the alphabet (the `limit_alphabet` most frequent
    characters) and the learned pieces.

    Deterministic: the same files and settings give the same vocabulary, in
    every run and with any number of threads. `tokenizers`' trainer alone is
    not: it numbers each "##x" piece when it first meets it while walking the
    corpus's words in hash-map order (a new random order in every run), breaks
    ties between equally frequent pairs by those numbers, and breaks ties in
    character counts at the alphabet limit by hash order too. So the alphabet
    and the "##x" pieces are worked out here first, in a fixed order, and
    handed to the trainer (as its initial alphabet and as tokens to number
    first), which leaves it nothing to number by chance."""
    files = [str(f) for f in ([files] if isinstance(files, (str, pathlib.Path)) else files)]
    for f in files:
        if not pathlib.Path(f).is_file():
            raise MiniBertError(f"train_wordpiece: training file {f} does not exist")
    if not isinstance(vocab_size, int) or vocab_size <= len(special_tokens):
        raise MiniBertError(f"train_wordpiece: vocab_size must be an int > {len(special_tokens)}, "
                            f"got {vocab_size!r}")
    backend = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]",
                                                    max_input_chars_per_word=max_input_chars_per_word))
    backend.normalizer = _bert_normalizer(do_lower_case)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    alphabet, continuations = _alphabet_of(files, backend, limit_alphabet)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=progress,
                                        special_tokens=list(special_tokens) + ["##" + c for c in continuations],
                                        initial_alphabet=alphabet, limit_alphabet=len(alphabet),
                                        continuing_subword_prefix="##")
    try:
        backend.train(files, trainer)
    except Exception as e:  # tokenizers raises plain Exceptions (its files were read above, so unlikely)
        raise MiniBertError(f"train_wordpiece: tokenizers could not train on {', '.join(files)} ({e})") from None
    # The caller builds the tokenizer from this vocabulary, exactly like one read
    # from vocab.txt (the "##x" pieces become ordinary tokens again: they were
    # "special" only to be numbered first).
    return backend.get_vocab()


# ------------------------------------------------------------------------------
# ALBERT's SentencePiece unigram
# ------------------------------------------------------------------------------

def albert_pipeline(model_file, do_lower_case, piece_score):
    """ALBERT from a SentencePiece `.model` file (spiece.model / 30k-clean.model);
    piece_score(piece, score) is the score the unigram model gives each piece
    (the lesson's digit-comma rule)."""
    path = pathlib.Path(model_file)
    data, spm = read_model_file(path)  # the protobuf file: support/protobuf.py
    vocab = {piece: i for i, (piece, _, _) in enumerate(spm.pieces)}
    for token in ["[CLS]", "[SEP]", "[MASK]"]:
        if token not in vocab:
            raise MiniBertError(f"{path}: the SentencePiece model has no {token} piece "
                                f"(ALBERT needs [CLS], [SEP], [MASK])")
    if spm.pad_id < 0:
        raise MiniBertError(f"{path}: the SentencePiece model has no padding piece (pad_id unset and no <pad>)")
    pad_token, unk_token = spm.pieces[spm.pad_id][0], spm.pieces[spm.unk_id][0]

    backend = tokenizers.Tokenizer(models.Unigram(
        [(piece, piece_score(piece, score)) for piece, score, _ in spm.pieces], unk_id=spm.unk_id))
    try:
        backend.normalizer = _albert_normalizer(do_lower_case, spm.precompiled_charsmap)
    except Exception as e:  # `tokenizers` could not parse the charsmap
        raise MiniBertError(f"{path}: normalizer_spec.precompiled_charsmap is unusable ({e})") from None
    prepend = "always" if spm.add_dummy_prefix else "never"
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend)])
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=prepend)
    # Control pieces ([CLS], [SEP], [MASK], <pad>, ...) and <unk> are special:
    # never produced by splitting text, matched whole when typed literally.
    specials = {piece for piece, _, kind in spm.pieces if kind in (SPM_CONTROL, SPM_UNKNOWN)} | {pad_token}
    backend.add_special_tokens([AddedToken(piece, special=True, normalized=False)
                                for piece, _, _ in spm.pieces if piece in specials])
    backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
    return dict(backend=backend, kind="sentencepiece", do_lower_case=do_lower_case, pad_token=pad_token,
                unk_token=unk_token, files={"spiece.model": data})


# ------------------------------------------------------------------------------
# DeBERTa-v2/v3's SentencePiece unigram, DeBERTa v1's byte-level BPE
# ------------------------------------------------------------------------------

def deberta_v2_pipeline(model_file, do_lower_case, split_by_punct, special_tokens):
    """DeBERTa-v2/v3 from its SentencePiece `spm.model` file. Every piece keeps
    its id in the file; special_tokens[:4] ([PAD] [CLS] [SEP] [UNK]) must be
    pieces, and [MASK], not a piece, is added after the last one."""
    path = pathlib.Path(model_file)
    data, spm = read_model_file(path)  # the protobuf file: support/protobuf.py
    pieces = {piece for piece, _, _ in spm.pieces}
    missing = [token for token in special_tokens[:4] if token not in pieces]
    if missing:
        raise MiniBertError(f"{path}: the SentencePiece model has no {', '.join(missing)} piece "
                            f"(DeBERTa-v2/v3 needs [PAD], [CLS], [SEP], [UNK])")
    if spm.pieces[spm.unk_id][0] != "[UNK]":
        raise MiniBertError(f"{path}: the unknown piece is {spm.pieces[spm.unk_id][0]!r}; "
                            f"DeBERTa-v2/v3 expects [UNK]")
    if split_by_punct and not spm.add_dummy_prefix:
        raise MiniBertError(f"{path}: split_by_punct needs a model with add_dummy_prefix "
                            f"(every word starts with ▁)")

    backend = tokenizers.Tokenizer(models.Unigram([(piece, score) for piece, score, _ in spm.pieces],
                                                  unk_id=spm.unk_id))
    try:
        backend.normalizer = _deberta_v2_normalizer(do_lower_case, spm)
    except Exception as e:  # `tokenizers` could not parse the charsmap
        raise MiniBertError(f"{path}: normalizer_spec.precompiled_charsmap is unusable ({e})") from None
    backend.pre_tokenizer = _deberta_v2_pre_tokenizer(split_by_punct, spm.add_dummy_prefix)
    prepend = "always" if spm.add_dummy_prefix else "never"
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=prepend)
    # Special tokens are matched whole in the raw text (transformers does the
    # same; the official SPMTokenizer would cut a typed "[MASK]" into pieces).
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in special_tokens])
    backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
    return dict(backend=backend, kind="sentencepiece", do_lower_case=do_lower_case, pad_token="[PAD]",
                unk_token="[UNK]", model_type="deberta-v2", files={"spm.model": data}, split_by_punct=split_by_punct)


def deberta_v1_pipeline(vocab_file, merges_file, special_tokens):
    """DeBERTa v1 from vocab.json + merges.txt (GPT-2's byte-level BPE); every
    special token must be in vocab.json."""
    vocab_file, merges_file = pathlib.Path(vocab_file), pathlib.Path(merges_file)
    vocab, merges = read_bpe_vocab(vocab_file), read_merges(merges_file)
    missing = [token for token in special_tokens if token not in vocab]
    if missing:
        raise MiniBertError(f"{vocab_file}: no {', '.join(missing)} token (DeBERTa v1 needs "
                            f"{', '.join(special_tokens)}; a GPT-2 or RoBERTa vocabulary has other ones)")
    # Byte-level BPE spells any text with its 256 byte symbols, so it never
    # needs an unknown token, provided all 256 are in the vocabulary.
    missing = [symbol for symbol in pre_tokenizers.ByteLevel.alphabet() if symbol not in vocab]
    if missing:
        raise MiniBertError(f"{vocab_file}: {len(missing)} of the 256 byte symbols are missing "
                            f"(e.g. {missing[0]!r}); not a byte-level BPE vocabulary")
    try:
        model = models.BPE(vocab, merges, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False)
    except Exception as e:  # e.g. a merge of tokens that are not in the vocabulary
        raise MiniBertError(f"{merges_file}: does not fit {vocab_file.name} ({e})") from None
    backend = tokenizers.Tokenizer(model)
    # GPT-2 marks a word start by the space before it ("Ġworld"); DeBERTa, like
    # RoBERTa, adds no space before the first word ("Hello" != " Hello").
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    # [MASK] takes the spaces before it (lstrip), as transformers' DebertaTokenizer
    # defines its mask token: "the [MASK]" -> "the" "[MASK]", the way a masked
    # " cat" ("Ġcat") was one token in pre-training.
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False, lstrip=token == "[MASK]")
                                for token in special_tokens])
    # Offsets are left as transformers gives them: "Ġworld" covers " world",
    # space included. (`tokenizers`' ByteLevel(trim_offsets=True) would drop
    # the space, but it miscounts after characters of several bytes.)
    backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
    files = {"vocab.json": vocab_file.read_bytes(), "merges.txt": merges_file.read_bytes()}
    return dict(backend=backend, kind="byte-level-bpe", do_lower_case=False, pad_token="[PAD]", unk_token="[UNK]",
                model_type="deberta", files=files)


# ------------------------------------------------------------------------------
# transformers 5's folders: a Unigram or BPE tokenizer.json alone
# ------------------------------------------------------------------------------

def tokenizer_json_pipeline(found):
    """ALBERT, DeBERTa-v2/v3 or DeBERTa v1 from a tokenizer.json alone (as
    transformers 5 saves them), `found` saying which (TokenizerFiles).

    The pipeline is the file's own, run by `tokenizers` as transformers 5
    runs it (AutoTokenizer is that same pipeline), so ids equal
    transformers'; only the post-processor is BERT's (ours), [CLS] A [SEP]
    B [SEP] with token types 0 then 1, which is what transformers' own
    files hold for these families too. The special tokens are tokenizer_config.json's
    (pad_token, ...), by default the family's ones, and must be in the file."""
    path = found.file
    try:
        backend = tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # `tokenizers` raises plain Exceptions for what it cannot read
        raise MiniBertError(f"{path}: `tokenizers` cannot read it ({str(e).splitlines()[0] if str(e) else e})") \
            from None
    config = read_tokenizer_config(found.folder)
    defaults = (dict(pad="<pad>", unk="<unk>") if found.model_type == "albert" else
                dict(pad="[PAD]", unk="[UNK]"))
    tokens = {name: config.get(f"{name}_token", defaults.get(name, f"[{name.upper()}]"))
              for name in ("pad", "unk", "cls", "sep", "mask")}
    for name, token in tokens.items():
        if isinstance(token, dict):  # transformers writes an AddedToken as {"content": ...}
            tokens[name] = token = token.get("content")
        if not isinstance(token, str) or backend.token_to_id(token) is None:
            raise MiniBertError(f"{path}: has no {name} token {token!r} (a {found.model_type} tokenizer needs "
                                f"its pad, unk, cls, sep and mask tokens)")
    backend.post_processor = _bert_post_processor(backend, tokens["cls"], tokens["sep"])
    return dict(backend=backend, kind=found.kind, do_lower_case=found.do_lower_case, pad_token=tokens["pad"],
                unk_token=tokens["unk"], cls_token=tokens["cls"], sep_token=tokens["sep"], mask_token=tokens["mask"],
                model_type=found.model_type, split_by_punct=found.split_by_punct)


# ------------------------------------------------------------------------------
# Loading the tokenizer a folder holds
# ------------------------------------------------------------------------------

def load_tokenizer_files(cls, name_or_path=None, *, force_download=False, revision=None, cache_dir=None,
                         token=None, local_files_only=False):
    """The tokenizer (an instance of `cls`, tokenization.Tokenizer, built by its
    constructors) of a model folder, a tokenizer file, or a model name.

    name_or_path: a folder holding vocab.txt, spiece.model, 30k-clean.model,
    assets/*.model (TF-Hub) or tokenizer.json (WordPiece; or Unigram or BPE,
    as transformers 5 saves ALBERT and DeBERTa: tokenizer_json_pipeline); or a DeBERTa
    folder: spm.model with a config.json whose model_type is "deberta-v2" or a
    tokenizer_config.json naming DebertaV2Tokenizer (v2/v3), vocab.json +
    merges.txt (v1); a path to one such file; or a name (or None for the
    bundled default model) that minibert.support.hub resolves to a folder:
    for a Hugging Face hub id, its config and tokenizer files only, never its
    weights. force_download=True downloads a hub id or Google archive again;
    revision picks a hub id's branch, tag or commit; cache_dir, token and
    local_files_only go to huggingface_hub as they are (support/hub.py).

    DeBERTa-v2/v3 reads do_lower_case and split_by_punct from
    tokenizer_config.json (both false when absent, as in the released models);
    DeBERTa v1 never lower-cases. The rules below are for BERT and ALBERT.

    Lower-casing (do_lower_case) is decided by the first of these that answers:
      1. "do_lower_case" in tokenizer_config.json in the folder;
      2. SentencePiece: True (every released ALBERT model is uncased);
      3. WordPiece: the "lowercase" flag of the BertNormalizer in the folder's
         tokenizer.json (Hugging Face layout), if there is one;
      4. WordPiece: the folder name (Google's "uncased_L-12_H-768_A-12",
         "cased_L-12_H-768_A-12", ...; see casing_from_folder_name);
      5. WordPiece: the vocabulary, uncased if no ordinary token has an
         upper-case letter (see casing_from_vocab).
    """
    if name_or_path is not None and pathlib.Path(name_or_path).exists():
        path = pathlib.Path(name_or_path)
    else:  # a model name: the hub module knows where (or whether) it is cached
        from minibert.support.hub import resolve_model_dir
        name = None if name_or_path is None else str(name_or_path)
        path = pathlib.Path(resolve_model_dir(name, force_download=force_download, revision=revision,
                                              cache_dir=cache_dir, token=token,
                                              local_files_only=local_files_only, weights=False))
    try:
        found = find_tokenizer_files(path)  # which files, which casing (above)
        if found.whole_pipeline:            # a tokenizer.json of its own (transformers 5's folders)
            tokenizer = check_added_tokens(found.folder, cls.from_tokenizer_json(found))
        elif found.model_type == "bert":
            tokenizer = cls.from_vocab(found.vocab, found.do_lower_case, source=str(found.file))
        elif found.model_type == "albert":
            tokenizer = cls.albert(found.file, do_lower_case=found.do_lower_case)
        elif found.model_type == "deberta-v2":
            tokenizer = check_added_tokens(found.folder, cls.deberta_v2(found.file, found.do_lower_case,
                                                                        found.split_by_punct))
        else:
            tokenizer = check_added_tokens(found.folder, cls.deberta_v1(found.file, found.merges_file))
        if path.is_dir():                   # a model folder: its tokenizer fits its model
            check_fits_model(found.folder, tokenizer, found.kind)
        check_same_vocabulary(found)        # and vocab.txt is what tokenizer.json says too
        return tokenizer
    except MiniBertError as e:  # if the folder is a cached download, say so and how to refresh it
        from minibert.support.hub import explain_cache_error  # imported only when needed, like resolve_model_dir
        raise explain_cache_error(e, path) from None


# ------------------------------------------------------------------------------
# The parts of the pipelines: BERT's WordPiece (the post-processor is everyone's)
# ------------------------------------------------------------------------------

def _bert_post_processor(backend, cls_token, sep_token):
    """[CLS] A [SEP] for one text, [CLS] A [SEP] B [SEP] for a pair; type ids 0 then 1."""
    return processors.TemplateProcessing(
        single=f"{cls_token}:0 $A:0 {sep_token}:0",
        pair=f"{cls_token}:0 $A:0 {sep_token}:0 $B:1 {sep_token}:1",
        special_tokens=[(cls_token, backend.token_to_id(cls_token)), (sep_token, backend.token_to_id(sep_token))])


def _bert_normalizer(do_lower_case):
    # strip_accents is tied to lower-casing, as in Google's BasicTokenizer.
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=do_lower_case, lowercase=do_lower_case)


def _alphabet_of(files, backend, limit_alphabet):
    """What the WordPiece trainer would find, in a fixed order: the alphabet
    (the `limit_alphabet` most frequent characters of the words, ties broken
    by code point, sorted) and the characters of it that continue a word
    (sorted). Words are what the trainer sees: each file normalized and
    pre-tokenized by `backend`. Files that are not UTF-8 are refused here,
    with their name."""
    from collections import Counter
    words = Counter()
    for path in files:
        try:
            text = pathlib.Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise MiniBertError(f"{path}: cannot read as UTF-8 text ({e})") from None
        # Space-separated chunks first: far fewer distinct strings to normalize
        # and pre-tokenize than the text holds (the normalizer is per character,
        # and a space is a word boundary before and after normalizing).
        for chunk, count in Counter(text.split(" ")).items():
            for word, _ in backend.pre_tokenizer.pre_tokenize_str(backend.normalizer.normalize_str(chunk)):
                words[word] += count
    frequency, continuing = Counter(), set()
    for word, count in words.items():
        for character in word:
            frequency[character] += count
        continuing.update(word[1:])
    alphabet = sorted(sorted(frequency, key=lambda c: (-frequency[c], c))[:limit_alphabet])
    return alphabet, sorted(continuing.intersection(alphabet))


# ------------------------------------------------------------------------------
# The parts of the pipelines: ALBERT's SentencePiece unigram
# ------------------------------------------------------------------------------

@functools.cache
def _regex_class(predicate_name):
    """A regex character class ("[\\x{9}-\\x{D}\\x{20}...]") of every code point
    for which a Python predicate holds, so a `tokenizers` normalizer can apply
    exactly the character test ALBERT's Python code applies."""
    predicate = {"isspace": str.isspace, "combining": unicodedata.combining}[predicate_name]
    ranges = []
    for cp in range(0x110000):
        if predicate(chr(cp)):
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
    return "[" + "".join(f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges) + "]"


def _albert_normalizer(do_lower_case, precompiled_charsmap):
    """The lesson's preprocess_text (tokenization.py) as `tokenizers` parts,
    then SentencePiece's normalization (the whitespace runs that preprocess_text
    collapses are split away by the pre-tokenizer, WhitespaceSplit).

    Python's own character tests (str.isspace, unicodedata.combining) are
    copied here as regex classes: `tokenizers`' StripAccents would also remove
    spacing marks (Mc) with combining class 0, e.g. Devanagari vowel signs,
    which ALBERT keeps.
    """
    steps = [normalizers.Replace(Regex(_regex_class("isspace")), " "),
             normalizers.Replace("``", '"'), normalizers.Replace("''", '"'),
             normalizers.NFKD(),
             normalizers.Replace(Regex(_regex_class("combining")), ""),
             # NFC re-composes what NFKD split and step 3 kept: Hangul syllables
             # and vowel signs such as Bengali "ো". SentencePiece's table composes
             # them too, but `tokenizers`' Precompiled (which applies the table one
             # grapheme cluster at a time) does not. Found by comparing with
             # SentencePiece on every code point; NFC changes nothing else there.
             normalizers.NFC()]
    if do_lower_case:
        steps.append(normalizers.Lowercase())
    if precompiled_charsmap:
        steps.append(normalizers.Precompiled(precompiled_charsmap))  # SentencePiece's own rules
    return normalizers.Sequence(steps)


# ------------------------------------------------------------------------------
# The parts of the pipelines: DeBERTa-v2/v3's SentencePiece unigram
# ------------------------------------------------------------------------------

def _deberta_v2_normalizer(do_lower_case, spm):
    """What happens to the text before it is cut into pieces.

    The official tokenizer (SPMTokenizer) hands the text to SentencePiece, so
    the rules are SentencePiece's own (sentencepiece normalizer.cc): first the
    compiled table (NFKC for the default "nmt_nfkc" rule; it also turns tabs,
    newlines and other spaces into " "), then, with remove_extra_whitespaces,
    no spaces at either end and one space for a run of them. transformers'
    DebertaV2Tokenizer lower-cases first when do_lower_case is set, so we do too.
    """
    steps = [normalizers.Lowercase()] if do_lower_case else []
    if spm.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spm.precompiled_charsmap))
    if spm.remove_extra_whitespaces:
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    return normalizers.Sequence(steps)


def _deberta_v2_pre_tokenizer(split_by_punct, add_dummy_prefix):
    """The lesson's sentencepiece_words (tokenization.py) as `tokenizers` parts:
    words -> "▁word", after split_by_punct if asked. Splitting at the spaces
    too gives the same pieces as encoding each punctuation part on its own
    (a piece never spans a space). transformers splits at the punctuation only
    and then keeps a lone "▁" for a space before punctuation ("a , b" ->
    "▁a" "▁" "▁," ...); the official code does not."""
    prepend = "always" if add_dummy_prefix else "never"
    steps = []
    if split_by_punct:
        steps += [pre_tokenizers.Punctuation(behavior="isolated"), pre_tokenizers.Split(" ", behavior="removed")]
    steps.append(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend))
    return pre_tokenizers.Sequence(steps)
