"""minibert equals transformers on the same random weights, to 1e-5 in fp32:
every hidden state, the pooled output, MLM logits and NSP/SOP logits, with padding."""

import pytest
import torch

from minibert.checkpoints import build_and_fill
from minibert.checkpoints.name_maps import normalize_hf_names
from minibert.model import BertConfig
from tiny_models import random_batch

transformers = pytest.importorskip("transformers", reason="transformers is the test-only reference implementation")

TOLERANCE = 1e-5


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
    assert_close(mine.pair_logits, getattr(theirs, nsp_name), "NSP/SOP logits")


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
