"""Text -> token ids for BERT: the basic tokenizer and WordPiece (Devlin et al.
2019, section 3, "Input/Output Representations"; Google's tokenization.py,
docs/formats.md 6; WordPiece: Wu et al. 2016, section 4.1).

What is where:
  1. the lesson, in plain Python under Google's names: the basic tokenizer
     (clean_text, tokenize_chinese_chars, run_strip_accents, lower_case,
     split_on_punctuation -> basic_tokenize), greedy longest-match-first
     WordPiece (`wordpiece`), and both together (`written_out_tokenize`);
  2. Tokenizer: text (or a pair) -> [CLS] A [SEP] B [SEP] ids and token types,
     truncated by BERT's rule (truncate_seq_pair), padded into a batch. It runs
     a `tokenizers` pipeline that gives exactly the tokens of part 1, assembled
     in support/fast_tokenizers.py (as are ALBERT's and DeBERTa-v2/v3's
     SentencePiece unigram and DeBERTa v1's byte-level BPE, which the same
     Tokenizer runs);
  3. wordpiece_tokenizer (a vocab.txt) and load_tokenizer (a model folder or name).
"""

import re
import unicodedata
from dataclasses import dataclass

import torch

from minibert.support.fast_tokenizers import BERT_SPECIAL_TOKENS, MAX_INPUT_CHARS_PER_WORD, FastTokenizer

# Shared with the fast path, so defined in support/fast_tokenizers.py: BERT_SPECIAL_TOKENS
# ([PAD] [UNK] [CLS] [SEP] [MASK], never split) and MAX_INPUT_CHARS_PER_WORD (a longer word
# is one [UNK]: 100 as in transformers; Google's code says 200).
UNK = "[UNK]"
SPECIAL_TOKEN = re.compile("(" + "|".join(re.escape(token) for token in BERT_SPECIAL_TOKENS) + ")")


# =============================================================================
# The lesson: WordPiece written out (google-research/bert tokenization.py)
# =============================================================================
#
# BERT cuts text into tokens in two stages:
#   1. the basic tokenizer: clean the text, put spaces around CJK characters,
#      lower-case and strip accents (uncased models only), then split on
#      whitespace and around every punctuation character;
#   2. WordPiece: cut each word into the longest pieces the vocabulary has,
#      greedily from the left, "##" marking a piece that continues a word.
# They give exactly the tokens of Tokenizer.tokenize (tests/test_tokenization.py
# checks it on every sentence of SST-2, SNLI, MRPC, CoNLL-2003 and SQuAD). Where
# `tokenizers` departs from Google's code, this code departs with it, so that the
# ids are the ones Hugging Face models were trained with; each place says so.

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
    Python. vocab: token -> id (support/tokenizer_files.py read_vocab). Equals
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


class Tokenizer(FastTokenizer):
    """BERT's input (section 3): [CLS] A [SEP] (B [SEP]) ids, token types 0 for
    A and 1 for B, truncated by BERT's rule and padded into a batch.

    `self.backend` is the `tokenizers` pipeline (normalizer, pre-tokenizer,
    WordPiece, post-processor adding [CLS]/[SEP]). FastTokenizer
    (support/fast_tokenizers.py) builds it (Tokenizer.from_vocab_file,
    .train_wordpiece, .albert, .deberta_v2, .deberta_v1, .load) and keeps the
    special ids (pad_id, cls_id, ...), convert_tokens_to_ids,
    convert_ids_to_tokens, decode and save."""

    def encode(self, text, text_pair=None, max_length=None):
        """Encode one text (or a pair) into an `Encoding`, with [CLS]/[SEP].
        max_length truncates, longest sequence first (see batch_encode)."""
        self.check_text(text, "encode: text")
        if text_pair is not None:
            self.check_text(text_pair, "encode: text_pair")
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
        self.check_batch(texts, text_pairs)
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
        self.check_max_length(max_length)
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
        self.check_text(text, "tokenize: text")
        return self.convert_ids_to_tokens(self.backend.encode(text, add_special_tokens=False).ids)


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


def wordpiece_tokenizer(vocab_file, do_lower_case=True):
    """A BERT tokenizer from a vocab.txt file."""
    return Tokenizer.from_vocab_file(vocab_file, do_lower_case)


def load_tokenizer(name_or_path=None, *, force_download=False, revision=None, cache_dir=None, token=None,
                   local_files_only=False):
    """The tokenizer of a model folder, a tokenizer file, or a model name (None:
    the bundled default model); the files and casing rules: FastTokenizer.load."""
    return Tokenizer.load(name_or_path, force_download=force_download, revision=revision, cache_dir=cache_dir,
                          token=token, local_files_only=local_files_only)
