"""Support for minibert/distillation.py: the student's inputs, text -> ids ->
padded batches.

Tang et al.'s student reads words, not word pieces: a word vocabulary built
from the transfer set ([PAD], [UNK], [MASK], then the words by frequency),
split exactly as the augmenter splits them, so that an augmented "[MASK]" is
one word. With --embeddings teacher it reads the teacher's own pieces
instead. Both save themselves into a student folder. `collate_student`
stacks one batch of the student's features (ids, gold labels, the teacher's
logits) for finetuning.LengthGroupedBatches.
"""

import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from minibert.support.distillation.words import MASK, split_words
from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write

SPECIAL_WORDS = ("[PAD]", "[UNK]", MASK)     # ids 0, 1, 2
VOCAB_FILE = "vocab.txt"


def words_of(text):
    """split_words, except that the augmenter's "[MASK]" stays one word
    (split_words would give "[", "mask", "]")."""
    words = []
    for piece in re.split(r"(\[MASK\])", text):
        words.extend([MASK] if piece == MASK else split_words(piece))
    return words


def build_vocabulary(texts, min_count=1):
    """[PAD], [UNK], [MASK], then every word occurring at least `min_count`
    times, most frequent first (ties alphabetically, so the order is a
    function of the texts alone)."""
    counts = Counter(word for text in texts for word in words_of(text))
    for special in SPECIAL_WORDS:
        counts.pop(special, None)
    words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    return list(SPECIAL_WORDS) + words


class WordTokenizer:
    """A word vocabulary: text -> word ids, unknown words -> [UNK]."""

    kind = "words"

    def __init__(self, words, max_seq_len):
        if list(words[:len(SPECIAL_WORDS)]) != list(SPECIAL_WORDS):
            raise MiniBertError(f"a word vocabulary must start with {', '.join(SPECIAL_WORDS)}")
        self.words = list(words)
        self.ids = {word: i for i, word in enumerate(self.words)}
        self.pad_id, self.unk_id, self.mask_id = 0, 1, 2
        self.vocab_size = len(self.words)
        self.max_seq_len = max_seq_len

    def encode_many(self, texts):
        """One list of ids per text: at most max_seq_len, at least one ([UNK]
        for an empty text: the LSTM needs a real token to read)."""
        encoded = []
        for text in texts:
            ids = [self.ids.get(word, self.unk_id) for word in words_of(text)[:self.max_seq_len]]
            encoded.append(ids or [self.unk_id])
        return encoded

    def save(self, folder):
        with atomic_write(Path(folder) / VOCAB_FILE, mode="w") as f:
            f.write("".join(word + "\n" for word in self.words))

    @classmethod
    def load(cls, folder, max_seq_len):
        """The vocabulary of vocab.txt, one word per line, checked: no blanks
        or spaces, no word twice, SPECIAL_WORDS first."""
        path = Path(folder) / VOCAB_FILE
        try:
            words = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as e:
            raise MiniBertError(f"{path}: cannot read the student's vocabulary ({e})") from None
        if words and words[-1] == "":
            words.pop()
        for number, word in enumerate(words, start=1):
            if not word or word != word.strip():
                raise MiniBertError(f"{path}: line {number}: expected one word without spaces, got {word!r}")
        if len(set(words)) != len(words):
            raise MiniBertError(f"{path}: a word appears twice")
        if tuple(words[:3]) != SPECIAL_WORDS:
            raise MiniBertError(f"{path}: expected the first lines to be {', '.join(SPECIAL_WORDS)}")
        return cls(words, max_seq_len)


class PieceTokenizer:
    """The teacher's own tokenizer (WordPiece or SentencePiece), without
    [CLS]/[SEP]: the student reads the teacher's pieces (--embeddings teacher)."""

    kind = "teacher"

    def __init__(self, tokenizer, max_seq_len):
        self.tokenizer = tokenizer
        self.pad_id, self.unk_id = tokenizer.pad_id, tokenizer.unk_id
        self.vocab_size = tokenizer.vocab_size
        self.max_seq_len = max_seq_len

    def encode_many(self, texts):
        encodings = self.tokenizer.encode_many(texts, max_length=self.max_seq_len + 2)
        return [e.ids[1:-1] or [self.unk_id] for e in encodings]      # drop [CLS] ... [SEP]

    def save(self, folder):
        self.tokenizer.save(folder)


def pad(sequences, pad_id):
    """Right-padded ids (B, T) and their attention mask (B, T), T the longest."""
    rows = [torch.as_tensor(s, dtype=torch.long) for s in sequences]
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id)                     # (B, T)
    lengths = torch.tensor([len(s) for s in sequences])
    return ids, (torch.arange(ids.shape[1]) < lengths[:, None]).long()


def collate_student(features, pad_id):
    """A batch (the collate hook of finetuning's LengthGroupedBatches):
    input_ids, attention_mask, input_ids_b / attention_mask_b for pairs,
    labels (B,), and the teacher's logits (B, K) when the features carry them."""
    batch = {}
    batch["input_ids"], batch["attention_mask"] = pad([f["input_ids"] for f in features], pad_id)
    if "input_ids_b" in features[0]:
        batch["input_ids_b"], batch["attention_mask_b"] = pad([f["input_ids_b"] for f in features], pad_id)
    batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
    if "teacher_logits" in features[0]:
        batch["teacher_logits"] = torch.from_numpy(np.stack([f["teacher_logits"] for f in features]))
    return batch
