"""The heads fine-tuning puts on a pretrained encoder ([BERT] 4, Figure 4).

Below both the task objects (minibert/tasks/) and the fine-tuning lesson
(minibert/finetuning.py: TaskModel, the objective), which both use them:

  OutputLayer            one linear layer on the pooled [CLS] vector (a class
                         per sentence) or on every token (a class per token)
  SpanHead               start and end logits for every token (SQuAD)
  add_pooler_if_missing  the pooler a sentence head reads, of the model's own kind

and the two constants every loss and every mask shares:

  IGNORE_INDEX   the label of a position (or example) the cross-entropy skips
  MASKED_LOGIT   the logit a padding position gets, so its probability is 0
"""

import torch.nn as nn

# F.cross_entropy's ignore_index: a position not chosen for MLM (pretraining),
# a token that starts no word (NER), an augmented sentence without a gold label
# (distillation). The loss and its count skip it.
IGNORE_INDEX = -100

# Padding positions get this logit before a softmax over positions (SQuAD's
# start and end) or over classes. -1e9 rather than -inf: exp(-1e9 - max)
# underflows to exactly 0 in float32, so the probabilities and the loss are
# the same as with -inf, yet the logit stays finite, so the terms p log p and
# p (log p - log q) of a KL (SiFT) are 0 * finite = 0 at padding, where -inf
# would give 0 * (-inf) = NaN.
MASKED_LOGIT = -1e9


class OutputLayer(nn.Module):
    """The one layer fine-tuning adds ([BERT] 4): logits = W dropout(h) + b,
    with h the pooled [CLS] vector C (sentence tasks, Figure 4a/b) or every
    token's final vector T_i (token tasks, Figure 4d). W starts as N(0, 0.02)
    and b at zero, as Google's output_weights/output_bias."""

    def __init__(self, config, num_outputs, per_token):
        super().__init__()
        self.per_token = per_token
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, output):
        # exercise: classification-head
        if self.per_token:
            h = output.last_hidden_state         # (B, T, H): every token's final vector T_i
        else:
            h = output.pooled_output             # (B, H): the pooled [CLS] vector C
        return self.classifier(self.dropout(h))  # W dropout(h) + b: (B, T, K) or (B, K)
        # end exercise


class SpanHead(nn.Module):
    """Start and end logits for every token: (B, T, H) -> (B, T, 2)
    ([BERT] 4.2, Figure 4c: a start vector S and an end vector E, the two
    rows of one linear layer).

    run_squad.py applies no dropout here (unlike the classifier) and
    initialises the weights from a (truncated) normal of std
    initializer_range = 0.02, the bias at zero."""

    def __init__(self, config):
        super().__init__()
        self.span = nn.Linear(config.hidden_size, 2)
        nn.init.normal_(self.span.weight, std=config.initializer_range)
        nn.init.zeros_(self.span.bias)

    def forward(self, output):
        return self.span(output.last_hidden_state)


def add_pooler_if_missing(model):
    """Sentence-level heads read the pooled output. A checkpoint saved without
    a pooler (Hugging Face's BertForMaskedLM files, the bundled model, every
    released DeBERTa) gets a freshly initialised one, as transformers does;
    the load report says so. The pooler is the model's own kind,
    `model.pooler_class`: BERT's tanh Pooler, or DeBERTa's DebertaPooler
    (GELU, transformers' ContextPooler), the one a saved DeBERTa folder is
    loaded back with. Returns whether it added one."""
    if model.pooler is not None:
        return False
    model.pooler = model.pooler_class(model.config)
    model.pooler.apply(model.init_weights)
    report = getattr(model, "load_report", None)
    if report is not None:
        report.skipped.append(("pooler.dense", "not in the checkpoint: freshly initialised for fine-tuning"))
    return True
