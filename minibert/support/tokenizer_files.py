"""Supports tokenization: the tokenizer files of a model folder. Finding them
(vocab.txt, tokenizer.json, spiece.model, spm.model, vocab.json + merges.txt,
here or in a TF-Hub module's assets/), reading and checking them, deciding the
casing from what the folder says, and writing them back in Hugging Face
layout. support/fast_tokenizers.py builds the tokenizer from what
`find_tokenizer_files` returns; nothing here cuts text into tokens.

transformers 5 saves a tokenizer as tokenizer.json alone, for every family
(no vocab.txt, spiece.model or spm.model beside it). Such a file is read by
its model type: WordPiece is BERT's (minibert reads its vocabulary and
assembles BERT's pipeline), Unigram is ALBERT's or DeBERTa-v2/v3's (the
folder's config says which), BPE is DeBERTa v1's; the last two run as the
file describes them, through `tokenizers`.
"""

import pathlib
from dataclasses import dataclass
from typing import Optional

from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write, read_json_object, write_json

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
    FastTokenizer.load (support/fast_tokenizers.py) for the rules, which are
    applied here in that order."""
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
