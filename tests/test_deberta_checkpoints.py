"""load_pretrained / save_pretrained for DeBERTa, and its hub ids, on tiny
random models.

1. ours -> save_pretrained -> load_pretrained is lossless (tensors, config,
   every output), v1 and v3; a v1 model is written as a v1 file (in_proj).
2. transformers loads the folder we write, with no missing or unexpected
   keys, the very tensors we wrote, and the same hidden states (1e-5).
3. We load the folders transformers writes (Deberta(V2)ForMaskedLM,
   safetensors and pytorch_model.bin, float32 and float16, both heads) and
   compute what it computes.
4. The parts released files have (absolute table, v3's RTD head, no
   `deberta.` prefix) load, and what is skipped is reported.
5. Missing, unexpected and mis-shaped tensors are one-line MiniBertErrors.
6. Hub ids (microsoft/deberta-v3-xsmall, microsoft/deberta-base) load
   through huggingface_hub from the local stand-in hub of test_hub.py.

transformers is the test-only oracle; the tests that need it skip without it.
"""

import io
import json
from pathlib import Path

import pytest
import torch

from minibert.checkpoints import huggingface_state_dict, load_pretrained, save_pretrained
from minibert.checkpoints.name_maps import fuse_v1_in_proj, split_v1_in_proj
from minibert.checkpoints.safetensors import load_safetensors
from minibert.deberta import DebertaConfig, DebertaModel
from minibert.support import MiniBertError
from test_deberta import TINY, V1, V3, batch, randomize
from test_hub import env, fake_hub, hf_home, run_minibert, snapshot  # noqa: F401 (the shared fixtures)

TOLERANCE = 1e-5

SHAPES = {
    "v1": V1,
    "v3": V3,
    "v2 conv, own relative projections": {**V3, "conv_kernel_size": 3, "conv_act": "gelu", "share_att_key": False},
    "v1 position-biased, token types, p2c only": {**V1, "position_biased_input": True, "type_vocab_size": 2,
                                                  "pos_att_type": "p2c"},
}


def tiny(shape="v3", with_pooler=False, with_mlm_head=True, seed=1):
    return randomize(DebertaModel(DebertaConfig(**TINY, **SHAPES[shape]), with_pooler=with_pooler,
                                  with_mlm_head=with_mlm_head), seed=seed)


def outputs(model, inputs):
    input_ids, attention_mask, token_type_ids = inputs
    with torch.no_grad():
        out = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    return [*out.hidden_states, out.mlm_logits, out.pooled_output]


def assert_same_outputs(a, b, inputs):
    for i, (x, y) in enumerate(zip(outputs(a, inputs), outputs(b, inputs), strict=True)):
        assert (x is None) == (y is None), f"output {i}: present in one model only"
        if x is not None:
            assert torch.equal(x, y), f"output {i}: max abs diff {(x - y).abs().max().item():.2e}"


def assert_close(ours, theirs, what):
    assert ours.shape == theirs.shape, f"{what}: shapes {tuple(ours.shape)} vs {tuple(theirs.shape)}"
    diff = (ours - theirs).abs().max().item()
    assert diff <= TOLERANCE, f"{what}: max abs diff {diff:.2e} > {TOLERANCE}"


def hf_classes(transformers, config):
    """(base class, ForMaskedLM class, config class) of transformers for our config."""
    if config.is_v1:
        return transformers.DebertaModel, transformers.DebertaForMaskedLM, transformers.DebertaConfig
    return transformers.DebertaV2Model, transformers.DebertaV2ForMaskedLM, transformers.DebertaV2Config


def one_line_error(folder, *fragments):
    with pytest.raises(MiniBertError) as caught:
        load_pretrained(folder)
    message = str(caught.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def write_folder(folder, config_values, tensors, weights="model.safetensors"):
    from minibert.checkpoints.safetensors import save_safetensors
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_values), encoding="utf-8")
    if weights == "model.safetensors":
        save_safetensors(tensors, folder / weights, metadata={"format": "pt"})
    else:
        torch.save(tensors, folder / weights)
    return folder


# ---------------------------------------------------------------------------
# 1. Our own round trip
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("heads", [dict(with_mlm_head=True), dict(with_mlm_head=False, with_pooler=True)],
                         ids=["mlm-head", "pooler"])
def test_save_then_load_is_lossless(shape, heads, tmp_path):
    original = tiny(shape, **heads)
    save_pretrained(original, tmp_path)
    reloaded = load_pretrained(tmp_path)
    assert type(reloaded) is DebertaModel and not reloaded.training
    assert reloaded.config == original.config
    assert reloaded.source_dir == tmp_path
    assert reloaded.load_report.ok and not reloaded.load_report.skipped and not reloaded.load_report.notes
    assert reloaded.uses_emd == original.uses_emd
    ours, theirs = original.state_dict(), reloaded.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert_same_outputs(original, reloaded, batch(11))


def test_a_v1_model_is_saved_as_a_v1_file(tmp_path):
    original = tiny("v1")
    save_pretrained(original, tmp_path)
    saved = load_safetensors(tmp_path / "model.safetensors")
    prefix = "deberta.encoder.layer.0.attention.self."
    assert {k.removeprefix(prefix) for k in saved if k.startswith(prefix)} == {
        "in_proj.weight", "q_bias", "v_bias", "pos_proj.weight", "pos_q_proj.weight", "pos_q_proj.bias"}
    attention = original.encoder.layers[0].attention
    assert torch.equal(saved[prefix + "in_proj.weight"],
                       fuse_v1_in_proj(attention.query.weight, attention.key.weight, attention.value.weight, 4))
    assert torch.equal(saved[prefix + "q_bias"], attention.query.bias)
    assert torch.equal(saved[prefix + "pos_proj.weight"], attention.relative_key.weight)
    # per head: rows [3D h, 3D h + D) of in_proj are head h's query
    assert torch.equal(saved[prefix + "in_proj.weight"][24:32], attention.query.weight[8:16])
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "deberta" and config["architectures"] == ["DebertaForMaskedLM"]
    assert "position_buckets" not in config and "share_att_key" not in config     # v2-only switches
    assert config["legacy"] is False and config["dtype"] == config["torch_dtype"] == "float32"
    assert "deberta.embeddings.position_embeddings.weight" in saved              # EMD's table


def test_split_v1_in_proj_takes_query_key_value_per_head_and_fuse_undoes_it():
    H, A = 6, 3                                          # D = 2
    fused = torch.arange(3 * H, dtype=torch.float32)[:, None].expand(3 * H, H).clone()   # row r holds r
    q, k, v = split_v1_in_proj(fused, A)
    # per head: D query rows, D key rows, D value rows
    assert q[:, 0].tolist() == [0, 1, 6, 7, 12, 13]
    assert k[:, 0].tolist() == [2, 3, 8, 9, 14, 15]
    assert v[:, 0].tolist() == [4, 5, 10, 11, 16, 17]
    assert torch.equal(fuse_v1_in_proj(q, k, v, A), fused)
    with pytest.raises(MiniBertError, match=r"in_proj.weight of shape \[6, 6\]"):
        split_v1_in_proj(torch.zeros(6, 6), A)


def test_a_deberta_with_a_wordpiece_vocabulary_keeps_it_when_saved_again(tmp_path):
    """A DeBERTa that minibert pretrained has BERT's vocab.txt, not a
    released DeBERTa's tokenizer: save_pretrained writes it again."""
    from tiny_models import write_vocab
    model = tiny("v3")
    save_pretrained(model, tmp_path / "a")
    write_vocab(tmp_path / "a")
    tokens = (tmp_path / "a" / "vocab.txt").read_text().splitlines()[:model.config.vocab_size]   # one per row
    (tmp_path / "a" / "vocab.txt").write_text("\n".join(tokens) + "\n")
    save_pretrained(load_pretrained(tmp_path / "a"), tmp_path / "b")
    assert (tmp_path / "b" / "vocab.txt").read_text() == (tmp_path / "a" / "vocab.txt").read_text()


# ---------------------------------------------------------------------------
# 2. transformers loads what we write
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", ["v1", "v3", "v2 conv, own relative projections"])
def test_transformers_loads_our_folder_and_computes_the_same(shape, transformers, tmp_path):
    original = tiny(shape)
    save_pretrained(original, tmp_path)
    base_class, masked_lm_class, _ = hf_classes(transformers, original.config)
    hf, info = masked_lm_class.from_pretrained(str(tmp_path), output_loading_info=True)
    hf.eval()
    assert type(hf) is masked_lm_class
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    assert not info["error_msgs"], info
    theirs_named = hf.state_dict()
    for name, tensor in huggingface_state_dict(original).items():
        if name == "deberta.embeddings.position_embeddings.weight":
            assert name not in theirs_named      # transformers has no EMD and ignores the table
            continue
        assert torch.equal(theirs_named[name], tensor), name

    input_ids, attention_mask, token_type_ids = batch(24)
    real = attention_mask.bool()
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        mine = original(input_ids, attention_mask=attention_mask)
        head_on_last_layer = original.mlm_head(mine.last_hidden_state, original.embeddings.word_embeddings.weight)
    assert len(mine.hidden_states) == len(theirs.hidden_states) == original.config.num_hidden_layers + 1
    for depth, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {depth}")
    assert_close(head_on_last_layer[real], theirs.logits[real], "MLM head on the last layer")

    # The bare model class reads the same folder (the heads are the only keys it leaves out).
    bare, info = base_class.from_pretrained(str(tmp_path), output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    with torch.no_grad():
        bare_states = bare.eval()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    assert_close(bare_states[real], mine.last_hidden_state[real], "bare model, last layer")


# ---------------------------------------------------------------------------
# 3. We load what transformers writes
# ---------------------------------------------------------------------------

def transformers_masked_lm(transformers, shape, legacy=False, seed=3):
    config = DebertaConfig(**TINY, **SHAPES[shape])
    _, masked_lm_class, config_class = hf_classes(transformers, config)
    return config, randomize(masked_lm_class(config_class(**config.to_dict(), legacy=legacy)), seed=seed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("shape", ["v1", "v3"])
def test_we_load_a_folder_transformers_saved(shape, weights, dtype, transformers, tmp_path):
    config, hf = transformers_masked_lm(transformers, shape)
    hf = hf.to(dtype)
    if weights == "model.safetensors":
        hf.save_pretrained(str(tmp_path))
    else:
        hf.config.to_json_file(str(tmp_path / "config.json"))
        torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    assert (tmp_path / weights).is_file()

    ours = load_pretrained(tmp_path)
    assert type(ours) is DebertaModel and ours.config.model_type == config.model_type
    assert all(p.dtype == torch.float32 for p in ours.parameters())              # fp16 files are upcast
    report = ours.load_report
    assert report.source == str(tmp_path / weights) and report.ok
    # transformers saves no absolute table: the head reads the last layer, and the report says so
    assert not ours.uses_emd and ours.mlm_head is not None
    assert len(report.notes) == 1 and "without the Enhanced Mask Decoder" in report.notes[0]

    hf = hf.float().eval()                       # the same (fp16-rounded) weights, computed in fp32
    input_ids, attention_mask, _ = batch(24)
    real = attention_mask.bool()
    with torch.no_grad():
        theirs = hf(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        mine = ours(input_ids, attention_mask=attention_mask)
    for depth, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states, strict=True)):
        assert_close(a[real], b[real], f"hidden state {depth}")
    assert_close(mine.mlm_logits[real], theirs.logits[real], "MLM logits")

    # ... and writes it back as transformers wrote it (no table, the same tensors).
    save_pretrained(ours, tmp_path / "again")
    again = load_safetensors(tmp_path / "again" / "model.safetensors")
    assert again.keys() == hf.state_dict().keys()
    assert all(torch.equal(again[k], v) for k, v in hf.state_dict().items())


@pytest.mark.parametrize("shape", ["v1", "v3"])
def test_transformers_legacy_head_is_read_as_the_mlm_head(shape, transformers, tmp_path):
    """DebertaForMaskedLM's default legacy=True head (cls.predictions.*)
    computes what lm_predictions computes; its tied decoder is skipped."""
    config, hf = transformers_masked_lm(transformers, shape, legacy=True)
    hf.config.to_json_file(str(tmp_path / "config.json"))
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")      # with the tied decoder's names
    ours = load_pretrained(tmp_path)
    skipped = dict(ours.load_report.skipped)
    assert skipped["cls.predictions.decoder.weight"] == "tied to the word embeddings"
    assert "lm_predictions.lm_head.dense.weight" in ours.load_report.loaded     # read under the current name
    input_ids, attention_mask, _ = batch(11)
    real = attention_mask.bool()
    with torch.no_grad():
        theirs = hf.eval()(input_ids=input_ids, attention_mask=attention_mask).logits
        mine = ours(input_ids, attention_mask=attention_mask).mlm_logits
    assert_close(mine[real], theirs[real], "MLM logits")


# ---------------------------------------------------------------------------
# 4. The layout of the released files
# ---------------------------------------------------------------------------

def released_layout(model):
    """Our model's tensors as a microsoft/deberta-v3-* file holds them: plus
    the RTD head mask_predictions.* (docs/deberta.md 4.4)."""
    H = model.config.hidden_size
    tensors = huggingface_state_dict(model)
    tensors.update({"mask_predictions.dense.weight": torch.randn(H, H), "mask_predictions.dense.bias": torch.randn(H),
                    "mask_predictions.LayerNorm.weight": torch.ones(H), "mask_predictions.LayerNorm.bias": torch.zeros(H),
                    "mask_predictions.classifier.weight": torch.randn(1, H),
                    "mask_predictions.classifier.bias": torch.randn(1)})
    return tensors


def config_values(model):
    from minibert.checkpoints import huggingface_config
    return huggingface_config(model)


def test_a_released_v3_file_loads_with_emd_and_skips_the_rtd_head(tmp_path):
    original = tiny("v3")
    write_folder(tmp_path, config_values(original), released_layout(original), "pytorch_model.bin")
    ours = load_pretrained(tmp_path)
    assert ours.uses_emd and not ours.load_report.notes
    skipped = dict(ours.load_report.skipped)
    assert sorted(skipped) == ["mask_predictions.LayerNorm.bias", "mask_predictions.LayerNorm.weight",
                               "mask_predictions.classifier.bias", "mask_predictions.classifier.weight",
                               "mask_predictions.dense.bias", "mask_predictions.dense.weight"]
    assert all("replaced-token-detection" in reason for reason in skipped.values())
    assert_same_outputs(original, ours, batch(11))


def test_without_the_mlm_head_the_absolute_table_is_skipped(tmp_path):
    original = tiny("v1")
    tensors = {k: v for k, v in huggingface_state_dict(original).items() if not k.startswith("lm_predictions.")}
    write_folder(tmp_path, config_values(original), tensors)
    ours = load_pretrained(tmp_path)
    assert ours.mlm_head is None and ours.embeddings.position_embeddings is None
    assert [name for name, _ in ours.load_report.skipped] == ["deberta.embeddings.position_embeddings.weight"]
    assert "Enhanced Mask Decoder" in ours.load_report.skipped[0][1]
    input_ids, attention_mask, _ = batch(11)
    with torch.no_grad():
        assert torch.equal(ours(input_ids, attention_mask).last_hidden_state,
                           original(input_ids, attention_mask).last_hidden_state)


def test_a_bare_model_file_without_the_prefix_and_with_buffers_loads(tmp_path):
    original = tiny("v3", with_mlm_head=False)
    tensors = {k.removeprefix("deberta."): v for k, v in huggingface_state_dict(original).items()}
    tensors["embeddings.position_ids"] = torch.arange(64)[None]
    write_folder(tmp_path, config_values(original), tensors, "pytorch_model.bin")
    ours = load_pretrained(tmp_path)
    assert ours.load_report.skipped == [("embeddings.position_ids", "buffer, not a weight")]
    assert_same_outputs(original, ours, batch(11))


# ---------------------------------------------------------------------------
# 5. Bad files
# ---------------------------------------------------------------------------

def test_missing_tensor(tmp_path):
    original = tiny("v1")
    tensors = huggingface_state_dict(original)
    del tensors["deberta.encoder.layer.2.attention.self.in_proj.weight"]
    write_folder(tmp_path, config_values(original), tensors, "pytorch_model.bin")
    one_line_error(tmp_path, str(tmp_path / "pytorch_model.bin"), "1 missing tensors",
                   "deberta.encoder.layer.2.attention.self.in_proj.weight")


def test_unexpected_tensor(tmp_path):
    original = tiny("v3")
    tensors = huggingface_state_dict(original)
    tensors["intent_head.weight"] = torch.zeros(3, 32)      # a head minibert knows nothing of
    write_folder(tmp_path, config_values(original), tensors)
    one_line_error(tmp_path, str(tmp_path / "model.safetensors"), "1 unexpected tensors", "intent_head.weight")


def test_mis_shaped_tensors(tmp_path):
    original = tiny("v1")
    tensors = huggingface_state_dict(original)
    tensors["deberta.encoder.rel_embeddings.weight"] = torch.zeros(100, 32)
    tensors["deberta.encoder.layer.0.attention.self.in_proj.weight"] = torch.zeros(64, 32)
    write_folder(tmp_path, config_values(original), tensors)
    one_line_error(tmp_path, "2 shape mismatches",
                   "deberta.encoder.rel_embeddings.weight: config says [128, 32], file has [100, 32]",
                   "in_proj.weight: config says [96, 32], file has [64, 32]")


def test_config_that_disagrees_is_refused_before_allocating(tmp_path):
    import time
    original = tiny("v3")
    values = config_values(original)
    write_folder(tmp_path, {**values, "vocab_size": 10**9}, huggingface_state_dict(original))
    started = time.perf_counter()
    one_line_error(tmp_path, "word_embeddings.weight: config says [1000000000, 32], file has [99, 32]")
    assert time.perf_counter() - started < 5
    (tmp_path / "config.json").write_text(json.dumps({**values, "num_hidden_layers": 10**6}))
    one_line_error(tmp_path, "'num_hidden_layers' = 1000000: expected at most 1,000 layers")
    (tmp_path / "config.json").write_text(json.dumps({**values, "num_hidden_layers": 900}))
    one_line_error(tmp_path, "asks for 900 distinct layers", "file holds only")
    (tmp_path / "config.json").write_text(json.dumps({**values, "position_buckets": 1}))
    one_line_error(tmp_path, str(tmp_path / "config.json"), "'position_buckets'")
    (tmp_path / "config.json").write_text(json.dumps({**values, "model_type": "gpt2"}))
    one_line_error(tmp_path, "model_type is 'gpt2'", "'deberta' and 'deberta-v2'")


# ---------------------------------------------------------------------------
# 6. DeBERTa hub ids through huggingface_hub (a local stand-in for the hub)
# ---------------------------------------------------------------------------

V3_NAME = "microsoft/deberta-v3-xsmall"
V1_NAME = "microsoft/deberta-base"
V3_TOKENIZER = {"spm.model": b"\x0a\x0bnot really a sentencepiece model" * 10,
                "tokenizer_config.json": b'{"do_lower_case": false, "vocab_type": "spm"}'}
V1_TOKENIZER = {"vocab.json": b'{"[PAD]": 0}', "merges.txt": b"#version: 0.2\n"}


def hub_files(model, tokenizer_files):
    """A DeBERTa repository's files as the hub holds them: config.json, pytorch_model.bin, the tokenizer's."""
    buffer = io.BytesIO()
    torch.save(huggingface_state_dict(model), buffer)
    return {"config.json": json.dumps(config_values(model)).encode(), "pytorch_model.bin": buffer.getvalue(),
            **tokenizer_files, "tf_model.h5": b"not read", "rust_model.ot": b"not read"}


def test_deberta_hub_ids_load_through_huggingface_hub(fake_hub, env, hf_home, tmp_path):
    v3, v1 = tiny("v3"), tiny("v1")
    v3_commit = fake_hub.add(V3_NAME, hub_files(v3, V3_TOKENIZER))
    v1_commit = fake_hub.add(V1_NAME, hub_files(v1, V1_TOKENIZER))
    code, lines, _ = run_minibert(f"print(resolve_model_dir({V3_NAME!r}))\nprint(resolve_model_dir({V1_NAME!r}))", env)
    assert (code, lines) == (0, [str(snapshot(hf_home, V3_NAME, v3_commit)), str(snapshot(hf_home, V1_NAME, v1_commit))])
    assert fake_hub.fetched(V3_NAME) == sorted(["config.json", "pytorch_model.bin", *V3_TOKENIZER])
    assert fake_hub.fetched(V1_NAME) == sorted(["config.json", "pytorch_model.bin", *V1_TOKENIZER])
    for original, folder in [(v3, Path(lines[0])), (v1, Path(lines[1]))]:
        assert_same_outputs(original, load_pretrained(folder), batch(11))

    save_pretrained(load_pretrained(lines[0]), tmp_path / "copy")
    for name in V3_TOKENIZER:                                  # copied as they are
        assert (tmp_path / "copy" / name).read_bytes() == V3_TOKENIZER[name]
