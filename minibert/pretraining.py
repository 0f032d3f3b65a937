"""Masked-LM pretraining: the objective and its held-out evaluation.

The MLM loss is the cross-entropy of the word piece at each chosen position,
averaged over all chosen positions of the step ([BERT] 3.1, Task #1). The MLM
head runs on the chosen positions only (`mlm_positions`): for a small model
the V-wide vocabulary projection is most of the compute, and 85% of it would
be thrown away.

The same objective pretrains BERT and ALBERT (MLM, optionally with NSP or
SOP) and DeBERTa (MLM only, predicted through the Enhanced Mask Decoder
([DeBERTa] 3.2; docs/deberta.md 2): the model's `mlm_logits` already run the
last layer twice more with the absolute positions added, so the objective is
the same code as BERT's).

The run around it (the corpus, the output folder, resume, saving the model)
is train_mlm.py's code, minibert/commands/train_mlm.py; the loop itself
is training.training_step.
"""

import math

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.heads import IGNORE_INDEX
from minibert.support.runtime import move_to_device


def masked_lm_loss(model, batch):
    """The MLM term ([BERT] 3.1, Task #1) and the model output: cross-entropy
    of the original word piece at each chosen position (mlm_labels != IGNORE_INDEX),
    summed, and how many of them the argmax got right. Sums, not means: the
    caller divides by the count over the whole step (see training.py)."""
    # exercise: mlm-loss
    positions = batch["mlm_labels"] != IGNORE_INDEX
    output = model(batch["input_ids"], attention_mask=batch["attention_mask"],
                   token_type_ids=batch["token_type_ids"], mlm_positions=positions)
    labels = batch["mlm_labels"][positions]
    logits = output.selected_mlm_logits.float()              # (N, V), N = chosen positions
    return (F.cross_entropy(logits, labels, reduction="sum"), (logits.argmax(-1) == labels).sum()), output
    # end exercise


class MaskedLMObjective:
    """Loss terms for `training.training_step`: "mlm", plus "nsp" or "sop" when the
    batches carry sentence-pair labels."""

    def __init__(self, pair_objective="none"):
        self.pair_objective = pair_objective

    def counts(self, batch):
        counts = {"mlm": int((batch["mlm_labels"] != IGNORE_INDEX).sum())}
        if self.pair_objective != "none":
            counts[self.pair_objective] = len(batch["pair_labels"])
        return counts

    def losses(self, model, batch):
        mlm, output = masked_lm_loss(model, batch)
        terms = {"mlm": mlm}
        if self.pair_objective != "none":
            pair_logits = output.pair_logits.float()
            pair_labels = batch["pair_labels"]
            terms[self.pair_objective] = (F.cross_entropy(pair_logits, pair_labels, reduction="sum"),
                                          (pair_logits.argmax(-1) == pair_labels).sum())
        return terms


@torch.no_grad()
def evaluate_mlm(model, batches, num_batches, device, progress=False):
    """Masked-token accuracy (percent) and perplexity (exp of the mean
    cross-entropy) on the first `num_batches` held-out batches (the same
    masks every time), and how many masked tokens they hold."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for i in tqdm(range(min(num_batches, len(batches))), desc="held-out evaluation", leave=False,
                  disable=not progress, dynamic_ncols=True):
        batch = move_to_device(batches[i], device)
        (batch_loss, batch_correct), _ = masked_lm_loss(model, batch)
        loss_sum += float(batch_loss)
        correct += int(batch_correct)
        count += int((batch["mlm_labels"] != IGNORE_INDEX).sum())
    mean_loss = loss_sum / max(count, 1)
    return {"masked_accuracy": 100.0 * correct / max(count, 1), "perplexity": math.exp(min(mean_loss, 50.0)),
            "masked_tokens": count}
