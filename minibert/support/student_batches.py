"""Support for minibert/distillation.py: the student's batches. Padding of
word-id rows and the collate hook that stacks one batch of the student's
features (ids, gold labels, the teacher's logits) for
finetuning.LengthGroupedBatches."""

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence


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
