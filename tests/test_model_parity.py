"""minibert equals transformers on the same random weights, to 1e-5 in fp32:
every hidden state, the pooled output, MLM logits and NSP/SOP logits, with padding."""

import pytest
import torch

from minibert.checkpoints import build_and_fill
from minibert.checkpoints.name_maps import normalize_hf_names
from minibert.model import BertConfig, BertModel, attention_reference

transformers = pytest.importorskip("transformers", reason="transformers is the test-only reference implementation")

TOLERANCE = 1e-5


def random_batch(vocab_size, batch=3, length=11, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[1, 7:] = 0          # padding in two rows of different lengths
    attention_mask[2, 4:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros(batch, length, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    return input_ids, attention_mask, token_type_ids


def randomize(module, seed=1):
    """Random values everywhere (LayerNorms and biases too), so a swapped
    weight or a missed bias cannot hide behind the default init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            centre = 1.0 if "LayerNorm.weight" in name or "layer_norm.weight" in name else 0.0
            p.copy_(centre + 0.2 * torch.randn(p.shape, generator=generator))
    return module


def ours_from_hf(hf_model, config):
    tensors, skipped = normalize_hf_names(dict(hf_model.state_dict()))
    return build_and_fill(config, tensors, skipped, "huggingface", source="transformers state dict").eval()


def assert_close(ours, theirs, what):
    diff = (ours - theirs).abs().max().item()
    assert diff <= TOLERANCE, f"{what}: max abs diff {diff:.2e} > {TOLERANCE}"


def compare(hf_model, hf_base, ours, vocab_size, mlm_name, nsp_name):
    input_ids, attention_mask, token_type_ids = random_batch(vocab_size)
    with torch.no_grad():
        theirs = hf_model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          output_hidden_states=True)
        theirs_base = hf_base(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        mine = ours(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    assert len(mine.hidden_states) == len(theirs.hidden_states)
    real = attention_mask.bool()  # padded positions are garbage in both; compare real tokens
    for layer, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {layer}")
    assert_close(mine.pooled_output, theirs_base.pooler_output, "pooled output")
    assert_close(mine.mlm_logits[real], getattr(theirs, mlm_name)[real], "MLM logits")
    assert_close(mine.nsp_logits, getattr(theirs, nsp_name), "NSP/SOP logits")


def test_bert_matches_transformers_on_every_hidden_state_and_head():
    hf_config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                        intermediate_size=37, max_position_embeddings=64, hidden_act="gelu")
    hf_model = randomize(transformers.BertForPreTraining(hf_config).eval())
    config = BertConfig.from_dict(hf_config.to_dict())
    ours = ours_from_hf(hf_model, config)
    compare(hf_model, hf_model.bert, ours, 99, "prediction_logits", "seq_relationship_logits")


@pytest.mark.parametrize("groups,inner_group_num", [(1, 1), (2, 2)], ids=["one-group", "two-groups-inner-two"])
def test_albert_matches_transformers_with_factorized_embeddings_and_sharing(groups, inner_group_num):
    hf_config = transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=4,
                                          num_hidden_groups=groups, inner_group_num=inner_group_num,
                                          num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                          hidden_act="gelu_new")
    hf_model = randomize(transformers.AlbertForPreTraining(hf_config).eval())
    config = BertConfig.from_dict(hf_config.to_dict())
    ours = ours_from_hf(hf_model, config)
    assert len(ours.encoder.layers) == groups * inner_group_num
    compare(hf_model, hf_model.albert, ours, 99, "prediction_logits", "sop_logits")


def test_fused_attention_equals_the_written_out_formula():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, generator=generator) for _ in range(3))
    bias = torch.zeros(2, 1, 1, 9)
    bias[1, ..., 6:] = -10000.0
    fused = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    assert (fused - attention_reference(q, k, v, bias)).abs().max() < 1e-6


def test_mlm_head_on_selected_positions_equals_full_head_at_those_positions():
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=20, max_position_embeddings=32)
    model = BertModel(config).eval()
    input_ids, attention_mask, _ = random_batch(50, length=9)
    positions = torch.zeros_like(input_ids, dtype=torch.bool)
    positions[0, 3] = positions[1, 1] = positions[2, 2] = True
    with torch.no_grad():
        full = model(input_ids, attention_mask).mlm_logits
        sparse = model(input_ids, attention_mask, mlm_positions=positions).mlm_logits
    assert sparse.shape == (3, 50)
    assert (sparse - full[positions]).abs().max() < 1e-5


def test_depth_plans_for_bert_albert_and_duplicated_models():
    assert BertConfig(num_hidden_layers=4).depth_plan() == [0, 1, 2, 3]
    assert BertConfig(model_type="albert", num_hidden_layers=4, num_hidden_groups=1).depth_plan() == [0, 0, 0, 0]
    assert BertConfig(model_type="albert", num_hidden_layers=4, num_hidden_groups=2).depth_plan() == [0, 0, 1, 1]
    duplicated = BertConfig(num_hidden_layers=5, num_hidden_groups=3, layer_order=[0, 0, 1, 1, 2])
    assert duplicated.depth_plan() == [0, 0, 1, 1, 2]


@pytest.mark.parametrize("field,value", [("num_hidden_groups", "2"), ("embedding_size", 0), ("hidden_act", ["gelu"]),
                                         ("num_attention_heads", 5)])
def test_bad_config_fields_are_named_in_a_minibert_error(field, value):
    from minibert.errors import MiniBertError
    with pytest.raises(MiniBertError, match=f"'{field}'" if field != "num_attention_heads" else "hidden_size"):
        BertConfig.from_dict({"hidden_size": 48, field: value})


def test_keeping_only_the_last_hidden_state_changes_no_output():
    config = BertConfig(model_type="albert", vocab_size=60, embedding_size=8, hidden_size=16, num_hidden_layers=4,
                        num_hidden_groups=2, inner_group_num=2, num_attention_heads=2, intermediate_size=20,
                        max_position_embeddings=32, hidden_act="gelu_new")
    model = BertModel(config).eval()
    input_ids, attention_mask, token_type_ids = random_batch(60)
    with torch.no_grad():
        full = model(input_ids, attention_mask, token_type_ids)
        last_only = model(input_ids, attention_mask, token_type_ids, all_hidden_states=False)
    assert len(full.hidden_states) == 1 + 4 * 2 and len(last_only.hidden_states) == 1
    assert torch.equal(full.last_hidden_state, last_only.last_hidden_state)
    assert torch.equal(full.mlm_logits, last_only.mlm_logits) and torch.equal(full.nsp_logits, last_only.nsp_logits)
