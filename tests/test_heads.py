"""minibert/heads.py: the output layer on the pooled vector or on every token,
the span head, the pooler a model gets when its checkpoint has none, and the
two shared constants (the ignore index, the padding logit)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from minibert.deberta import DebertaConfig, DebertaModel, DebertaPooler
from minibert.heads import IGNORE_INDEX, MASKED_LOGIT, OutputLayer, SpanHead, add_pooler_if_missing
from minibert.model import BertConfig, BertModel, BertModelOutput, Pooler

CONFIG = BertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2, initializer_range=0.02)


def model_output(batch=2, length=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, CONFIG.hidden_size, generator=generator)
    pooled = torch.randn(batch, CONFIG.hidden_size, generator=generator)
    return BertModelOutput(hidden, pooled_output=pooled)


def test_output_layer_reads_the_pooled_vector_or_every_token():
    torch.manual_seed(0)
    output = model_output()
    sentence = OutputLayer(CONFIG, 3, per_token=False).eval()
    tokens = OutputLayer(CONFIG, 3, per_token=True).eval()
    assert torch.all(sentence.classifier.bias == 0) and 0.005 < sentence.classifier.weight.std() < 0.05
    W, b = sentence.classifier.weight, sentence.classifier.bias
    assert torch.allclose(sentence(output), output.pooled_output @ W.T + b)                 # (B, K)
    W, b = tokens.classifier.weight, tokens.classifier.bias
    assert torch.allclose(tokens(output), output.last_hidden_state @ W.T + b)               # (B, T, K)
    assert tokens(output).shape == (2, 5, 3)


def test_output_layer_applies_dropout_in_training_only():
    layer = OutputLayer(CONFIG, 3, per_token=False)
    output = model_output()
    layer.eval()
    assert torch.equal(layer(output), layer(output))
    layer.train()
    torch.manual_seed(1)
    assert not torch.equal(layer(output), layer.eval()(output))


def test_span_head_gives_a_start_and_an_end_logit_per_token():
    torch.manual_seed(0)
    head = SpanHead(CONFIG)
    output = model_output()
    logits = head(output)
    assert logits.shape == (2, 5, 2) and torch.all(head.span.bias == 0)
    S, E = head.span.weight          # the paper's start vector S and end vector E
    assert torch.allclose(logits[..., 0], output.last_hidden_state @ S)
    assert torch.allclose(logits[..., 1], output.last_hidden_state @ E)


def test_a_missing_pooler_is_of_the_models_own_kind():
    class CountingPooler(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    class AskedModel(nn.Module):      # add_pooler_if_missing asks only pooler, pooler_class, config, init_weights
        pooler_class = CountingPooler
        config = CONFIG

        def __init__(self):
            super().__init__()
            self.pooler = None

        def init_weights(self, module):
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.weight)

    model = AskedModel()
    assert add_pooler_if_missing(model) is True
    assert type(model.pooler) is CountingPooler and torch.all(model.pooler.dense.weight == 0)
    assert add_pooler_if_missing(model) is False                     # a second call keeps the first pooler

    bert = BertModel(BertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
                                intermediate_size=16), with_pooler=False, with_pair_head=False)
    deberta = DebertaModel(DebertaConfig(vocab_size=10, hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
                                         intermediate_size=16, max_position_embeddings=16))
    deberta.pooler = None
    assert add_pooler_if_missing(bert) and type(bert.pooler) is Pooler
    assert add_pooler_if_missing(deberta) and type(deberta.pooler) is DebertaPooler


def test_the_ignore_index_is_what_cross_entropy_skips():
    logits = torch.tensor([[2.0, 0.0], [0.0, 5.0]])
    assert F.cross_entropy(logits, torch.tensor([0, IGNORE_INDEX])).item() == \
        F.cross_entropy(logits[:1], torch.tensor([0])).item()


def test_a_masked_logit_gets_probability_zero_and_keeps_a_kl_finite():
    logits = torch.tensor([[1.0, 2.0, MASKED_LOGIT]])
    p = logits.softmax(-1)
    assert p[0, 2].item() == 0.0
    assert abs(p[0, 1].item() - math.exp(2) / (math.exp(1) + math.exp(2))) < 1e-7   # as if the position were absent
    log_p = logits.log_softmax(-1)
    assert torch.isfinite((p * (log_p - log_p)).sum())                # 0 * finite at the padding, not 0 * inf


# ---- coursework exercise: classification-head ---------------------------------------------------


def _exercise_config():
    return BertConfig(vocab_size=20, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
                      hidden_dropout_prob=0.5)


def test_exercise_classification_head_reads_the_pooled_output():
    torch.manual_seed(0)
    head = OutputLayer(_exercise_config(), 3, per_token=False).eval()
    with torch.no_grad():
        head.classifier.weight.copy_(torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, -1.0], [0.5, 0.5, 0.5, 0.5]]))
        head.classifier.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))
    pooled = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 0.0, 1.0]])
    output = BertModelOutput(torch.full((2, 5, 4), 7.0), pooled_output=pooled)
    logits = head(output)
    assert logits.shape == (2, 3)
    torch.testing.assert_close(logits, torch.tensor([[1.0, 1.0, 4.0], [0.0, -2.0, -1.0]]), rtol=1e-5, atol=1e-8)


def test_exercise_classification_head_per_token_reads_every_token():
    torch.manual_seed(0)
    head = OutputLayer(_exercise_config(), 2, per_token=True).eval()
    last = torch.randn(2, 5, 4)
    output = BertModelOutput(last, hidden_states=(torch.zeros(2, 5, 4), last), pooled_output=torch.zeros(2, 4))
    logits = head(output)
    assert logits.shape == (2, 5, 2)
    torch.testing.assert_close(logits, last @ head.classifier.weight.T + head.classifier.bias, rtol=1e-5, atol=1e-6)


def test_exercise_classification_head_applies_dropout_when_training():
    torch.manual_seed(0)
    head = OutputLayer(_exercise_config(), 3, per_token=False).train()
    pooled = torch.randn(6, 4)
    torch.manual_seed(1)
    logits = head(BertModelOutput(torch.zeros(6, 2, 4), pooled_output=pooled))
    torch.manual_seed(1)
    expected = F.linear(F.dropout(pooled, p=0.5, training=True), head.classifier.weight, head.classifier.bias)
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(logits, F.linear(pooled, head.classifier.weight, head.classifier.bias))
