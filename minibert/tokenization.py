"""Text -> token ids for BERT (WordPiece), ALBERT (SentencePiece unigram) and
DeBERTa (v1: GPT-2 byte-level BPE; v2/v3: SentencePiece unigram).

Read in this order:
  1. the lesson: BERT's basic tokenizer and greedy longest-match-first
     WordPiece written out in plain Python (`written_out_tokenize`);
  2. the Tokenizer class: text (or a pair) -> [CLS] A [SEP] B [SEP] ids,
     token types, truncation by BERT's rule, padding into a batch;
  3. the fast paths, which the Tokenizer runs: each tokenizer assembled from
     the parts of the Hugging Face `tokenizers` library;
  4. load_tokenizer, which finds the files (support/tokenizer_files.py) and
     builds the matching tokenizer.

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

Pairs are truncated by BERT's rule (truncate_seq_pair), and an empty text_pair
means "no pair", as in Google's run_classifier.py.

Where Google's code, transformers and `tokenizers` disagree, the choice made here
and the reason are written next to the code; tests/test_tokenization.py checks
them against transformers and SentencePiece.
"""

import functools
import pathlib
import re
import unicodedata
from dataclasses import dataclass

import torch
import tokenizers
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

from minibert.support.errors import MiniBertError
from minibert.support.sentencepiece_model import (  # noqa: F401  (read_sentencepiece_model: public here too)
    SPM_CONTROL, SPM_UNKNOWN, read_model_file, read_sentencepiece_model)
from minibert.support.tokenizer_files import (  # noqa: F401  (the casing rules and TOKENIZER_FILES: public here too)
    TOKENIZER_FILES, casing_from_folder_name, casing_from_vocab, check_added_tokens, find_tokenizer_files,
    read_bpe_vocab, read_merges, read_vocab, write_tokenizer_files)

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
UNK = "[UNK]"
SPECIAL_TOKEN = re.compile("(" + "|".join(re.escape(token) for token in BERT_SPECIAL_TOKENS) + ")")

# DeBERTa's special tokens (all versions), in the order of their ids in the
# released vocabularies: [PAD]=0, [CLS]=1, [SEP]=2, [UNK]=3, and [MASK] last.
DEBERTA_SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]


# =============================================================================
# The lesson: WordPiece written out (google-research/bert tokenization.py)
# =============================================================================
#
# BERT cuts text into tokens in two stages (Devlin et al. 2019, section 3,
# "Input/Output Representations"; WordPiece: Wu et al. 2016, section 4.1):
#   1. the basic tokenizer: clean the text, put spaces around CJK characters,
#      lower-case and strip accents (uncased models only), then split on
#      whitespace and around every punctuation character;
#   2. WordPiece: cut each word into the longest pieces the vocabulary has,
#      greedily from the left, "##" marking a piece that continues a word.
# Below, both in plain Python, in Google's order and under Google's names. They
# give exactly the tokens of Tokenizer.tokenize, which runs the `tokenizers`
# library: the fast path that everything else uses (tests/test_tokenization.py
# checks the two agree on every sentence of SST-2, SNLI, MRPC, CoNLL-2003 and
# SQuAD). Where `tokenizers` departs from Google's code, this code departs with
# it, so that the ids are the ones Hugging Face models were trained with; each
# place says so.

# Google's BasicTokenizer._tokenize_chinese_chars ranges, as `tokenizers`'
# BertNormalizer has them. Departure: Google's fifth range starts at 0x2B820;
# `tokenizers` starts it at 0x2B920, so the 256 ideographs U+2B820..U+2B91F
# (the start of CJK Extension E) stay glued to their neighbours.
CJK_RANGES = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)]

# Unicode version. `tokenizers` classifies characters with tables of Unicode
# 8.0, Python with its own (Unicode 14.0 for Python 3.11), so the few hundred
# characters that Unicode added or re-classified since (e.g. U+2E43, a dash
# that is punctuation only for Python) can come out differently here. None of
# them occurs in the data sets above; the test of every character lists the
# four old characters that changed category.


def is_control(char):
    """Characters that clean_text deletes. Departure: `tokenizers` deletes every
    "other" character (categories Cc, Cf, Co, Cs) but tab, newline and return;
    Google deletes Cc and Cf only, so private-use characters (Co, e.g. U+E000)
    survive in Google's code and vanish here. Unassigned ones (Cn) stay in both."""
    return char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf", "Co", "Cs")


def is_punctuation(char):
    """ASCII symbols such as $ + < = > ^ ` | ~ count as punctuation, as do
    Unicode's punctuation categories (P*)."""
    cp = ord(char)
    ascii_symbol = 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
    return ascii_symbol or unicodedata.category(char).startswith("P")


def clean_text(text):
    """Delete NUL, U+FFFD (a character that was not decodable) and control
    characters; every whitespace character (tab, newline, no-break space...)
    becomes a plain space."""
    kept = (char for char in text if char not in "\x00\ufffd" and not is_control(char))
    return "".join(" " if char.isspace() else char for char in kept)


def tokenize_chinese_chars(text):
    """A space on both sides of every CJK ideograph: Chinese has no spaces
    between words, so each ideograph is a word (BERT's Chinese model has one
    token per character)."""
    return "".join(f" {char} " if any(a <= ord(char) <= b for a, b in CJK_RANGES) else char for char in text)


def run_strip_accents(text):
    """NFD splits "é" into "e" + a combining accent (category Mn); drop the accent."""
    return "".join(char for char in unicodedata.normalize("NFD", text) if unicodedata.category(char) != "Mn")


def lower_case(text):
    """Lower-case one character at a time. Departure: Python's text.lower()
    (Google's code) writes Greek capital sigma as "ς" at the end of a word;
    `tokenizers` lower-cases each character alone, so always "σ"."""
    return "".join(char.lower() for char in text)


def split_on_punctuation(word):
    """"don't!" -> "don" "'" "t" "!": each punctuation character is a word of its own."""
    words = [[]]
    for char in word:
        if is_punctuation(char):
            words += [[char], []]
        else:
            words[-1].append(char)
    return ["".join(w) for w in words if w]


def basic_tokenize(text, do_lower_case):
    """Google's BasicTokenizer.tokenize: text -> words and punctuation marks."""
    # exercise: basic-tokenizer
    text = tokenize_chinese_chars(clean_text(text))
    if do_lower_case:
        # Google lower-cases first, then strips accents; `tokenizers` strips
        # first. Either order gives the same text for every character.
        text = lower_case(run_strip_accents(text))
    return [piece for word in text.split() for piece in split_on_punctuation(word)]
    # end exercise


def wordpiece(word, vocab):
    """Greedy longest-match-first (Google's WordpieceTokenizer.tokenize):
    take the longest prefix that is in the vocabulary, then the longest
    "##"-piece of the rest, and so on: "unaffable" -> "un" "##aff" "##able".
    A word that cannot be cut this way, or longer than
    MAX_INPUT_CHARS_PER_WORD, becomes one [UNK]."""
    # exercise: wordpiece
    if len(word) > MAX_INPUT_CHARS_PER_WORD:
        return [UNK]
    pieces, start = [], 0
    while start < len(word):
        end, piece = len(word), None
        while start < end:  # shorten the candidate from the right until it is a piece
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                piece = candidate
                break
            end -= 1
        if piece is None:  # not even one character fits: the whole word is unknown
            return [UNK]
        pieces.append(piece)
        start = end
    return pieces
    # end exercise


def written_out_tokenize(text, vocab, do_lower_case=True):
    """Text -> WordPiece tokens, the basic tokenizer then WordPiece, in plain
    Python. vocab: token -> id, as read_vocab returns it. Equals
    Tokenizer.tokenize(text) for a tokenizer of the same vocabulary and casing.

    Departure: special tokens typed in the text ("[MASK]") are cut out first
    and kept whole, as `tokenizers` and transformers do; Google's code would
    read "[MASK]" as "[", "mask", "]"."""
    tokens = []
    for part in SPECIAL_TOKEN.split(text):
        if part in BERT_SPECIAL_TOKENS:
            tokens.append(part)
        else:
            tokens += [piece for word in basic_tokenize(part, do_lower_case) for piece in wordpiece(word, vocab)]
    return tokens


# =============================================================================
# The Tokenizer: text (or a pair) -> [CLS] A [SEP] B [SEP] ids, truncated, padded
# =============================================================================

@dataclass
class Encoding:
    """One encoded text (or text pair). All lists have one entry per token."""

    ids: list            # token ids, [CLS] ... [SEP] included
    token_type_ids: list  # 0 for [CLS], text and first [SEP]; 1 for the pair and its [SEP]
    offsets: list        # (start, end) character span of each token in the ORIGINAL text; (0, 0) for [CLS]/[SEP]
    tokens: list         # the token string of each id (so "[UNK]"/"<unk>" for unknown text)
    word_ids: list       # index of the word each token came from, None for [CLS]/[SEP]
    sequence_ids: list   # 0 = text, 1 = text_pair, None for [CLS]/[SEP]

    def __len__(self):
        return len(self.ids)


class Tokenizer:
    """A thin wrapper around a `tokenizers.Tokenizer` (kept in `self.backend`)
    that knows BERT's special tokens and returns what minibert needs."""

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

    # ---- text -> ids -------------------------------------------------------

    def encode(self, text, text_pair=None, max_length=None):
        """Encode one text (or a pair) into an `Encoding`, with [CLS]/[SEP].
        max_length truncates, longest sequence first (see batch_encode)."""
        _check_text(text, "encode: text")
        if text_pair is not None:
            _check_text(text_pair, "encode: text_pair")
        (encoding,) = self._encode_all([text], None if text_pair is None else [text_pair], max_length)
        return Encoding(ids=encoding.ids, token_type_ids=encoding.type_ids, offsets=encoding.offsets,
                        tokens=self.convert_ids_to_tokens(encoding.ids), word_ids=encoding.word_ids,
                        sequence_ids=encoding.sequence_ids)

    def encode_many(self, texts, text_pairs=None, max_length=None):
        """`encode` for a list of texts (and pairs) at once: a list of
        Encodings, tokenized in parallel by the `tokenizers` backend."""
        encodings = self._encode_all(list(texts), None if text_pairs is None else list(text_pairs), max_length)
        return [Encoding(ids=e.ids, token_type_ids=e.type_ids, offsets=e.offsets, tokens=e.tokens,
                         word_ids=e.word_ids, sequence_ids=e.sequence_ids) for e in encodings]

    def batch_encode(self, texts, text_pairs=None, max_length=512):
        """Encode a batch into LongTensors `input_ids`, `token_type_ids`,
        `attention_mask` of shape (batch, longest), padded with pad_id.

        Pairs longer than max_length lose tokens from the end of whichever
        sequence is currently longer, one at a time (see truncate_seq_pair)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise MiniBertError("batch_encode: texts must be a list of strings")
        if text_pairs is not None:
            if isinstance(text_pairs, str) or not all(isinstance(t, str) for t in text_pairs):
                raise MiniBertError("batch_encode: text_pairs must be a list of strings")
            if len(text_pairs) != len(texts):
                raise MiniBertError(f"batch_encode: got {len(texts)} texts but {len(text_pairs)} text_pairs")
        encodings = self._encode_all(list(texts), None if text_pairs is None else list(text_pairs), max_length)
        longest = max((len(e.ids) for e in encodings), default=0)
        input_ids = torch.full((len(encodings), longest), self.pad_id, dtype=torch.long)
        token_type_ids = torch.zeros((len(encodings), longest), dtype=torch.long)
        attention_mask = torch.zeros((len(encodings), longest), dtype=torch.long)
        for row, e in enumerate(encodings):
            input_ids[row, :len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
            token_type_ids[row, :len(e.ids)] = torch.tensor(e.type_ids, dtype=torch.long)
            attention_mask[row, :len(e.ids)] = 1
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}

    def _encode_all(self, texts, text_pairs, max_length):
        """Encode without specials, truncate like BERT, then add [CLS]/[SEP]."""
        if text_pairs is None:
            text_pairs = [None] * len(texts)
        if max_length is not None and (not isinstance(max_length, int) or max_length < 3):
            raise MiniBertError(f"max_length must be an int >= 3 (room for [CLS] and two [SEP]), got {max_length!r}")
        firsts = self.backend.encode_batch(texts, add_special_tokens=False)
        seconds = self.backend.encode_batch([b or "" for b in text_pairs], add_special_tokens=False)
        encodings = []
        for a, b, pair_text in zip(firsts, seconds, text_pairs):
            # An empty text_pair means "no pair", as in Google's run_classifier.py
            # (`if example.text_b:`) and transformers' fast tokenizer.
            b = b if pair_text else None
            if max_length is not None:
                budget = max_length - self.backend.num_special_tokens_to_add(is_pair=b is not None)
                keep_a, keep_b = truncate_seq_pair(len(a), 0 if b is None else len(b), budget)
                a.truncate(keep_a)
                if b is not None:
                    b.truncate(keep_b)
            encodings.append(self.backend.post_process(a, b, add_special_tokens=True))
        return encodings

    def tokenize(self, text):
        """The token strings of `text`, without [CLS]/[SEP]. Unknown text shows as
        the unknown token ("[UNK]", "<unk>"), i.e. tokens always match the ids."""
        _check_text(text, "tokenize: text")
        return self.convert_ids_to_tokens(self.backend.encode(text, add_special_tokens=False).ids)

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


def truncate_seq_pair(len_a, len_b, max_tokens):
    """How many tokens of each sequence to keep, by BERT's `_truncate_seq_pair`
    (run_classifier.py): drop the last token of the longer one until they fit,
    of the second one when they are equally long. (`tokenizers`' own
    "longest_first" gives the odd token to the second sequence instead, so a
    budget of 5 for 4 + 4 tokens keeps 2 + 3 there but 3 + 2 in BERT.)"""
    while len_a + len_b > max_tokens:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def _check_text(text, what):
    if not isinstance(text, str):
        raise MiniBertError(f"{what} must be a str, got {type(text).__name__}")


def _bert_post_processor(backend, cls_token, sep_token):
    """[CLS] A [SEP] for one text, [CLS] A [SEP] B [SEP] for a pair; type ids 0 then 1."""
    return processors.TemplateProcessing(
        single=f"{cls_token}:0 $A:0 {sep_token}:0",
        pair=f"{cls_token}:0 $A:0 {sep_token}:0 $B:1 {sep_token}:1",
        special_tokens=[(cls_token, backend.token_to_id(cls_token)), (sep_token, backend.token_to_id(sep_token))])


# =============================================================================
# The fast path: BERT's WordPiece by `tokenizers`
# =============================================================================

def _bert_normalizer(do_lower_case):
    # strip_accents is tied to lower-casing, as in Google's BasicTokenizer.
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                      strip_accents=do_lower_case, lowercase=do_lower_case)


def _wordpiece_from_vocab(vocab, do_lower_case, source):
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
    return Tokenizer(backend, "wordpiece", do_lower_case, pad_token="[PAD]", unk_token="[UNK]")


def wordpiece_tokenizer(vocab_file, do_lower_case=True):
    """A BERT tokenizer from a vocab.txt file."""
    return _wordpiece_from_vocab(read_vocab(vocab_file), do_lower_case, source=str(vocab_file))


def train_wordpiece(files, vocab_size, do_lower_case=True, min_frequency=2, limit_alphabet=1000, progress=True):
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
    return _wordpiece_from_vocab(backend.get_vocab(), do_lower_case, source="trained vocabulary")


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
# ALBERT: SentencePiece unigram
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


def sentencepiece_tokenizer(model_file, do_lower_case=True):
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
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend)])
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=prepend)
    # Control pieces ([CLS], [SEP], [MASK], <pad>, ...) and <unk> are special:
    # never produced by splitting text, matched whole when typed literally.
    specials = {piece for piece, _, kind in spm.pieces if kind in (SPM_CONTROL, SPM_UNKNOWN)} | {pad_token}
    backend.add_special_tokens([AddedToken(piece, special=True, normalized=False)
                                for piece, _, _ in spm.pieces if piece in specials])
    backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
    return Tokenizer(backend, "sentencepiece", do_lower_case, pad_token=pad_token, unk_token=unk_token,
                     files={"spiece.model": data})


# =============================================================================
# DeBERTa-v2/v3: SentencePiece unigram with DeBERTa's special tokens
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


def deberta_v2_tokenizer(model_file, do_lower_case=False, split_by_punct=False):
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
        raise MiniBertError(f"{path}: the unknown piece is {spm.pieces[spm.unk_id][0]!r}; DeBERTa-v2/v3 expects [UNK]")
    if split_by_punct and not spm.add_dummy_prefix:
        raise MiniBertError(f"{path}: split_by_punct needs a model with add_dummy_prefix (every word starts with ▁)")

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
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in DEBERTA_SPECIAL_TOKENS])
    backend.post_processor = _bert_post_processor(backend, "[CLS]", "[SEP]")
    return Tokenizer(backend, "sentencepiece", do_lower_case, pad_token="[PAD]", unk_token="[UNK]",
                     model_type="deberta-v2", files={"spm.model": data}, split_by_punct=split_by_punct)


# =============================================================================
# DeBERTa v1: GPT-2 byte-level BPE with DeBERTa's special tokens
# =============================================================================

def deberta_v1_tokenizer(vocab_file, merges_file):
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
    return Tokenizer(backend, "byte-level-bpe", False, pad_token="[PAD]", unk_token="[UNK]",
                     model_type="deberta", files=files)


# =============================================================================
# Loading a tokenizer
# =============================================================================

def load_tokenizer(name_or_path=None, *, force_download=False, revision=None):
    """The tokenizer of a model folder, a tokenizer file, or a model name.

    name_or_path: a folder holding vocab.txt, spiece.model, 30k-clean.model,
    assets/*.model (TF-Hub) or tokenizer.json (WordPiece only); or a DeBERTa
    folder: spm.model with a config.json whose model_type is "deberta-v2" or a
    tokenizer_config.json naming DebertaV2Tokenizer (v2/v3), vocab.json +
    merges.txt (v1); a path to one such file; or a name (or None for the
    bundled default model) that minibert.support.hub resolves to a folder:
    for a Hugging Face hub id, its config and tokenizer files only, never its
    weights. force_download=True downloads a hub id or Google archive again;
    revision picks a hub id's branch, tag or commit.

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
        path = pathlib.Path(resolve_model_dir(name, force_download=force_download, revision=revision, weights=False))
    try:
        found = find_tokenizer_files(path)  # which files, which casing: support/tokenizer_files.py
        if found.model_type == "bert":
            return _wordpiece_from_vocab(found.vocab, found.do_lower_case, source=str(found.file))
        if found.model_type == "albert":
            return sentencepiece_tokenizer(found.file, do_lower_case=found.do_lower_case)
        if found.model_type == "deberta-v2":
            tokenizer = deberta_v2_tokenizer(found.file, found.do_lower_case, found.split_by_punct)
        else:
            tokenizer = deberta_v1_tokenizer(found.file, found.merges_file)
        return check_added_tokens(found.folder, tokenizer)
    except MiniBertError as e:  # if the folder is a cached download, say so and how to refresh it
        from minibert.support.hub import explain_cache_error  # imported only when needed, like resolve_model_dir
        raise explain_cache_error(e, path) from None
