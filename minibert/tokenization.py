"""Text -> token ids for BERT, ALBERT and DeBERTa: BERT's basic tokenizer and
WordPiece (Devlin et al. 2019, section 3, "Input/Output Representations";
Google's tokenization.py, docs/formats.md 6; WordPiece: Wu et al. 2016,
section 4.1), ALBERT's SentencePiece rules (Lan et al. 2019, section 4.1;
google-research/albert tokenization.py) and DeBERTa's (microsoft/DeBERTa
spm_tokenizer.py, gpt2_tokenizer.py).

What is where:
  1. BERT's rules, in plain Python under Google's names: the basic tokenizer
     (clean_text, tokenize_chinese_chars, run_strip_accents, lower_case,
     split_on_punctuation -> basic_tokenize), greedy longest-match-first
     WordPiece (`wordpiece`), and both together (`written_out_tokenize`);
  2. ALBERT's rules: preprocess_text, the digit-comma rule
     (albert_piece_score), SentencePiece's "▁" before each word
     (sentencepiece_words);
  3. DeBERTa's rules: split_by_punct (run_split_on_punc), the special tokens'
     ids, and v1's byte-level BPE;
  4. Tokenizer: text (or a pair) -> [CLS] A [SEP] B [SEP] ids and token types,
     truncated by BERT's rule (truncate_seq_pair), padded into a batch. It runs
     a `tokenizers` pipeline that applies the rules above (the same tokens,
     tested), assembled from them in one call to support/tokenizer_files.py;
  5. wordpiece_tokenizer (a vocab.txt) and load_tokenizer (a model folder or name).
"""

import re
import unicodedata
from dataclasses import dataclass

import torch

from minibert.support import MiniBertError
from minibert.support.tokenizer_files import (albert_pipeline, check_batch, check_max_length, check_text,
                                              deberta_v1_pipeline, deberta_v2_pipeline, load_tokenizer_files,
                                              read_vocab, tokenizer_json_pipeline, trained_wordpiece_vocab,
                                              wordpiece_pipeline, write_tokenizer_files)

# The special tokens of every BERT vocabulary, never split. train_wordpiece puts
# them at ids 0..4 in this order. (Google's released vocabularies use [PAD]=0,
# [unused0..98]=1..99, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103; ids are
# always looked up by name, never assumed.)
BERT_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
UNK = "[UNK]"
SPECIAL_TOKEN = re.compile("(" + "|".join(re.escape(token) for token in BERT_SPECIAL_TOKENS) + ")")

# Google's WordPiece gives up on words longer than 200 characters (one [UNK]);
# transformers and `tokenizers` use 100. We follow transformers, so that ids
# agree with what Hugging Face models were trained and evaluated with. Only
# words of 101..200 characters (URLs, DNA strings, ...) are affected.
MAX_INPUT_CHARS_PER_WORD = 100


# =============================================================================
# BERT's rules: WordPiece written out (google-research/bert tokenization.py)
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
# ALBERT's rules (google-research/albert tokenization.py)
# =============================================================================
#
# ALBERT replaces WordPiece by a SentencePiece unigram model ([ALBERT] 4.1, as
# XLNet): the vocabulary gives each piece a log-probability, and a word is cut
# into the pieces whose scores sum highest. Before that, the text is cleaned by
# preprocess_text, then by SentencePiece's own table (NFKC for the default
# "nmt_nfkc" rule, which the .model file carries), and each word gets "▁".


def preprocess_text(text, lower=True):
    """ALBERT's preprocess_text: the text SentencePiece is given.

      1. one space between words, none at the ends (" ".join(text.split()));
      2. `` and '' become " (LaTeX-style quotes). Departure: this step is not
         in Google's ALBERT code; transformers' AlbertTokenizer inherited it
         from XLNet's preprocessing, and we keep it so that ids equal
         transformers';
      3. NFKD, then drop every combining character: "café" -> "cafe". Accents
         go for cased models too, unlike BERT (Google's ALBERT and
         transformers' keep_accents=False both do so);
      4. lower-case, for uncased models (every released ALBERT is).

    Why: words that differ only in spacing, quote style or accents then share
    their pieces, so the 30,000 pieces are not spent on variants."""
    text = " ".join(text.split())
    text = text.replace("``", '"').replace("''", '"')
    text = "".join(char for char in unicodedata.normalize("NFKD", text) if not unicodedata.combining(char))
    return text.lower() if lower else text


def albert_piece_score(piece, score):
    """The score the unigram model gives a piece of ALBERT's vocabulary: its
    own, except for a piece that ends in digit + comma, like "▁1,".

    Google's encode_pieces never emits such a piece: it re-splits it into the
    number and "," (so "1, 2" and "1,000" read the digits alike). A unigram
    model cannot re-split, so transformers' converter makes those pieces 100
    (in log-probability) less likely, which almost always has the same effect;
    we do the same, so that "1, 2, 3" -> "▁1" "," "▁2" "," "▁3"."""
    if len(piece) >= 2 and piece[-1] == "," and piece[-2].isdigit():
        return score - 100.0
    return score


def sentencepiece_words(text, split_by_punct=False):
    """The words SentencePiece cuts into pieces, each with "▁" (U+2581) in
    front: "the cat" -> "▁the" "▁cat" (ALBERT and DeBERTa-v2/v3).

    SentencePiece reads a space as a character like any other, written "▁",
    and (add_dummy_prefix) puts one before the first word too. Why: a word is
    then spelled the same at the start of a text and inside it, a piece knows
    whether it starts a word, and decoding is only "▁" -> " ". A piece never
    spans a space, so cutting the text into words first gives the same pieces.
    split_by_punct (DeBERTa-v2/v3): each part of run_split_on_punc is encoded
    on its own, so it starts a new word and loses the spaces at its ends."""
    parts = run_split_on_punc(text) if split_by_punct else [text]
    return ["▁" + word for part in parts for word in part.split()]


# =============================================================================
# DeBERTa's rules (microsoft/DeBERTa spm_tokenizer.py, gpt2_tokenizer.py)
# =============================================================================
#
# DeBERTa-v2/v3 cut text with a SentencePiece unigram model as ALBERT does, but
# its SPMTokenizer gives SentencePiece the text as it is (lower-cased only if
# tokenizer_config.json says do_lower_case; the released models are cased):
# no preprocess_text, no digit-comma rule. DeBERTa v1 uses GPT-2's byte-level
# BPE over RoBERTa's vocabulary: no lower-casing or Unicode normalization, a
# word carries the space before it ("Ġworld"), every byte is a symbol (so no
# text is unknown), and [MASK] takes the spaces before it, so "the [MASK]" is
# "the" "[MASK]" as a masked " cat" ("Ġcat") was one token in pre-training.

# DeBERTa's special tokens (all versions), in the order of their ids: [PAD]=0,
# [CLS]=1, [SEP]=2, [UNK]=3 are pieces of spm.model (v2/v3) or entries of
# vocab.json (v1, where [MASK]=50264); v2/v3's [MASK] is no piece and comes
# right after the last one (128000 for the released 128000-piece models), as
# the official SPMTokenizer's add_special_token adds it.
DEBERTA_SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]


def run_split_on_punc(text):
    """DeBERTa-v2's split_by_punct (SPMTokenizer._run_split_on_punc): the text
    cut before and after every punctuation character, as BERT's
    split_on_punctuation cuts one word: "a, b" -> "a" "," " b". Off in the
    released models (tokenizer_config.json turns it on). Why: each part is
    encoded on its own (sentencepiece_words), so a punctuation mark is always
    a word of its own and never joins a piece with its neighbour ("a," ->
    "▁a" "▁,")."""
    return split_on_punctuation(text)


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
    """BERT's input (section 3): [CLS] A [SEP] (B [SEP]) ids, token types 0 for
    A and 1 for B, truncated by BERT's rule and padded into a batch; the same
    for ALBERT's and DeBERTa's vocabularies.

    `self.backend` is the `tokenizers` pipeline (normalizer, pre-tokenizer,
    WordPiece / unigram / BPE, post-processor adding [CLS]/[SEP]) that applies
    the rules above; the constructors below (from_vocab_file, train_wordpiece,
    albert, deberta_v2, deberta_v1, load) assemble it from them in one call to
    support/tokenizer_files.py."""

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
        # Ids are looked up by name: [CLS] is 101 in Google's vocabularies, 2 in ALBERT's, 1 in DeBERTa's.
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            backend.token_to_id(token) for token in (pad_token, unk_token, cls_token, sep_token, mask_token))
        self.special_ids = {self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id}
        self.vocab_size = backend.get_vocab_size()
        self.files = dict(files or {})  # SentencePiece and BPE: file name -> bytes, written back by save()

    def __repr__(self):
        return (f"Tokenizer(kind={self.kind!r}, model_type={self.model_type!r}, vocab_size={self.vocab_size}, "
                f"do_lower_case={self.do_lower_case})")

    # ---- the constructors: the rules above, assembled into a `tokenizers` pipeline ----

    @classmethod
    def from_vocab(cls, vocab, do_lower_case, source):
        """BERT: basic_tokenize and wordpiece over `vocab` (token -> id; source
        names its file in messages)."""
        return cls(**wordpiece_pipeline(vocab, do_lower_case, source, BERT_SPECIAL_TOKENS, MAX_INPUT_CHARS_PER_WORD))

    @classmethod
    def from_vocab_file(cls, vocab_file, do_lower_case=True):
        """BERT from a vocab.txt file."""
        return cls.from_vocab(read_vocab(vocab_file), do_lower_case, source=str(vocab_file))

    @classmethod
    def train_wordpiece(cls, files, vocab_size, do_lower_case=True, min_frequency=2, limit_alphabet=1000,
                        progress=True):
        """BERT with a new WordPiece vocabulary trained on text files by
        `tokenizers` (deterministic; it shows its progress unless
        progress=False): ids 0..4 are BERT_SPECIAL_TOKENS, then the "##" forms
        of the characters that continue words, the alphabet (the
        `limit_alphabet` most frequent characters) and the learned pieces."""
        vocab = trained_wordpiece_vocab(files, vocab_size, do_lower_case, min_frequency, limit_alphabet, progress,
                                        BERT_SPECIAL_TOKENS, MAX_INPUT_CHARS_PER_WORD)
        return cls.from_vocab(vocab, do_lower_case, source="trained vocabulary")

    @classmethod
    def albert(cls, model_file, do_lower_case=True):
        """ALBERT from a SentencePiece `.model` file (spiece.model / 30k-clean.model):
        preprocess_text, SentencePiece's table, sentencepiece_words, and the
        unigram model scored by albert_piece_score."""
        return cls(**albert_pipeline(model_file, do_lower_case, albert_piece_score))

    @classmethod
    def deberta_v2(cls, model_file, do_lower_case=False, split_by_punct=False):
        """DeBERTa-v2/v3 from its SentencePiece `spm.model` file: SentencePiece's
        table, sentencepiece_words (after run_split_on_punc if split_by_punct),
        the unigram model; ids as DEBERTA_SPECIAL_TOKENS says. The released
        checkpoints have 128100 embedding rows: the last 99 are unused."""
        return cls(**deberta_v2_pipeline(model_file, do_lower_case, split_by_punct, DEBERTA_SPECIAL_TOKENS))

    @classmethod
    def deberta_v1(cls, vocab_file, merges_file):
        """DeBERTa v1 from vocab.json + merges.txt (GPT-2's byte-level BPE)."""
        return cls(**deberta_v1_pipeline(vocab_file, merges_file, DEBERTA_SPECIAL_TOKENS))

    @classmethod
    def from_tokenizer_json(cls, found):
        """ALBERT, DeBERTa-v2/v3 or DeBERTa v1 from a tokenizer.json alone, as
        transformers 5 saves them (`found`: support/tokenizer_files.TokenizerFiles),
        run as the file describes it."""
        return cls(**tokenizer_json_pipeline(found))

    @classmethod
    def load(cls, name_or_path=None, *, force_download=False, revision=None, cache_dir=None, token=None,
             local_files_only=False):
        """The tokenizer of a model folder, a tokenizer file, or a model name (None:
        the bundled default model), built by the constructor its files call for;
        which files and which casing: support/tokenizer_files.load_tokenizer_files."""
        return load_tokenizer_files(cls, name_or_path, force_download=force_download, revision=revision,
                                    cache_dir=cache_dir, token=token, local_files_only=local_files_only)

    # ---- ids <-> tokens <-> text ------------------------------------------------

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

    def save(self, directory):
        """Write the tokenizer in Hugging Face layout (vocab.txt, spiece.model,
        spm.model or vocab.json + merges.txt, with tokenizer_config.json and
        tokenizer.json), so that both load_tokenizer(directory) and
        transformers' AutoTokenizer.from_pretrained(directory) read it back."""
        write_tokenizer_files(self, directory)

    # ---- text -> ids -------------------------------------------------------------

    def encode(self, text, text_pair=None, max_length=None):
        """Encode one text (or a pair) into an `Encoding`, with [CLS]/[SEP].
        max_length truncates, longest sequence first (see batch_encode)."""
        check_text(text, "encode: text")
        if text_pair is not None:
            check_text(text_pair, "encode: text_pair")
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
        check_batch(texts, text_pairs)
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
        check_max_length(max_length)
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
        check_text(text, "tokenize: text")
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
    the bundled default model); the files and casing rules: Tokenizer.load."""
    return Tokenizer.load(name_or_path, force_download=force_download, revision=revision, cache_dir=cache_dir,
                          token=token, local_files_only=local_files_only)
