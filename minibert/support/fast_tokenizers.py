"""Supports tokenization.py: the `tokenizers` library's pipelines that run
the lesson's rules fast, and loading the one a folder holds. The rules
themselves (BERT's basic tokenizer and WordPiece, ALBERT's preprocess_text and
digit-comma rule, DeBERTa's split_by_punct and "▁" placement, the special
tokens, [CLS] A [SEP] B [SEP]) are the lesson's, written out in
tokenization.py; each function here takes what it needs of them as arguments
and returns the fields of a tokenization.Tokenizer (`Tokenizer(**fields)`).

Each pipeline is assembled by hand, one `tokenizers` part per step of the
lesson's recipe, so each can be printed (`print(tokenizer.backend.normalizer)`):

    text -> normalizer -> pre-tokenizer -> model -> post-processor -> ids
            (clean,       (split into     (WordPiece  ([CLS] A [SEP] B [SEP],
             lower-case,   words)          unigram     token type ids 0/1)
             strip accents)                or BPE)

  BERT          BertNormalizer, BertPreTokenizer, WordPiece (the lesson's
                basic_tokenize and wordpiece; tests/test_tokenization.py)
  ALBERT        preprocess_text as `tokenizers` parts, then SentencePiece's own
                table (`precompiled_charsmap`); whitespace split and "▁"; unigram
                with the lesson's digit-comma scores (tests/test_fast_tokenizers.py)
  DeBERTa-v2/v3 lower-case if asked, SentencePiece's table and whitespace
                clean-up; split_by_punct and "▁"; unigram
  DeBERTa v1    GPT-2's byte-level pre-tokenizer and BPE (merges.txt)
                (tests/test_deberta_tokenizers.py for both DeBERTa kinds)

Where `tokenizers` needs a workaround to give the lesson's result (a regex
class for Python's character tests, NFC after NFKD, a fixed order for the
WordPiece trainer), the reason is written next to it.
"""

import functools
import pathlib
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from minibert.support.errors import MiniBertError
from minibert.support.sentencepiece_model import SPM_CONTROL, SPM_UNKNOWN, read_model_file
from minibert.support.tokenizer_files import (check_added_tokens, check_fits_model, check_same_vocabulary,
                                              find_tokenizer_files, read_bpe_vocab, read_merges, read_tokenizer_config)

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


# =============================================================================
# BERT's WordPiece
# =============================================================================

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


# =============================================================================
# ALBERT's SentencePiece unigram
# =============================================================================

def albert_pipeline(model_file, do_lower_case, piece_score):
    """ALBERT from a SentencePiece `.model` file (spiece.model / 30k-clean.model);
    piece_score(piece, score) is the score the unigram model gives each piece
    (the lesson's digit-comma rule)."""
    path = pathlib.Path(model_file)
    data, spm = read_model_file(path)  # the protobuf file: support/sentencepiece_model.py
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


# =============================================================================
# DeBERTa-v2/v3's SentencePiece unigram, DeBERTa v1's byte-level BPE
# =============================================================================

def deberta_v2_pipeline(model_file, do_lower_case, split_by_punct, special_tokens):
    """DeBERTa-v2/v3 from its SentencePiece `spm.model` file. Every piece keeps
    its id in the file; special_tokens[:4] ([PAD] [CLS] [SEP] [UNK]) must be
    pieces, and [MASK], not a piece, is added after the last one."""
    path = pathlib.Path(model_file)
    data, spm = read_model_file(path)  # the protobuf file: support/sentencepiece_model.py
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


# =============================================================================
# transformers 5's folders: a Unigram or BPE tokenizer.json alone
# =============================================================================

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


# =============================================================================
# Loading the tokenizer a folder holds
# =============================================================================

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
        found = find_tokenizer_files(path)  # which files, which casing: support/tokenizer_files.py
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


# =============================================================================
# The parts of the pipelines: BERT's WordPiece (the post-processor is everyone's)
# =============================================================================

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


# =============================================================================
# The parts of the pipelines: ALBERT's SentencePiece unigram
# =============================================================================

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


# =============================================================================
# The parts of the pipelines: DeBERTa-v2/v3's SentencePiece unigram
# =============================================================================

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

