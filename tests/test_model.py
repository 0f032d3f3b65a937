"""minibert/model.py, one block at a time: BERT's embeddings, attention,
feed-forward block, LayerNorm, layer and heads, ALBERT's depth plan, each
against its formula or a value worked out by hand. No transformers here: these
tests say what each block *is*, so a broken block fails its own test (and few
others) by name.

The parity tests against transformers live in test_model_parity.py.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from minibert.model import (ACTIVATIONS, BertConfig, BertModel, Embeddings, FeedForward, LayerNorm, MaskedLMHead,
                            Pooler, SelfAttention, TransformerLayer, attention, gelu, gelu_tanh, layer_norm,
                            merge_heads, padding_bias, split_heads)
from minibert.support import MiniBertError
from tiny_models import random_batch, small_config


def randomized(module, seed=0):
    """Every parameter random (LayerNorm gains and biases too), so no term can
    hide behind an initial value of 0 or 1."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator))
    return module.eval()


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------
# Activations
# ----------------------------------------------------------------------------


def test_exact_gelu_is_x_times_the_normal_cdf():
    # Phi(1) = 0.8413447461, Phi(-1) = 0.1586552539 (standard normal table)
    values = gelu(torch.tensor([-1.0, 0.0, 1.0, 3.0], dtype=torch.float64))
    expected = torch.tensor([-0.1586552539, 0.0, 0.8413447461, 3 * 0.9986501020], dtype=torch.float64)
    assert torch.allclose(values, expected, atol=1e-9)


def test_tanh_gelu_at_one_matches_the_hand_computed_value():
    inner = math.sqrt(2 / math.pi) * (1 + 0.044715)
    assert gelu_tanh(torch.tensor(1.0, dtype=torch.float64)).item() == pytest.approx(0.5 * (1 + math.tanh(inner)))
    assert abs(gelu_tanh(torch.tensor(1.0)) - gelu(torch.tensor(1.0))) < 5e-4   # close to, but not, the exact form


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_each_fused_activation_equals_its_written_out_formula(name):
    fused, formula = ACTIVATIONS[name]
    x = torch.linspace(-6, 6, 1001)
    assert (fused(x) - formula(x)).abs().max() < 1e-6


def test_fused_gelu_matches_pytorch_module_names_used_by_configs():
    # The config names map to the functions their checkpoints were trained with.
    x = torch.linspace(-3, 3, 61)
    assert torch.allclose(ACTIVATIONS["gelu"][0](x), F.gelu(x))
    assert torch.allclose(ACTIVATIONS["gelu_new"][0](x), F.gelu(x, approximate="tanh"))


# ----------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------


def test_layer_norm_of_one_two_three_four_by_hand():
    # mean 2.5, biased variance 1.25: (x - 2.5) / sqrt(1.25 + eps), then * gamma + beta
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    gamma = torch.tensor([1.0, 2.0, 1.0, 1.0], dtype=torch.float64)
    beta = torch.tensor([0.0, 0.0, 0.0, 10.0], dtype=torch.float64)
    out = layer_norm(x, gamma, beta, eps=1e-12)
    s = math.sqrt(1.25)
    assert torch.allclose(out, torch.tensor([[-1.5 / s, -1.0 / s, 0.5 / s, 10 + 1.5 / s]], dtype=torch.float64))


def test_fused_layer_norm_equals_the_written_out_formula():
    fused, written = LayerNorm(8, eps=1e-12), LayerNorm(8, eps=1e-12, written_out=True)
    randomized(fused)
    written.load_state_dict(fused.state_dict())
    x = randn(3, 5, 8)
    assert (fused(x) - written(x)).abs().max() < 1e-5


# ----------------------------------------------------------------------------
# Embeddings
# ----------------------------------------------------------------------------


def test_embeddings_are_word_plus_position_plus_segment_then_layer_norm():
    config = small_config()
    embeddings = randomized(Embeddings(config))
    input_ids = torch.tensor([[5, 7, 9]])
    token_type_ids = torch.tensor([[0, 0, 1]])
    total = (embeddings.word_embeddings.weight[input_ids[0]]
             + embeddings.position_embeddings.weight[:3]
             + embeddings.token_type_embeddings.weight[token_type_ids[0]])
    expected = layer_norm(total, embeddings.layer_norm.weight, embeddings.layer_norm.bias, config.layer_norm_eps)
    assert (embeddings(input_ids, token_type_ids)[0] - expected).abs().max() < 1e-5


def test_albert_embeddings_are_projected_from_e_to_h():
    config = small_config(model_type="albert", embedding_size=4, num_hidden_groups=1)
    embeddings = randomized(Embeddings(config))
    out = embeddings(torch.tensor([[1, 2]]), torch.zeros(1, 2, dtype=torch.long))
    assert embeddings.word_embeddings.weight.shape == (40, 4) and out.shape == (1, 2, 8)


def test_a_sequence_longer_than_the_position_table_is_a_clear_error():
    model = BertModel(small_config(max_position_embeddings=16))
    with pytest.raises(MiniBertError, match=r"17 tokens.*max_position_embeddings \(16\)"):
        model(torch.ones(1, 17, dtype=torch.long))


# ----------------------------------------------------------------------------
# Attention
# ----------------------------------------------------------------------------


def test_split_heads_gives_each_head_its_own_slice_and_merge_heads_undoes_it():
    x = torch.arange(2 * 3 * 6, dtype=torch.float32).view(2, 3, 6)      # B=2, T=3, H=6
    heads = split_heads(x, num_heads=3)                                   # D = 2
    assert heads.shape == (2, 3, 3, 2)
    assert torch.equal(heads[1, 2, 0], x[1, 0, 4:6])                      # batch 1, head 2, position 0
    assert torch.equal(merge_heads(heads), x)


def test_attention_by_hand_one_query_two_keys():
    # scores = q.k / sqrt(D) = [2, 0] / sqrt(4) = [1, 0]; softmax -> [e, 1] / (e + 1)
    q = torch.tensor([[[[1.0, 1.0, 0.0, 0.0]]]])                          # (1, 1, 1, 4)
    k = torch.tensor([[[[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]]]])   # (1, 1, 2, 4)
    v = torch.tensor([[[[10.0, 0.0, 0.0, 0.0], [0.0, 10.0, 0.0, 0.0]]]])
    out = attention(q, k, v, torch.zeros(1, 1, 1, 2))
    e = math.e
    assert torch.allclose(out[0, 0, 0], torch.tensor([10 * e / (e + 1), 10 / (e + 1), 0.0, 0.0]))


def test_padding_bias_keeps_attention_off_padded_keys():
    mask = torch.tensor([[1, 1, 0]])
    assert torch.equal(padding_bias(mask, torch.float32), torch.tensor([[[[0.0, 0.0, -10000.0]]]]))
    q, k, v = randn(1, 2, 3, 4, seed=1), randn(1, 2, 3, 4, seed=2), randn(1, 2, 3, 4, seed=3)
    with_padding = attention(q, k, v, padding_bias(mask, torch.float32))
    without_the_padded_key = attention(q, k[:, :, :2], v[:, :, :2], torch.zeros(1, 1, 1, 2))
    assert (with_padding - without_the_padded_key).abs().max() < 1e-6


def test_fused_self_attention_equals_the_written_out_path():
    config = small_config()
    fused = randomized(SelfAttention(config))
    written = SelfAttention(small_config(written_out=True))
    written.load_state_dict(fused.state_dict())
    x, bias = randn(2, 5, 8), padding_bias(torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]), torch.float32)
    assert (fused(x, bias) - written(x, bias)).abs().max() < 1e-5


def test_attention_dropout_drops_probabilities_and_rescales_the_rest():
    torch.manual_seed(0)
    q = k = torch.zeros(1, 1, 1, 4)
    v = torch.eye(4)[None, None, :, :] * 8                 # value j is 8 * e_j; uniform probs 1/4 each
    out = attention(q, k.expand(1, 1, 4, 4), v, torch.zeros(1, 1, 1, 4), dropout_p=0.5)
    # each probability 1/4 is either dropped (0) or kept and scaled by 1/(1-p): 1/2, times 8 -> 4
    assert set(out.flatten().tolist()) <= {0.0, 4.0}


# ----------------------------------------------------------------------------
# Feed-forward block, layer, encoder
# ----------------------------------------------------------------------------


def test_feed_forward_is_w2_gelu_w1():
    block = randomized(FeedForward(small_config()))
    x = randn(2, 3, 8)
    hidden = gelu(x @ block.w1.weight.T + block.w1.bias)                 # (2, 3, I)
    assert (block(x) - (hidden @ block.w2.weight.T + block.w2.bias)).abs().max() < 1e-5


def test_transformer_layer_is_two_post_layer_norm_residual_blocks():
    layer = randomized(TransformerLayer(small_config()))
    x, bias = randn(2, 4, 8), torch.zeros(2, 1, 1, 4)
    h = layer.attention_layer_norm(x + layer.attention(x, bias))
    expected = layer.feed_forward_layer_norm(h + layer.feed_forward(h))
    assert (layer(x, bias) - expected).abs().max() < 1e-6


def test_albert_depth_plan_reuses_its_groups():
    assert BertConfig(num_hidden_layers=4).depth_plan() == [0, 1, 2, 3]
    assert BertConfig(model_type="albert", num_hidden_layers=4, num_hidden_groups=1).depth_plan() == [0, 0, 0, 0]
    assert BertConfig(model_type="albert", num_hidden_layers=4, num_hidden_groups=2).depth_plan() == [0, 0, 1, 1]
    assert BertConfig(num_hidden_layers=5, num_hidden_groups=3, layer_order=[0, 0, 1, 1, 2]).depth_plan() == [
        0, 0, 1, 1, 2]


def test_albert_encoder_runs_its_one_shared_layer_at_every_depth():
    config = small_config(model_type="albert", embedding_size=4, num_hidden_layers=3, num_hidden_groups=1)
    model = randomized(BertModel(config))
    assert len(model.encoder.layers) == 1
    x, bias = randn(1, 3, 8), torch.zeros(1, 1, 1, 3)
    layer = model.encoder.layers[0]
    assert (model.encoder(x, bias)[-1] - layer(layer(layer(x, bias), bias), bias)).abs().max() < 1e-6


# ----------------------------------------------------------------------------
# Heads
# ----------------------------------------------------------------------------


def test_pooler_is_tanh_of_a_linear_map_of_the_first_token_only():
    pooler = randomized(Pooler(small_config()))
    h = randn(2, 5, 8)
    expected = torch.tanh(h[:, 0] @ pooler.dense.weight.T + pooler.dense.bias)
    changed = h.clone()
    changed[:, 1:] = 0                                   # other positions do not matter
    assert (pooler(h) - expected).abs().max() < 1e-6 and torch.equal(pooler(h), pooler(changed))


def test_mlm_head_decodes_with_the_word_embedding_matrix_plus_its_own_bias():
    config = small_config()
    head = randomized(MaskedLMHead(config))
    word_embeddings = randn(40, 8, seed=5)
    h = randn(3, 8)
    transformed = layer_norm(gelu(h @ head.dense.weight.T + head.dense.bias), head.layer_norm.weight,
                             head.layer_norm.bias, config.layer_norm_eps)
    assert (head(h, word_embeddings) - (transformed @ word_embeddings.T + head.bias)).abs().max() < 1e-5


# ----------------------------------------------------------------------------
# The whole model: written-out path vs fused path
# ----------------------------------------------------------------------------


def model_pair(**overrides):
    fused = randomized(BertModel(small_config(**overrides)))
    written = BertModel(small_config(**overrides, written_out=True))
    written.load_state_dict(fused.state_dict())
    return fused, written


def batch():
    input_ids = torch.tensor([[2, 5, 9, 11, 3], [2, 7, 3, 0, 0]])
    attention_mask = (input_ids != 0).long()
    return input_ids, attention_mask


@pytest.mark.parametrize("model_type", ["bert", "albert"])
def test_written_out_model_equals_the_fused_model_in_eval(model_type):
    extra = dict(model_type="albert", embedding_size=4, hidden_act="gelu_new") if model_type == "albert" else {}
    fused, written = model_pair(**extra)
    a, b = fused(*batch()), written(*batch())
    for x, y in zip([*a.hidden_states, a.pooled_output, a.mlm_logits, a.pair_logits],
                    [*b.hidden_states, b.pooled_output, b.mlm_logits, b.pair_logits]):
        assert (x - y).abs().max() < 1e-5


def test_written_out_model_equals_the_fused_model_in_training_with_dropout_off():
    fused, written = model_pair()
    fused.train(), written.train()
    a, b = fused(*batch()), written(*batch())
    assert (a.mlm_logits - b.mlm_logits).abs().max() < 1e-5
    for output in (a, b):
        (output.mlm_logits.square().sum() + output.pair_logits.square().sum()).backward()
    for (name, p), q in zip(fused.named_parameters(), written.parameters()):
        assert (p.grad - q.grad).abs().max() < 1e-4 * max(1.0, p.grad.abs().max().item()), name


def test_use_written_out_switches_every_block():
    model = BertModel(small_config())
    model.use_written_out()
    assert all(m.written_out for m in model.modules() if hasattr(m, "written_out"))
    assert model.use_written_out(False).embeddings.layer_norm.written_out is False


def test_mlm_head_on_selected_positions_equals_full_head_at_those_positions():
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=20, max_position_embeddings=32)
    model = BertModel(config).eval()
    input_ids, attention_mask, _ = random_batch(50, length=9)
    positions = torch.zeros_like(input_ids, dtype=torch.bool)
    positions[0, 3] = positions[1, 1] = positions[2, 2] = True
    with torch.no_grad():
        full = model(input_ids, attention_mask).mlm_logits
        sparse = model(input_ids, attention_mask, mlm_positions=positions).selected_mlm_logits
    assert sparse.shape == (3, 50)
    assert (sparse - full[positions]).abs().max() < 1e-5


def test_keeping_only_the_last_hidden_state_changes_no_output():
    config = BertConfig(model_type="albert", vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=4,
                        num_hidden_groups=2, inner_group_num=2, num_attention_heads=2, intermediate_size=20,
                        max_position_embeddings=32, hidden_act="gelu_new")
    model = BertModel(config).eval()
    input_ids, attention_mask, token_type_ids = random_batch(60)
    with torch.no_grad():
        full = model(input_ids, attention_mask, token_type_ids)
        last_only = model(input_ids, attention_mask, token_type_ids, all_hidden_states=False)
    assert len(full.hidden_states) == 1 + 4 * 2 and last_only.hidden_states is None
    assert torch.equal(full.last_hidden_state, last_only.last_hidden_state)
    assert torch.equal(full.mlm_logits, last_only.mlm_logits) and torch.equal(full.pair_logits, last_only.pair_logits)


# ----------------------------------------------------------------------------
# Exercises of assignment 1 (docs/coursework.md): each test calls its own
# exercise's function and uses PyTorch's fused kernels for everything else.
# ----------------------------------------------------------------------------


def exercise_config(**overrides):
    """A tiny BERT config (H = 8, two heads), fused kernels everywhere."""
    values = dict(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=12,
                  max_position_embeddings=10, type_vocab_size=2)
    return BertConfig(**{**values, **overrides})


def exercise_randomized(module, seed=0):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator))
    return module.eval()


def test_exercise_embeddings_sum():
    embeddings = exercise_randomized(Embeddings(exercise_config()))
    input_ids, token_type_ids = torch.tensor([[3, 7, 7, 1]]), torch.tensor([[0, 0, 1, 1]])
    total = (embeddings.word_embeddings.weight[[3, 7, 7, 1]]
             + embeddings.position_embeddings.weight[[0, 1, 2, 3]]
             + embeddings.token_type_embeddings.weight[[0, 0, 1, 1]])
    expected = F.layer_norm(total, (8,), embeddings.layer_norm.weight, embeddings.layer_norm.bias, 1e-12)
    out = embeddings(input_ids, token_type_ids)
    assert out.shape == (1, 4, 8)
    assert (out[0] - expected).abs().max() < 1e-5


def test_exercise_embeddings_sum_projects_albert_from_e_to_h():
    config = exercise_config(model_type="albert", embedding_size=4, num_hidden_groups=1)
    embeddings = exercise_randomized(Embeddings(config), seed=1)
    input_ids, token_type_ids = torch.tensor([[2, 5]]), torch.tensor([[0, 1]])
    total = (embeddings.word_embeddings.weight[[2, 5]] + embeddings.position_embeddings.weight[[0, 1]]
             + embeddings.token_type_embeddings.weight[[0, 1]])                              # (2, E = 4)
    normed = F.layer_norm(total, (4,), embeddings.layer_norm.weight, embeddings.layer_norm.bias, 1e-12)
    expected = normed @ embeddings.projection.weight.T + embeddings.projection.bias       # (2, H = 8)
    out = embeddings(input_ids, token_type_ids)
    assert out.shape == (1, 2, 8)
    assert (out[0] - expected).abs().max() < 1e-5


def test_exercise_attention():
    # One query, two keys: scores q.k / sqrt(D) = [2, 0] / 2 = [1, 0], softmax [e, 1] / (e + 1).
    q = torch.tensor([[[[1.0, 1.0, 0.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]]]])
    v = torch.tensor([[[[10.0, 0.0, 0.0, 0.0], [0.0, 10.0, 0.0, 0.0]]]])
    e = math.e
    out = attention(q, k, v, torch.zeros(1, 1, 1, 2))
    torch.testing.assert_close(
        out[0, 0, 0], torch.tensor([10 * e / (e + 1), 10 / (e + 1), 0.0, 0.0]), rtol=1e-5, atol=1e-8)
    # Many heads and a padded key: the same numbers as PyTorch's own kernel.
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=generator) for _ in range(3))
    bias = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, -10000.0, -10000.0]])[:, None, None, :]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert (attention(q, k, v, bias) - expected).abs().max() < 1e-5


def test_exercise_attention_drops_probabilities_and_rescales_the_rest():
    torch.manual_seed(0)
    q, k = torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4)
    v = torch.eye(4)[None, None] * 8                     # value j is 8 e_j; all four probabilities are 1/4
    out = attention(q, k, v, torch.zeros(1, 1, 1, 4), dropout_p=0.5)
    # each 1/4 is dropped (0) or kept and scaled by 1 / (1 - p): 1/2, times 8 -> 4
    assert set(out.flatten().tolist()) == {0.0, 4.0}
    torch.testing.assert_close(
        attention(q, k, v, torch.zeros(1, 1, 1, 4)), torch.full((1, 1, 4, 4), 2.0), rtol=0, atol=0)


def test_exercise_padding_mask():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    bias = padding_bias(mask, torch.float32)
    assert bias.shape == (2, 1, 1, 3) and bias.dtype == torch.float32
    torch.testing.assert_close(
        bias, torch.tensor([[[[0.0, 0.0, -10000.0]]], [[[0.0, -10000.0, -10000.0]]]]), rtol=0, atol=0)
    assert padding_bias(torch.tensor([[1, 0]]), torch.float64).dtype == torch.float64


def test_exercise_split_merge_heads():
    x = torch.arange(2 * 3 * 6, dtype=torch.float32).view(2, 3, 6)      # B = 2, T = 3, H = 6
    heads = split_heads(x, num_heads=3)                                   # A = 3, D = 2
    assert heads.shape == (2, 3, 3, 2)
    assert heads[1, 2, 0].tolist() == [22.0, 23.0]                        # batch 1, head 2, position 0: x[1, 0, 4:6]
    assert heads[0, 1, 2].tolist() == [14.0, 15.0]                        # batch 0, head 1, position 2: x[0, 2, 2:4]
    torch.testing.assert_close(merge_heads(heads), x, rtol=0, atol=0)


def test_exercise_gelu_erf():
    # Phi(1) = 0.8413447461, Phi(-1) = 0.1586552539, Phi(3) = 0.9986501020 (standard normal table)
    values = gelu(torch.tensor([-1.0, 0.0, 1.0, 3.0], dtype=torch.float64))
    expected = torch.tensor([-0.1586552539, 0.0, 0.8413447461, 3 * 0.9986501020], dtype=torch.float64)
    torch.testing.assert_close(values, expected, rtol=1e-5, atol=1e-9)
    x = torch.linspace(-6, 6, 101)
    assert (gelu(x) - F.gelu(x)).abs().max() < 1e-6


def test_exercise_gelu_tanh():
    inner = math.sqrt(2 / math.pi) * (1 + 0.044715)                      # x = 1
    assert gelu_tanh(torch.tensor(1.0, dtype=torch.float64)).item() == pytest.approx(0.5 * (1 + math.tanh(inner)))
    x = torch.linspace(-6, 6, 101)
    assert (gelu_tanh(x) - F.gelu(x, approximate="tanh")).abs().max() < 1e-6


def test_exercise_layer_norm():
    # x = 1, 2, 3, 4: mean 2.5, biased variance 1.25
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    out = layer_norm(x, torch.tensor([1.0, 1.0, 2.0, 2.0], dtype=torch.float64),
                     torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64), 1e-12)
    s = math.sqrt(1.25)
    torch.testing.assert_close(out, torch.tensor([[-1.5 / s, -0.5 / s, 2 * 0.5 / s, 2 * 1.5 / s + 1]],
                                                 dtype=torch.float64))
    # eps = 1, where its place shows: sqrt(1.25 + 1) = 1.5 divides x - 2.5 (1 + sqrt(1.25) = 2.118 would not)
    out = layer_norm(x, torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64), 1.0)
    torch.testing.assert_close(out, torch.tensor([[-1.0, -1 / 3, 1 / 3, 1.0]], dtype=torch.float64),
                               msg=lambda text: f"eps = 1: {text} (is eps added to the variance, under the root?)")
    generator = torch.Generator().manual_seed(0)
    x, gamma, beta = (torch.randn(shape, generator=generator) for shape in ((2, 3, 8), (8,), (8,)))
    torch.testing.assert_close(layer_norm(x, gamma, beta, 1e-5), F.layer_norm(x, (8,), gamma, beta, 1e-5),
                               rtol=1e-5, atol=1e-5)


def test_exercise_feed_forward():
    block = exercise_randomized(FeedForward(exercise_config()))        # fused GELU
    x = torch.randn(2, 3, 8, generator=torch.Generator().manual_seed(1))
    hidden = F.gelu(x @ block.w1.weight.T + block.w1.bias)            # (2, 3, I = 12)
    expected = hidden @ block.w2.weight.T + block.w2.bias              # (2, 3, H = 8)
    out = block(x)
    assert out.shape == (2, 3, 8)
    assert (out - expected).abs().max() < 1e-5


def test_exercise_albert_depth_plan():
    def plan(layers, groups):
        return BertConfig(model_type="albert", num_hidden_layers=layers, num_hidden_groups=groups).depth_plan()
    assert plan(12, 1) == [0] * 12                                     # ALBERT-base: one shared layer
    assert plan(4, 2) == [0, 0, 1, 1]
    assert plan(12, 3) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert plan(5, 2) == [0, 0, 0, 1, 1]                               # l * G // L: 0, 0.4, 0.8, 1.2, 1.6


def test_bert_and_deberta_encoders_return_the_input_then_every_layer_or_the_last_two():
    from minibert.deberta import DebertaConfig, DebertaModel
    bert = BertModel(small_config(num_hidden_layers=3)).eval()
    deberta = DebertaModel(DebertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
                                         intermediate_size=16, max_position_embeddings=16)).eval()
    x, mask = randn(1, 4, 8), torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad():
        for encoder, second in ((bert.encoder, torch.zeros(1, 1, 1, 4)), (deberta.encoder, mask)):
            states = encoder(x, second)
            last_two = encoder(x, second, keep_all=False)
            assert len(states) == 4 and states[0] is x
            assert torch.equal(last_two[0], states[-2]) and torch.equal(last_two[1], states[-1])


def test_depth_labels_name_each_hidden_state_for_bert_copies_albert_runs_and_deberta():
    from minibert.deberta import DebertaConfig
    assert small_config(num_hidden_layers=2).depth_labels() == ["embeddings", "layer 0", "layer 1"]
    assert small_config(num_hidden_layers=2).depth_labels([0, 0, 1]) == \
        ["embeddings", "layer 0", "layer 0 (copy)", "layer 1"]
    albert = small_config(model_type="albert", embedding_size=4, num_hidden_layers=2, num_hidden_groups=1)
    assert albert.depth_labels() == ["embeddings (projected to H)", "group 0, run 1", "group 0, run 2"]
    deberta = DebertaConfig(vocab_size=50, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=16, max_position_embeddings=16)
    assert deberta.depth_labels([1, 1]) == ["embeddings", "layer 1", "layer 1 (copy)"]
    assert not hasattr(deberta, "inner_group_num")
