"""Supports tokenization: the fast tokenizers, each assembled from the parts
of the Hugging Face `tokenizers` library, which minibert.tokenization.Tokenizer
runs (it inherits FastTokenizer): BERT's WordPiece (from a vocab.txt, or
trained), ALBERT's SentencePiece unigram, DeBERTa-v2/v3's SentencePiece unigram
and DeBERTa v1's byte-level BPE, and loading the one a folder holds. The
written-out WordPiece, which these must equal for BERT, is the lesson, in
tokenization.py.

The fast paths are assembled by hand, one `tokenizers` part per step of the
original recipe, so that each step can be read (and printed:
`print(tokenizer.backend.normalizer)`):

    text -> normalizer -> pre-tokenizer -> model -> post-processor -> ids
            (clean,       (split into     (WordPiece  ([CLS] A [SEP] B [SEP],
             lower-case,   words)          or unigram)  token type ids 0/1)
             strip accents)

BERT (google-research/bert tokenization.py, `BasicTokenizer` + `WordpieceTokenizer`):
  * normalizer  BertNormalizer: drop control characters, map whitespace to " ",
                put spaces around CJK ideographs, and (uncased models only)
                strip accents (NFD, drop non-spacing marks) and lower-case.
                Accents are stripped only when lower-casing, as in Google's code.
  * pre-tokenizer BertPreTokenizer: split on whitespace and isolate punctuation.
  * model       WordPiece: greedy longest-match-first, "##" marks a piece that
                continues a word, a word with no full match becomes one [UNK].
  * post-processor [CLS] A [SEP] (B [SEP]), token types 0 for A, 1 for B.

ALBERT (google-research/albert tokenization.py, `preprocess_text` + SentencePiece):
  * normalizer  ALBERT's own clean-up first (collapse whitespace, NFKD + drop
                combining characters, lower-case for uncased models; plus
                transformers' `` and '' -> "), then SentencePiece's own
                normalization rules, which the `.model` file carries as a
                compiled table (`precompiled_charsmap`, NFKC for the default
                "nmt_nfkc" rule).
  * pre-tokenizer split on whitespace, prefix each word with "▁" (U+2581),
                which is how SentencePiece marks "a word starts here".
  * model       unigram: the segmentation with the highest total log-probability
                (the piece scores) under the vocabulary.
  * post-processor as for BERT.

DeBERTa-v2/v3 (microsoft/DeBERTa spm_tokenizer.py, `SPMTokenizer`: the text,
lower-cased if asked, goes straight to SentencePiece):
  * normalizer  lower-case (only if tokenizer_config.json says do_lower_case;
                the released models are cased), then SentencePiece's own rules
                (`precompiled_charsmap`, NFKC) and its whitespace clean-up (no
                spaces at either end, runs of spaces become one).
  * pre-tokenizer split_by_punct (off in the released models): every punctuation
                character on its own, as if each were encoded separately; then
                "▁" before each word, as for ALBERT.
  * model       unigram, the piece scores as they are (no digit-comma rule).
  * specials    [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3 are pieces of the spm.model;
                [MASK] is not, and is appended after the last piece (id 128000
                for the released 128000-piece models).
  * post-processor as for BERT: [CLS] A [SEP] B [SEP], token types 0 then 1.

DeBERTa v1 (microsoft/DeBERTa gpt2_tokenizer.py: GPT-2's byte-level BPE over
RoBERTa's vocabulary, ids renumbered so that [PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3,
[MASK]=50264; Hugging Face ships it as vocab.json + merges.txt):
  * normalizer  none: no lower-casing, no Unicode normalization.
  * pre-tokenizer GPT-2's regex (words with the space before them, numbers,
                punctuation runs, spaces) and every byte mapped to a printable
                character, a space becoming "Ġ"; no space is added at the start.
  * model       BPE: apply the merges of merges.txt, best-ranked first.
  * specials    in vocab.json; [MASK] also takes the spaces before it, so
                "the [MASK]" is "the" "[MASK]", as if [MASK] replaced " cat".
  * post-processor as for BERT: [CLS] A [SEP] B [SEP], token types 0 then 1.

Special tokens ([CLS], [SEP], [MASK], [PAD], [UNK]; <pad>, <unk> in ALBERT) are
never split. A user who types the literal text "[MASK]" gets the [MASK] id,
exactly as with transformers' tokenizers; "[mask]" in lower case is ordinary
text. Google's own tokenizers have no such rule and would split "[MASK]" into
"[", "mask", "]" (BERT) or into SentencePiece pieces (ALBERT).

Where Google's code, transformers and `tokenizers` disagree, the choice made here
and the reason are written next to the code; tests check them against
transformers and SentencePiece (tests/test_tokenization.py: BERT;
tests/test_fast_tokenizers.py: ALBERT and trained WordPiece vocabularies;
tests/test_deberta_tokenizers.py: DeBERTa).
"""

import functools
import pathlib
import unicodedata

import torch
import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from minibert.support.errors import MiniBertError
from minibert.support.sentencepiece_model import SPM_CONTROL, SPM_UNKNOWN, read_model_file
from minibert.support.tokenizer_files import (check_added_tokens, check_fits_model, check_same_vocabulary,
                                              find_tokenizer_files, read_bpe_vocab, read_merges, read_tokenizer_config,
                                              read_vocab, write_tokenizer_files)

# Google's WordPiece gives up on words longer than 200 characters (one [UNK]);
# transformers and `tokenizers` use 100. We follow transformers, so that ids
# agree with what Hugging Face models were trained and evaluated with. Only
# words of 101..200 characters (URLs, DNA strings, ...) are affected.
MAX_INPUT_CHARS_PER_WORD = 100

# The special tokens of every BERT vocabulary. train_wordpiece puts them at ids
# 0..4 in this order. (Google's released vocabularies use [PAD]=0,
# [unused0..98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103; ids are
# always looked up by name, never assumed.)
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# DeBERTa's special tokens (all versions), in the order of their ids in the
# released vocabularies: [PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3, and [MASK] last.
DEBERTA_SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]


class FastTokenizer:
    """What minibert.tokenization.Tokenizer inherits: a `tokenizers.Tokenizer`
    (kept in `self.backend`) with BERT's special tokens, ids <-> tokens <-> text,
    saving, and the constructors that assemble the backend (each returns an
    instance of the class it is called on, so Tokenizer.load(...) is a Tokenizer)."""

    def __init__(self, backend, kind, do_lower_case, pad_token, unk_token,
                 cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                 model_type=None, files=None, split_by_punct=False):
        self.backend = backend
        self.kind = kind                      # "wordpiece", "sentencepiece" or "byte-level-bpe"
        # The model family, named as in Hugging Face's config.json "model_type":
        # "bert", "albert", "deberta" (v1) or "deberta-v2" (v2 and v3).
        self.model_type = model_type or {"wordpiece": "bert", "sentencepiece": "albert"}[kind]
        self.do_lower_case = do_lower_case
        self.split_by_punct = split_by_punct  # DeBERTa-v2 only: punctuation split off before SentencePiece
        self.special_tokens = {"pad": pad_token, "unk": unk_token, "cls": cls_token,
                               "sep": sep_token, "mask": mask_token}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            backend.token_to_id(token) for token in (pad_token, unk_token, cls_token, sep_token, mask_token))
        self.special_ids = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        self.vocab_size = backend.get_vocab_size()
        self.files = dict(files or {})  # SentencePiece and BPE: file name -> bytes, written back by save()

    def __repr__(self):
        return (f"Tokenizer(kind={self.kind!r}, model_type={self.model_type!r}, vocab_size={self.vocab_size}, "
                f"do_lower_case={self.do_lower_case})")

    # ---- ids <-> tokens <-> text --------------------------------------------

    def convert_tokens_to_ids(self, tokens):
        """A token (or list of tokens) to id(s); tokens not in the vocabulary map to unk_id."""
        if isinstance(tokens, str):
            token_id = self.backend.token_to_id(tokens)
            return self.unk_id if token_id is None else token_id
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids):
        """An id (or list/tensor of ids) to token string(s)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if isinstance(ids, int):
            token = self.backend.id_to_token(ids)
            if token is None:
                raise MiniBertError(f"token id {ids} is not in the vocabulary (size {self.vocab_size})")
            return token
        return [self.convert_ids_to_tokens(int(i)) for i in ids]

    def decode(self, ids, skip_special_tokens=True):
        """Ids back to text ("##" pieces glued to their word, "▁" turned into spaces).
        Lower-casing and stripped accents cannot be undone."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    # ---- saving ---------------------------------------------------------------

    def save(self, directory):
        """Write the tokenizer in Hugging Face layout (vocab.txt, spiece.model,
        spm.model or vocab.json + merges.txt, with tokenizer_config.json and
        tokenizer.json), so that both load_tokenizer(directory) and
        transformers' AutoTokenizer.from_pretrained(directory) read it back."""
        write_tokenizer_files(self, directory)

    # ---- what encode and batch_encode accept -----------------------------------

    @staticmethod
    def check_text(text, what):
        if not isinstance(text, str):
            raise MiniBertError(f"{what} must be a str, got {type(text).__name__}")

    @staticmethod
    def check_batch(texts, text_pairs):
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise MiniBertError("batch_encode: texts must be a list of strings")
        if text_pairs is not None:
            if isinstance(text_pairs, str) or not all(isinstance(t, str) for t in text_pairs):
                raise MiniBertError("batch_encode: text_pairs must be a list of strings")
            if len(text_pairs) != len(texts):
                raise MiniBertError(f"batch_encode: got {len(texts)} texts but {len(text_pairs)} text_pairs")

    @staticmethod
    def check_max_length(max_length):
        if max_length is not None and (not isinstance(max_length, int) or max_length < 3):
            raise MiniBertError(f"max_length must be an int >= 3 (room for [CLS] and two [SEP]), got {max_length!r}")

    # ---- building the backend: BERT's WordPiece --------------------------------

    @classmethod
    def from_vocab(cls, vocab, do_lower_case, source):
        """vocab: dict token -> id. source names the file for error messages."""
        for token in BERT_SPECIAL_TOKENS:
            if token not in vocab:
                raise MiniBertError(f"{source}: the vocabulary has no {token} token "
                                    f"(BERT needs {', '.join(BERT_SPECIAL_TOKENS)})")
        backend = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]",
                                                        max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        backend.normalizer = _bert_normalizer(do_lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        backend.decoder = decoders.WordPiece(prefix="##")
        # Registered special tokens are matched in the raw text before anything else
        # runs, so "[MASK]" typed by a user is one token (see the module docstring).
        backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in BERT_SPECIAL_TOKENS])
        backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
        return cls(backend, "wordpiece", do_lower_case, pad_token="[PAD]", unk_token="[UNK]")

    @classmethod
    def from_vocab_file(cls, vocab_file, do_lower_case=True):
        """A BERT tokenizer from a vocab.txt file."""
        return cls.from_vocab(read_vocab(vocab_file), do_lower_case, source=str(vocab_file))

    @classmethod
    def train_wordpiece(cls, files, vocab_size, do_lower_case=True, min_frequency=2, limit_alphabet=1000,
                        progress=True):
        """Train a new WordPiece vocabulary on text files with `tokenizers` (it shows its
        progress unless progress=False). Ids 0..4 are [PAD] [UNK] [CLS] [SEP] [MASK]; then the "##"
        forms of the characters that continue words, the alphabet (the
        `limit_alphabet` most frequent characters) and the learned pieces.

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
        if not isinstance(vocab_size, int) or vocab_size <= len(BERT_SPECIAL_TOKENS):
            raise MiniBertError(f"train_wordpiece: vocab_size must be an int > {len(BERT_SPECIAL_TOKENS)}, "
                                f"got {vocab_size!r}")
        backend = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]",
                                                        max_input_chars_per_word=MAX_INPUT_CHARS_PER_WORD))
        backend.normalizer = _bert_normalizer(do_lower_case)
        backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        alphabet, continuations = _alphabet_of(files, backend, limit_alphabet)
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=progress,
                                            special_tokens=BERT_SPECIAL_TOKENS + ["##" + c for c in continuations],
                                            initial_alphabet=alphabet, limit_alphabet=len(alphabet),
                                            continuing_subword_prefix="##")
        try:
            backend.train(files, trainer)
        except Exception as e:  # tokenizers raises plain Exceptions (its files were read above, so unlikely)
            raise MiniBertError(f"train_wordpiece: tokenizers could not train on {', '.join(files)} ({e})") from None
        # Rebuild from the learned vocabulary, so a trained tokenizer is assembled
        # exactly like one loaded from vocab.txt (the "##x" pieces become ordinary
        # tokens again: they were "special" only to be numbered first).
        return cls.from_vocab(backend.get_vocab(), do_lower_case, source="trained vocabulary")

    # ---- ALBERT: SentencePiece unigram ---------------------------------------

    @classmethod
    def albert(cls, model_file, do_lower_case=True):
        """An ALBERT tokenizer from a SentencePiece `.model` file (spiece.model / 30k-clean.model)."""
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
            [(piece, _unigram_score(piece, score)) for piece, score, _ in spm.pieces], unk_id=spm.unk_id))
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
        return cls(backend, "sentencepiece", do_lower_case, pad_token=pad_token, unk_token=unk_token,
                   files={"spiece.model": data})

    # ---- DeBERTa-v2/v3: SentencePiece unigram with DeBERTa's special tokens ---

    @classmethod
    def deberta_v2(cls, model_file, do_lower_case=False, split_by_punct=False):
        """A DeBERTa-v2/v3 tokenizer from its SentencePiece `spm.model` file.

        Ids: every piece keeps its id in the file ([PAD]=0, [CLS]=1, [SEP]=2,
        [UNK]=3 in the released models); [MASK] is not a piece and comes right
        after the last one (128000), as in the official SPMTokenizer
        (`add_special_token`) and in Hugging Face's added_tokens.json. The
        released checkpoints have 128100 embedding rows: the last 99 are unused.
        """
        path = pathlib.Path(model_file)
        data, spm = read_model_file(path)  # the protobuf file: support/sentencepiece_model.py
        pieces = {piece for piece, _, _ in spm.pieces}
        missing = [token for token in DEBERTA_SPECIAL_TOKENS[:4] if token not in pieces]
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
        # [MASK], not in the vocabulary, is added after the last piece.
        backend.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                    for token in DEBERTA_SPECIAL_TOKENS])
        backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
        return cls(backend, "sentencepiece", do_lower_case, pad_token="[PAD]", unk_token="[UNK]",
                   model_type="deberta-v2", files={"spm.model": data}, split_by_punct=split_by_punct)

    # ---- DeBERTa v1: GPT-2 byte-level BPE with DeBERTa's special tokens ------

    @classmethod
    def deberta_v1(cls, vocab_file, merges_file):
        """A DeBERTa v1 tokenizer from vocab.json + merges.txt (GPT-2 byte-level BPE).

        Every special token must be in vocab.json: DeBERTa renumbered RoBERTa's
        vocabulary to [PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3 and [MASK]=50264
        (official gpt2_tokenizer.py adds them in that order around GPT-2's ids).
        """
        vocab_file, merges_file = pathlib.Path(vocab_file), pathlib.Path(merges_file)
        vocab, merges = read_bpe_vocab(vocab_file), read_merges(merges_file)
        missing = [token for token in DEBERTA_SPECIAL_TOKENS if token not in vocab]
        if missing:
            raise MiniBertError(f"{vocab_file}: no {', '.join(missing)} token (DeBERTa v1 needs "
                                f"{', '.join(DEBERTA_SPECIAL_TOKENS)}; a GPT-2 or RoBERTa vocabulary has other ones)")
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
                                    for token in DEBERTA_SPECIAL_TOKENS])
        # Offsets are left as transformers gives them: "Ġworld" covers " world",
        # space included. (`tokenizers`' ByteLevel(trim_offsets=True) would drop
        # the space, but it miscounts after characters of several bytes.)
        backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
        files = {"vocab.json": vocab_file.read_bytes(), "merges.txt": merges_file.read_bytes()}
        return cls(backend, "byte-level-bpe", False, pad_token="[PAD]", unk_token="[UNK]",
                   model_type="deberta", files=files)

    # ---- transformers 5's folders: a Unigram or BPE tokenizer.json alone ------

    @classmethod
    def from_tokenizer_json(cls, found):
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
        return cls(backend, found.kind, found.do_lower_case, pad_token=tokens["pad"], unk_token=tokens["unk"],
                   cls_token=tokens["cls"], sep_token=tokens["sep"], mask_token=tokens["mask"],
                   model_type=found.model_type, split_by_punct=found.split_by_punct)

    # ---- loading the tokenizer a folder holds --------------------------------

    @classmethod
    def load(cls, name_or_path=None, *, force_download=False, revision=None, cache_dir=None, token=None,
             local_files_only=False):
        """The tokenizer of a model folder, a tokenizer file, or a model name.

        name_or_path: a folder holding vocab.txt, spiece.model, 30k-clean.model,
        assets/*.model (TF-Hub) or tokenizer.json (WordPiece; or Unigram or BPE,
        as transformers 5 saves ALBERT and DeBERTa: from_tokenizer_json); or a DeBERTa
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
    """ALBERT's `preprocess_text`, then SentencePiece's normalization.

    preprocess_text(text, lower=do_lower_case) in google-research/albert:
        " ".join(text.strip().split())                # 1. collapse whitespace
        NFKD, drop c with unicodedata.combining(c)    # 3. strip accents
        .lower() if lower                             # 4. lower-case
    Step 2, .replace("``", '"').replace("''", '"') (LaTeX-style quotes), is not
    in Google's ALBERT code: transformers' AlbertTokenizer inherited it from
    XLNet's preprocessing. We keep it so that ids equal transformers'; text
    with `` or '' therefore differs from what Google's code gives.
    Steps 1 and 3 use Python's own character tests, copied here as regex classes:
    `tokenizers`' StripAccents would also remove spacing marks (Mc) with combining
    class 0, e.g. Devanagari vowel signs, which ALBERT keeps.
    Accents are stripped for cased models too, unlike BERT (Google's ALBERT and
    transformers' AlbertTokenizer, keep_accents=False, both do so).
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


def _unigram_score(piece, score):
    """ALBERT's tokenizer never emits a piece that ends in digit + comma, like
    "▁1," : it re-splits such a piece into the number and ",". transformers'
    converter approximates this by making those pieces 100 (in log-probability)
    less likely; we do the same, so that "1, 2, 3" -> "▁1" "," "▁2" "," "▁3"."""
    if len(piece) >= 2 and piece[-1] == "," and piece[-2].isdigit():
        return score - 100.0
    return score


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
    """Words -> "▁word", as SentencePiece marks the start of each word.

    split_by_punct: the official tokenizer cuts the text at every punctuation
    character (`_run_split_on_punc`) and encodes each part on its own, so each
    part starts a new word ("a, b" -> "▁a" "▁," "▁b"), and the spaces at the
    ends of a part vanish. Splitting at the spaces too gives the same pieces
    (a piece never spans a space). transformers splits at the punctuation only
    and then keeps a lone "▁" for a space before punctuation ("a , b" ->
    "▁a" "▁" "▁," ...); the official code does not."""
    prepend = "always" if add_dummy_prefix else "never"
    steps = []
    if split_by_punct:
        steps += [pre_tokenizers.Punctuation(behavior="isolated"), pre_tokenizers.Split(" ", behavior="removed")]
    steps.append(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend))
    return pre_tokenizers.Sequence(steps)

