"""The student of Tang et al. 2019 (minibert/lstm.py): the LSTM cell against
its equations and torch.nn.LSTMCell, the written-out LSTM against the fused
kernel (values and gradients), padding handled in both directions, and the
classifier's features, initialisation, size and config."""

import math

import pytest
import torch
import torch.nn as nn

from minibert.support import MiniBertError
from minibert.lstm import LSTM, BiLSTMClassifier, StudentConfig, lstm_cell


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def lstm_with_random_weights(input_size, hidden_size, bidirectional=True, seed=0):
    lstm = LSTM(input_size, hidden_size, bidirectional=bidirectional)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in lstm.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=generator))
    return lstm


def padded(sequences):
    """Right-pad a list of (T_i, I) tensors into (B, T, I) with lengths (B,);
    the padding is random, not zero, so that reading it would show."""
    T = max(len(s) for s in sequences)
    x = randn(len(sequences), T, sequences[0].shape[1], seed=99)
    for b, s in enumerate(sequences):
        x[b, :len(s)] = s
    return x, torch.tensor([len(s) for s in sequences])


# ----------------------------------------------------------------------------
# The cell
# ----------------------------------------------------------------------------


def test_lstm_cell_gates_match_a_hand_computation():
    # I = H = 1: each gate is one number. Rows of weight_ih are i, f, g, o.
    weight_ih = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float64)
    weight_hh = torch.tensor([[0.5], [-0.5], [1.0], [-1.0]], dtype=torch.float64)
    bias_ih = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    bias_hh = torch.tensor([0.0, -0.1, 0.0, 0.1], dtype=torch.float64)
    x, h, c = 0.5, 0.2, -0.3
    sigmoid = lambda z: 1 / (1 + math.exp(-z))
    i = sigmoid(1 * x + 0.1 + 0.5 * h + 0.0)
    f = sigmoid(2 * x + 0.2 - 0.5 * h - 0.1)
    g = math.tanh(3 * x + 0.3 + 1.0 * h + 0.0)
    o = sigmoid(4 * x + 0.4 - 1.0 * h + 0.1)
    c_expected = f * c + i * g
    h_expected = o * math.tanh(c_expected)
    as_tensor = lambda v: torch.tensor([[v]], dtype=torch.float64)
    h_new, c_new = lstm_cell(as_tensor(x), as_tensor(h), as_tensor(c), weight_ih, weight_hh, bias_ih, bias_hh)
    assert c_new.item() == pytest.approx(c_expected, abs=1e-12)
    assert h_new.item() == pytest.approx(h_expected, abs=1e-12)


def test_lstm_cell_equals_one_step_of_torch_lstm_cell():
    torch.manual_seed(0)
    reference = nn.LSTMCell(5, 4)
    x, h, c = randn(3, 5, seed=1), randn(3, 4, seed=2), randn(3, 4, seed=3)
    h_ref, c_ref = reference(x, (h, c))
    h_new, c_new = lstm_cell(x, h, c, reference.weight_ih, reference.weight_hh, reference.bias_ih, reference.bias_hh)
    torch.testing.assert_close(h_new, h_ref, atol=1e-6, rtol=0)
    torch.testing.assert_close(c_new, c_ref, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------
# The LSTM: written out vs fused, padding
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("bidirectional", [True, False])
def test_written_out_and_fused_lstm_agree_in_values_and_gradients(bidirectional):
    lstm = lstm_with_random_weights(3, 4, bidirectional)
    x = randn(4, 6, 3, seed=1)
    lengths = torch.tensor([1, 6, 3, 5])                     # length 1 and the full length included
    D = 2 if bidirectional else 1
    out_weights, final_weights = randn(4, 6, D * 4, seed=2), randn(4, D * 4, seed=3)
    results = {}
    for written_out in (False, True):
        lstm.written_out = written_out
        lstm.zero_grad()
        x_leaf = x.clone().requires_grad_()
        outputs, final = lstm(x_leaf, lengths)
        assert outputs.shape == (4, 6, D * 4) and final.shape == (4, D * 4)
        ((outputs * out_weights).sum() + (final * final_weights).sum()).backward()
        grads = {name: p.grad.clone() for name, p in lstm.named_parameters()}
        results[written_out] = outputs.detach(), final.detach(), x_leaf.grad, grads
    (out_f, fin_f, gx_f, g_f), (out_w, fin_w, gx_w, g_w) = results[False], results[True]
    torch.testing.assert_close(out_w, out_f, atol=1e-5, rtol=0)
    torch.testing.assert_close(fin_w, fin_f, atol=1e-5, rtol=0)
    torch.testing.assert_close(gx_w, gx_f, atol=1e-5, rtol=0)
    assert gx_f[0, 1:].abs().max() == 0                      # nothing flows into padding
    assert set(g_f) == set(g_w) and len(g_f) == 4 * D
    for name in g_f:
        assert g_f[name].abs().max() > 0, name
        torch.testing.assert_close(g_w[name], g_f[name], atol=1e-5, rtol=0, msg=name)


@pytest.mark.parametrize("written_out", [False, True])
def test_outputs_are_zero_at_padding_and_final_states_sit_at_the_real_ends(written_out):
    lstm = lstm_with_random_weights(3, 4)
    lstm.written_out = written_out
    x, lengths = randn(3, 5, 3, seed=4), torch.tensor([2, 5, 1])
    outputs, final = lstm(x, lengths)
    for b, length in enumerate(lengths.tolist()):
        assert torch.all(outputs[b, length:] == 0)                          # empty slice for the full length
        assert outputs[b, :length].abs().min() > 0
        torch.testing.assert_close(final[b, :4], outputs[b, length - 1, :4])   # forward: after the last real token
        torch.testing.assert_close(final[b, 4:], outputs[b, 0, 4:])            # backward: after reaching position 0


@pytest.mark.parametrize("written_out", [False, True])
def test_backward_direction_starts_at_the_real_end_of_a_padded_sequence(written_out):
    lstm = lstm_with_random_weights(3, 4)
    lstm.written_out = written_out
    short, long = randn(2, 3, seed=5), randn(6, 3, seed=6)
    x, lengths = padded([short, long])
    outputs, final = lstm(x, lengths)
    alone_outputs, alone_final = lstm(short.unsqueeze(0), torch.tensor([2]))
    torch.testing.assert_close(final[0], alone_final[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(outputs[0, :2], alone_outputs[0], atol=1e-6, rtol=0)
    # The same numbers from torch.nn.LSTM, which loads this module's state dict as it is.
    reference = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    reference.load_state_dict(lstm.state_dict())
    ref_outputs, (h_n, _) = reference(short.unsqueeze(0))
    torch.testing.assert_close(final[0], torch.cat([h_n[0, 0], h_n[1, 0]]), atol=1e-6, rtol=0)
    torch.testing.assert_close(outputs[0, :2], ref_outputs[0], atol=1e-6, rtol=0)
    # Reading the padding as if it were text would have changed the backward state.
    unpacked_outputs, _ = reference(x[:1])
    assert (unpacked_outputs[0, 0, 4:] - outputs[0, 0, 4:]).abs().max() > 1e-3


def test_lstm_rejects_lengths_outside_one_to_t():
    lstm = LSTM(3, 4)
    x = randn(2, 5, 3)
    with pytest.raises(MiniBertError, match="every length in 1..5"):
        lstm(x, torch.tensor([0, 5]))
    with pytest.raises(MiniBertError, match="every length in 1..5"):
        lstm(x, torch.tensor([6, 5]))
    with pytest.raises(MiniBertError, match="integer tensor of shape"):
        lstm(x, torch.tensor([2.0, 5.0]))
    with pytest.raises(MiniBertError, match=r"expected \(batch, length, 3\)"):
        lstm(randn(2, 5, 4), torch.tensor([2, 5]))


# ----------------------------------------------------------------------------
# The classifier
# ----------------------------------------------------------------------------


def small_config(**overrides):
    values = dict(vocab_size=30, num_classes=3, embedding_dim=6, hidden_size=4, fc_size=5, dropout=0.0)
    return StudentConfig(**{**values, **overrides})


def batch(rows, T=None, padding_id=0):
    """Token id lists -> right-padded input_ids and attention_mask."""
    T = T or max(len(r) for r in rows)
    input_ids = torch.full((len(rows), T), padding_id)
    attention_mask = torch.zeros(len(rows), T, dtype=torch.long)
    for b, row in enumerate(rows):
        input_ids[b, :len(row)] = torch.tensor(row)
        attention_mask[b, :len(row)] = 1
    return input_ids, attention_mask


SENTENCES = [[5, 9, 2], [7], [3, 4, 8, 11, 12, 13]]
OTHERS = [[6, 6, 1, 2, 29], [10, 3], [8]]


@pytest.mark.parametrize("pair", [False, True])
def test_classifier_gives_one_row_of_logits_per_example(pair):
    torch.manual_seed(0)
    model = BiLSTMClassifier(small_config(pair=pair))
    second = batch(OTHERS) if pair else (None, None)
    logits = model(*batch(SENTENCES), *second)
    assert logits.shape == (3, 3)
    assert model.fc1.in_features == (8 * 4 if pair else 2 * 4)


def test_siamese_features_are_h1_h2_product_and_absolute_difference():
    torch.manual_seed(0)
    model = BiLSTMClassifier(small_config(pair=True)).eval()
    seen = []
    model.fc1.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0]))
    a, b = batch(SENTENCES), batch(OTHERS)
    logits = model(*a, *b)
    h1, h2 = model.encode(*a), model.encode(*b)                # (B, 2H) each, the same shared BiLSTM
    assert h1.shape == (3, 8)
    expected = torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=1)   # (B, 8H)
    torch.testing.assert_close(seen[0], expected)
    torch.testing.assert_close(logits, model.fc2(torch.relu(model.fc1(expected))))


def test_embeddings_start_uniform_in_plus_minus_a_quarter_with_a_zero_padding_vector():
    torch.manual_seed(0)
    model = BiLSTMClassifier(small_config(vocab_size=200, embedding_dim=50, padding_id=3))
    weight = model.embedding.weight.detach()
    others = torch.cat([weight[:3], weight[4:]])
    assert others.abs().max() <= 0.25
    assert others.min() < -0.24 and others.max() > 0.24      # the whole range is used
    assert abs(others.mean().item()) < 0.01 and others.std().item() == pytest.approx(0.5 / math.sqrt(12), rel=0.05)
    assert weight[3].abs().max() == 0


def test_max_pooling_takes_the_maximum_over_real_positions_only():
    torch.manual_seed(0)
    model = BiLSTMClassifier(small_config(pooling="max")).eval()
    input_ids, attention_mask = batch(SENTENCES)
    pooled = model.encode(input_ids, attention_mask)
    outputs, _ = model.lstm(model.embedding(input_ids), attention_mask.sum(1))
    for b, row in enumerate(SENTENCES):
        expected = outputs[b, :len(row)].max(dim=0).values
        torch.testing.assert_close(pooled[b], expected)
    # The one-token sentence has negative maxima, which a zero from padding would have beaten.
    assert (outputs[1, :1].max(dim=0).values < 0).any()


@pytest.mark.parametrize("pooling", ["final", "max"])
@pytest.mark.parametrize("pair", [False, True])
def test_padding_changes_nothing(pair, pooling):
    torch.manual_seed(0)
    model = BiLSTMClassifier(small_config(pair=pair, pooling=pooling, dropout=0.3)).eval()
    together = model(*batch(SENTENCES, T=9), *(batch(OTHERS, T=7) if pair else (None, None)))
    for b in range(3):
        second = batch([OTHERS[b]]) if pair else (None, None)
        alone = model(*batch([SENTENCES[b]]), *second)
        torch.testing.assert_close(together[b], alone[0], atol=1e-6, rtol=0)


def test_parameter_count_of_the_sst2_student_by_hand():
    V, E, H, fc, K = 1000, 300, 150, 200, 2
    model = BiLSTMClassifier(StudentConfig(vocab_size=V, num_classes=K))   # d-bert's SST-2 sizes are the defaults
    per_direction = 4 * H * E + 4 * H * H + 2 * 4 * H      # weight_ih, weight_hh, two biases
    expected = V * E + 2 * per_direction + (2 * H * fc + fc) + (fc * K + K)
    assert per_direction == 271_200
    assert model.num_parameters() == expected == 300_000 + 542_400 + 60_200 + 402
    pair_model = BiLSTMClassifier(StudentConfig(vocab_size=V, num_classes=K, pair=True))
    assert pair_model.num_parameters() == expected + 6 * H * fc


def test_classifier_rejects_masks_that_are_not_right_padded_and_missing_pairs():
    torch.manual_seed(0)
    model = BiLSTMClassifier(small_config())
    input_ids, attention_mask = batch(SENTENCES)
    with pytest.raises(MiniBertError, match="ones then zeros"):
        model(input_ids, attention_mask.flip(1))
    with pytest.raises(MiniBertError, match="single-sentence model"):
        model(input_ids, attention_mask, input_ids, attention_mask)
    with pytest.raises(MiniBertError, match="a pair model"):
        BiLSTMClassifier(small_config(pair=True))(input_ids, attention_mask)


# ----------------------------------------------------------------------------
# StudentConfig
# ----------------------------------------------------------------------------


def test_student_config_round_trips_through_a_dict():
    config = StudentConfig(vocab_size=500, num_classes=3, hidden_size=300, pair=True, pooling="max",
                           dropout=0.2, padding_id=7)
    values = config.to_dict()
    assert values["hidden_size"] == 300 and values["pair"] is True and values["embedding_dim"] == 300
    assert StudentConfig.from_dict(values, "student.json") == config
    assert StudentConfig.from_dict({"vocab_size": 500, "num_classes": 2}, "x.json") == StudentConfig(500, 2)


def test_a_student_json_without_embeddings_mode_loads_as_rand_with_one_trained_table():
    config = StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2}, "old/student.json")
    model = BiLSTMClassifier(config)
    assert config.embeddings_mode == "rand" and model.embedding.weight.requires_grad
    assert not hasattr(model, "static_embedding") and model.lstm.input_size == 300
    with pytest.raises(MiniBertError, match="old/student.json: student config field 'embeddings_mode' = 'non-static'"):
        StudentConfig.from_dict({"vocab_size": 50, "num_classes": 2, "embeddings_mode": "non-static"},
                                "old/student.json")


def test_static_mode_freezes_the_table_and_multichannel_reads_a_frozen_and_a_trained_copy():
    static = BiLSTMClassifier(StudentConfig(20, 2, embedding_dim=4, hidden_size=3, embeddings_mode="static"))
    assert not static.embedding.weight.requires_grad and static.lstm.input_size == 4
    torch.manual_seed(0)
    model = BiLSTMClassifier(StudentConfig(20, 2, embedding_dim=4, hidden_size=3, embeddings_mode="multichannel"))
    assert model.lstm.input_size == 8 and not model.static_embedding.weight.requires_grad
    assert torch.equal(model.static_embedding.weight, model.embedding.weight)    # both start from the same vectors
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(model.embed(ids), torch.cat([model.embedding(ids), model.embedding(ids)], dim=-1))
    model(ids, torch.ones_like(ids)).sum().backward()
    assert model.static_embedding.weight.grad is None and model.embedding.weight.grad[5].abs().sum() > 0


# ---- coursework exercise: lstm-gates ------------------------------------------------------------


def test_exercise_lstm_gates_match_torch_lstm_cell():
    torch.manual_seed(0)
    cell = nn.LSTMCell(3, 4)
    x, h, c = torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)
    h_new, c_new = lstm_cell(x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    h_torch, c_torch = cell(x, (h, c))
    assert torch.allclose(h_new, h_torch, atol=1e-6) and torch.allclose(c_new, c_torch, atol=1e-6)


def test_exercise_lstm_gates_by_hand():
    # zero weights: i = f = o = sigmoid(0) = 1/2 and g = tanh(bias of g), in the row order i, f, g, o
    zeros = torch.zeros(4, 1)
    bias_ih = torch.tensor([0.0, 0.0, 1.0, 0.0])
    h_new, c_new = lstm_cell(torch.ones(1, 1), torch.ones(1, 1), torch.full((1, 1), 2.0), zeros, zeros,
                             bias_ih, torch.zeros(4))
    c_expected = 0.5 * 2.0 + 0.5 * math.tanh(1.0)
    assert c_new.item() == pytest.approx(c_expected, rel=1e-6)
    assert h_new.item() == pytest.approx(0.5 * math.tanh(c_expected), rel=1e-6)
