"""Support for minibert/distillation.py: the student's word vocabulary file
(vocab.txt, written and read back with its checks; the vocabulary itself is
distillation.build_vocabulary's), and padded batches: `collate_student`
stacks one batch of the student's features (ids, gold labels, the teacher's
logits) for finetuning.LengthGroupedBatches.
"""

from pathlib import Path

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence

from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write

VOCAB_FILE = "vocab.txt"


def write_word_vocabulary(folder, words):
    """vocab.txt: one word per line, in id order."""
    with atomic_write(Path(folder) / VOCAB_FILE, mode="w") as f:
        f.write("".join(word + "\n" for word in words))


def read_word_vocabulary(folder, special_words):
    """The words of vocab.txt, one per line, checked: no blanks or spaces, no
    word twice, `special_words` first."""
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
    if tuple(words[:len(special_words)]) != tuple(special_words):
        raise MiniBertError(f"{path}: expected the first lines to be {', '.join(special_words)}")
    return words


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
