"""Loading and saving models: `load_pretrained` and `save_pretrained`.

    load_pretrained(name_or_path)
        1. find the folder (a path, a known name that is downloaded and cached,
           or None for the model bundled with minibert)       -> hub.py
        2. detect the format from the files present:
             bert_config.json / albert_config.json + *.index + *.data-*
                 Google's TensorFlow checkpoint (also a TF-Hub SavedModel's
                 variables/variables.*)                       -> tf_bundle.py
             config.json + model.safetensors                  -> safetensors.py
             config.json + pytorch_model.bin                  -> torch.load
        3. build a BertModel with the heads the checkpoint has, map names
           through one explicit table                          -> name_maps.py
        4. copy tensors and check: missing, unexpected and mis-shaped tensors
           are an error; what was skipped on purpose is reported.

The model (model.py) knows nothing of any of this.
"""

import json
import os
from pathlib import Path

import numpy as np
import torch

from minibert.checkpoints.name_maps import (LoadReport, detect_heads, expand, module_rows, normalize_hf_names,
                                            normalize_tf_names, tied_copy_rows)
from minibert.errors import MiniBertError
from minibert.fileio import read_json_object
from minibert.model import ALBERT_DEFAULTS, BertConfig, BertModel
from minibert.tokenization import TOKENIZER_FILES, load_tokenizer

GOOGLE_CONFIG_FILES = ("bert_config.json", "albert_config.json")


def load_pretrained(name_or_path=None, dtype=torch.float32, verbose=False, *, force_download=False):
    """Return a BertModel (in eval mode) from a folder, a file inside one, a
    known model name, or None for the bundled default model. The model's
    `load_report` says what was loaded and skipped; `source_dir` is the folder.
    `force_download=True` deletes the cached download of a known name and
    downloads it again (e.g. after an error saying the cached copy is bad)."""
    from minibert.hub import explain_cache_error, resolve_model_dir
    folder = Path(resolve_model_dir(name_or_path, force_download=force_download))

    try:
        google_config = next((folder / n for n in GOOGLE_CONFIG_FILES if (folder / n).is_file()), None)
        if (folder / "config.json").is_file() and any((folder / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
            model = load_huggingface_folder(folder)
        elif google_config is not None:
            model = load_google_folder(folder, google_config)
        else:
            raise MiniBertError(
                f"{folder}: no checkpoint found; expected config.json with model.safetensors or "
                f"pytorch_model.bin (Hugging Face), or bert_config.json / albert_config.json with a "
                f"TensorFlow checkpoint (*.index + *.data-*)")
    except MiniBertError as e:  # if the folder is a cached download, say so and how to refresh it
        raise explain_cache_error(e, folder) from None
    if verbose:
        print(model.load_report)
    model.source_dir = folder
    return model.to(dtype).eval()


def load_google_folder(folder, config_file):
    """Google's TF checkpoint: bert_config.json or albert_config.json + TensorBundle."""
    from minibert.checkpoints.tf_bundle import find_tf_checkpoint_prefix, read_tf_checkpoint
    config = read_config(config_file)
    prefix = find_tf_checkpoint_prefix(folder)
    tensors, skipped = normalize_tf_names(read_tf_checkpoint(prefix))
    return build_and_fill(config, tensors, skipped, "tensorflow", source=f"{prefix}.index")


def read_config(config_file):
    """A BertConfig from any of the three config files: Google's
    bert_config.json or albert_config.json, or Hugging Face's config.json.
    The one place that knows how they differ:

    * Google's files name no model type; the file name says it.
    * ALBERT's files may leave out what ALBERT's code assumes (ALBERT_DEFAULTS).
    * In Google's albert_config.json, "gelu" means the tanh approximation
      (ALBERT's modeling.gelu, docs/formats.md 2.2), which we call "gelu_new";
      in a Hugging Face config.json "gelu" means the exact form, as for BERT.
    * A tied duplicated BERT (Kao et al.) that save_pretrained wrote carries
      `layer_order`; Hugging Face's BERT config has no num_hidden_groups, so
      the number of distinct layers is read off the order.
    """
    config_file = Path(config_file)
    values = read_json_object(config_file)
    if config_file.name in GOOGLE_CONFIG_FILES:
        values["model_type"] = "albert" if config_file.name == "albert_config.json" else "bert"
        if values["model_type"] == "albert" and values.get("hidden_act", "gelu") == "gelu":
            values["hidden_act"] = "gelu_new"
    model_type = values.setdefault("model_type", "bert")
    if model_type not in ("bert", "albert"):
        raise MiniBertError(f"{config_file}: model_type is {model_type!r}; minibert reads 'bert' and 'albert'")
    if model_type == "albert":
        for key, value in ALBERT_DEFAULTS.items():
            values.setdefault(key, value)
    if model_type == "bert" and values.get("layer_order") is not None:
        order = values["layer_order"]
        if (not isinstance(order, list) or not order
                or not all(isinstance(g, int) and not isinstance(g, bool) for g in order)
                or sorted(set(order)) != list(range(max(order) + 1))):
            raise MiniBertError(f"{config_file}: layer_order = {order!r}; expected a list of layer indices "
                                f"that uses every index from 0 to its maximum")
        values.setdefault("num_hidden_groups", max(order) + 1)
    return config_from_dict(values, config_file)


def config_from_dict(values, config_file):
    """BertConfig.from_dict, with the config file named in any error."""
    try:
        return BertConfig.from_dict(values)
    except MiniBertError as e:
        raise MiniBertError(f"{config_file}: {e}") from None


def load_huggingface_folder(folder):
    """Hugging Face: config.json + model.safetensors (preferred) or pytorch_model.bin."""
    from minibert.checkpoints.safetensors import load_safetensors, load_torch_bin
    config = read_config(folder / "config.json")
    weights = folder / "model.safetensors"
    if weights.is_file():
        raw = load_safetensors(weights)
    else:
        weights = folder / "pytorch_model.bin"
        raw = load_torch_bin(weights)
    tensors, skipped = normalize_hf_names(raw, config.model_type)
    return build_and_fill(config, tensors, skipped, "huggingface", source=str(weights))


def build_and_fill(config, tensors, skipped, source_format, source):
    """Build a model with the heads present in `tensors` and copy every tensor
    in through the name map. Strict: anything missing, unexpected or of the
    wrong shape is an error naming the file."""
    heads = detect_heads(tensors, source_format)
    if heads["with_pair_head"] and not heads["with_pooler"]:
        heads["with_pair_head"] = False  # nothing to feed it; reported as unexpected below
    check_layer_count(config, tensors, source)
    # Build the model on the "meta" device first: modules and shapes, but no
    # memory. A config that disagrees with the file (a vocabulary of 10^9, say)
    # is then an error below before anything is allocated.
    with torch.device("meta"):
        model = BertModel(config, **heads)
    report = LoadReport(source=source, skipped=list(skipped))

    # A tied duplicated BERT stores its copies at the extra depths: skip them.
    for depth, layer in tied_copy_rows(config):
        prefix = f"bert.encoder.layer.{depth}." if source_format == "huggingface" else f"bert/encoder/layer_{depth}/"
        for name in [n for n in tensors if n.startswith(prefix)]:
            tensors.pop(name)
            report.skipped.append((name, f"tied copy of layer {layer}"))

    ours = model.state_dict()                      # meta tensors: names and shapes only
    values = {}                                    # our name -> the file's tensor, checked
    remaining = dict(tensors)
    for name in expand(module_rows(config, **heads), source_format):
        if name.theirs not in remaining:
            report.missing.append(name.theirs)
            continue
        value = remaining.pop(name.theirs)
        if not torch.is_tensor(value):  # the TensorFlow reader gives numpy arrays
            value = torch.as_tensor(np.asarray(value))
        # copy_ would turn integers, booleans or complex numbers into floats
        # without a word. Weights are stored as floats, so another dtype means
        # a damaged or foreign file. (float8 is refused too: such checkpoints
        # keep scale factors in other tensors, without which the values are wrong.)
        if value.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            dtype = str(value.dtype).removeprefix("torch.")
            raise MiniBertError(f"{source}: tensor {name.theirs!r} has dtype {dtype}; expected a "
                                f"floating-point weight (float16, bfloat16, float32 or float64)")
        if name.transpose:
            value = value.T
        if tuple(value.shape) != tuple(ours[name.ours].shape):
            report.shape_mismatches.append((name.theirs, tuple(ours[name.ours].shape), tuple(value.shape)))
            continue
        values[name.ours] = value
        report.loaded.append(name.theirs)
    report.unexpected = sorted(remaining)
    # Every parameter must come from the file: one the name map has no row
    # for would otherwise keep random values without a word.
    mapped = {name.ours for name in expand(module_rows(config, **heads), source_format)}
    report.missing += [f"{name} (no row in the name map)" for name in ours if name not in mapped]
    report.raise_if_bad()

    model.to_empty(device="cpu")                   # real memory, not yet initialised: every tensor is filled now
    with torch.no_grad():
        for name, target in model.state_dict().items():
            target.copy_(values[name].to(target.dtype))
    model.load_report = report
    return model


# Tensors in one transformer layer: Q, K, V, W^O, W1, W2 (weight and bias
# each) and two LayerNorms (gain and bias each).
TENSORS_PER_LAYER = 16


def check_layer_count(config, tensors, source):
    """A config asking for more distinct layers than the file could hold is
    refused before any model is built (even on the meta device, a million
    layers take minutes to construct)."""
    distinct_layers = config.num_groups * config.inner_group_num
    if distinct_layers * TENSORS_PER_LAYER > len(tensors):
        raise MiniBertError(f"{source}: the config asks for {distinct_layers} distinct layers "
                            f"({distinct_layers * TENSORS_PER_LAYER} tensors), but the file holds only "
                            f"{len(tensors)} tensors")


# ----------------------------------------------------------------------------
# Saving: Hugging Face layout, so `transformers` loads what minibert writes
# ----------------------------------------------------------------------------


def huggingface_config(model):
    """config.json as transformers expects it. A tied duplicated model is
    written with every depth as its own layer (transformers has no tied
    layers) plus minibert's own `layer_order` key, which transformers ignores
    and minibert uses to tie the copies again on load."""
    config = model.config
    albert = config.model_type == "albert"
    if model.mlm_head is not None and model.pair_head is not None:
        head = "ForPreTraining"
    elif model.mlm_head is not None:
        head = "ForMaskedLM"
    else:
        head = "Model"
    # BertConfig's field names are transformers' names; the ALBERT-only and
    # minibert-only fields are written below when they apply.
    minibert_only = ("model_type", "embedding_size", "num_hidden_groups", "inner_group_num", "layer_order",
                     "written_out")
    values = {"architectures": [("Albert" if albert else "Bert") + head], "model_type": config.model_type,
              **{k: v for k, v in config.to_dict().items() if k not in minibert_only}}
    if albert:
        values.update(embedding_size=config.embedding_dim, num_hidden_groups=config.num_groups,
                      inner_group_num=config.inner_group_num)
    if config.layer_order is not None:
        values["layer_order"] = list(config.layer_order)
    # minibert computes in float32 whatever dtype the file stores (the bundled
    # model's weights are float16, to halve the download). Say so for other
    # tools: transformers 5 reads "dtype" (its default dtype="auto" would
    # otherwise run float16 on the CPU, where fine-tuning reaches NaN loss),
    # transformers 4 reads "torch_dtype".
    values.update(dtype="float32", torch_dtype="float32")
    return values


def huggingface_state_dict(model):
    """Our tensors under Hugging Face names, each its own contiguous copy
    (safetensors cannot store two names for one tensor; the MLM decoder is left
    out because transformers ties it to the word embeddings)."""
    config = model.config
    heads = dict(with_pooler=model.pooler is not None, with_mlm_head=model.mlm_head is not None,
                 with_pair_head=model.pair_head is not None)
    ours = model.state_dict()
    out = {name.theirs: ours[name.ours].detach().to("cpu").contiguous().clone()
           for name in expand(module_rows(config, **heads), "huggingface")}
    for depth, layer in tied_copy_rows(config):
        source_depth = config.depth_plan().index(layer)
        for key in [k for k in out if k.startswith(f"bert.encoder.layer.{source_depth}.")]:
            out[key.replace(f".layer.{source_depth}.", f".layer.{depth}.", 1)] = out[key].clone()
    return out


def save_pretrained(model, directory, tokenizer=None):
    """Write config.json, model.safetensors and the tokenizer files."""
    from minibert.checkpoints.safetensors import save_safetensors
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    save_safetensors(huggingface_state_dict(model), directory / "model.safetensors", metadata={"format": "pt"})
    config_text = json.dumps(huggingface_config(model), indent=2) + "\n"
    temporary = directory / "config.json.tmp"
    temporary.write_text(config_text, encoding="utf-8")
    os.replace(temporary, directory / "config.json")
    if tokenizer is None:
        source = getattr(model, "source_dir", None)
        if source is not None and any((Path(source) / n).exists() for n in TOKENIZER_FILES):
            tokenizer = load_tokenizer(source)
    if tokenizer is not None:
        tokenizer.save(directory)
