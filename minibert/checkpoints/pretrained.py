"""Loading and saving models: `load_pretrained` and `save_pretrained`.

    load_pretrained(name_or_path)
        1. find the folder (a path, a Hugging Face hub id or a Google archive
           that is downloaded and cached, or None for the model bundled
           with minibert)                                     -> hub.py
        2. detect the format from the files present:
             bert_config.json / albert_config.json + *.index + *.data-*
                 Google's TensorFlow checkpoint (also a TF-Hub SavedModel's
                 variables/variables.*)                       -> tf_bundle.py
             config.json + model.safetensors                  -> safetensors.py
             config.json + pytorch_model.bin                  -> torch.load
           (a distilled student, student.json, is no encoder: an error
           that says what it is, support/outputs.describe_model_folder)
        3. build the model on the "meta" device (shapes, no memory) with the
           heads the checkpoint has: a BertModel, or a DebertaModel when
           config.json's model_type is "deberta" (v1) or "deberta-v2" (v2,
           v3); map names through one explicit table   -> name_maps.py
        4. copy tensors and check: missing, unexpected and mis-shaped tensors
           are an error (before any memory is allocated); what was skipped on
           purpose is reported in the model's `load_report`.

    save_pretrained(model, directory)
        config.json + model.safetensors (+ the tokenizer) in Hugging Face's
        layout, which transformers loads as it is: BertFor*/AlbertFor* for a
        BertModel, Deberta(V2)Model / Deberta(V2)ForMaskedLM for a
        DebertaModel (a v1 model is written as a v1 file, in_proj fused);
        with a task head, <Family>ForSequenceClassification / ...
        ForTokenClassification / ...ForQuestionAnswering  -> name_maps.py

The models (model.py, deberta.py) know nothing of any of this.
"""

from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch

from minibert.checkpoints.families import LAYER_COPIES, SHARED_GROUP, family_of
from minibert.checkpoints.name_maps import (DEBERTA_POSITION_TABLE, LoadReport, deberta_layer_names,
                                            deberta_tensor_names, detect_deberta_heads, detect_heads, expand,
                                            head_config, head_state_dict, module_rows, normalize_deberta_names,
                                            normalize_hf_names, normalize_tf_names, tied_copy_rows)
from minibert.deberta import MODEL_TYPES as DEBERTA_MODEL_TYPES, DebertaConfig, DebertaModel
from minibert.support import MiniBertError
from minibert.support.files import atomic_write, read_json_object, write_json
from minibert.support.outputs import describe_model_folder, model_folder_kind
from minibert.model import BertConfig, BertModel, MaskedLMHead
from minibert.support.tokenizer_files import TOKENIZER_FILES
from minibert.tokenization import load_tokenizer

GOOGLE_CONFIG_FILES = ("bert_config.json", "albert_config.json")
# A DeBERTa folder's tokenizer: spm.model (v2/v3) or vocab.json + merges.txt
# (v1), and the files that configure it. save_pretrained copies them as they are.
DEBERTA_TOKENIZER_FILES = ("spm.model", "vocab.json", "merges.txt", "tokenizer_config.json", "added_tokens.json",
                           "special_tokens_map.json")


def load_pretrained(name_or_path=None, dtype=torch.float32, verbose=False, *, force_download=False, revision=None,
                    cache_dir=None, token=None, local_files_only=False):
    """Return a BertModel, or a DebertaModel for a DeBERTa folder, (in eval
    mode) from a folder, a file inside one, a Hugging Face hub id ("owner/name",
    "owner/name@revision"), a known name, or None for the bundled default
    model (minibert.support.hub says which name means what). The model's
    `load_report` says what was loaded and skipped; `source_dir` is the folder.
    `force_download=True` downloads a hub id or Google archive again (e.g.
    after an error saying the cached copy is bad); `revision` picks a hub
    id's branch, tag or commit; `cache_dir`, `token` and `local_files_only`
    go to huggingface_hub as they are (hub.py)."""
    from minibert.support.hub import explain_cache_error, resolve_model_dir
    folder = Path(resolve_model_dir(name_or_path, force_download=force_download, revision=revision,
                                    cache_dir=cache_dir, token=token, local_files_only=local_files_only))

    try:
        google_config = next((folder / n for n in GOOGLE_CONFIG_FILES if (folder / n).is_file()), None)
        if (folder / "config.json").is_file() and any((folder / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
            model = load_huggingface_folder(folder)
        elif google_config is not None:
            model = load_google_folder(folder, google_config)
        elif model_folder_kind(folder) == "student":
            raise MiniBertError(
                f"{folder}: {describe_model_folder(folder)}, not a BERT-family encoder; expected a BERT, ALBERT "
                f"or DeBERTa model folder (its teacher, or the pretrained model the teacher was fine-tuned "
                f"from); distill.py --student reads a student")
        else:
            raise MiniBertError(
                f"{folder}: no checkpoint found; expected config.json with model.safetensors or "
                f"pytorch_model.bin (Hugging Face), or bert_config.json / albert_config.json with a "
                f"TensorFlow checkpoint (*.index + *.data-*)")
    except MiniBertError as e:  # if the folder is a cached download, say so and how to refresh it
        raise explain_cache_error(e, folder) from None
    check_finite(model, folder)
    if verbose:
        print(model.load_report)
    model.source_dir = folder
    return model.to(dtype).eval()


def load_with_tokenizer(name_or_path=None):
    """(model, tokenizer) of one folder, read as one snapshot
    (support/outputs.read_as_one): never the weights of one model with the
    vocabulary of the next, should a run replace the folder in between."""
    from minibert.support.outputs import read_as_one
    from minibert.support.hub import resolve_model_dir
    folder = Path(resolve_model_dir(name_or_path))
    return read_as_one(folder, lambda: (load_pretrained(folder), load_tokenizer(folder)))


def check_finite(model, folder):
    """Weights that hold NaN or infinity (saved by a run that diverged, or
    damaged) make every output NaN: a probe would print 0% accuracies and
    exit 0. One line naming the first such tensor instead."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise MiniBertError(f"{folder}: the weights hold NaN or infinite values ({name}); a model that "
                                f"diverged or a damaged file: nothing can be computed with it")


def load_google_folder(folder, config_file):
    """Google's TF checkpoint: bert_config.json or albert_config.json + TensorBundle."""
    from minibert.checkpoints.tf_bundle import find_tf_checkpoint_prefix, read_tf_checkpoint
    config = read_config(config_file)
    prefix = find_tf_checkpoint_prefix(folder)
    tensors, skipped = normalize_tf_names(read_tf_checkpoint(prefix))
    return build_and_fill(config, tensors, skipped, "tensorflow", source=f"{prefix}.index")


def read_config(config_file, with_deberta=False):
    """A BertConfig from any of the three config files: Google's
    bert_config.json or albert_config.json, or Hugging Face's config.json;
    with_deberta=True (load_pretrained) also reads a DeBERTa config.json
    (model_type "deberta" or "deberta-v2") into a DebertaConfig.
    The one place that knows how they differ:

    * Google's files name no model type; the file name says it.
    * ALBERT's files may leave out what ALBERT's code assumes (its family's
      config_defaults, families.py).
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
    if with_deberta and model_type in DEBERTA_MODEL_TYPES:
        return DebertaConfig.from_dict(values, source=str(config_file))
    if model_type not in ("bert", "albert"):
        also = ", and 'deberta' and 'deberta-v2'" if with_deberta else ""
        raise MiniBertError(f"{config_file}: model_type is {model_type!r}; minibert reads 'bert' and 'albert'{also}")
    family = family_of(model_type)
    for key, value in family.config_defaults.items():
        values.setdefault(key, value)
    if family.deepens == LAYER_COPIES and values.get("layer_order") is not None:   # a tied duplicated BERT
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
    config = read_config(folder / "config.json", with_deberta=True)
    weights = folder / "model.safetensors"
    if weights.is_file():
        raw = load_safetensors(weights)
    else:
        weights = folder / "pytorch_model.bin"
        raw = load_torch_bin(weights)
    return HUGGINGFACE_CODE[family_of(config).model_class].read(config, raw, str(weights))


def read_bert_tensors(config, raw, source):
    """A BertModel (BERT, ALBERT) from a Hugging Face file's tensors."""
    tensors, skipped = normalize_hf_names(raw, family_of(config).base_prefix)
    return build_and_fill(config, tensors, skipped, "huggingface", source=source)


def build_and_fill(config, tensors, skipped, source_format, source):
    """Build a BertModel with the heads present in `tensors` and copy every
    tensor in through the name map. Strict: anything missing, unexpected or
    of the wrong shape is an error naming the file."""
    heads = detect_heads(tensors, source_format)
    if heads["with_pair_head"] and not heads["with_pooler"]:
        heads["with_pair_head"] = False  # nothing to feed it; reported as unexpected below
    check_layer_count(config.num_groups * config.inner_group_num, TENSORS_PER_LAYER, tensors, source)
    # Build the model on the "meta" device first: modules and shapes, but no
    # memory. A config that disagrees with the file (a vocabulary of 10^9, say)
    # is then an error in fill() before anything is allocated.
    with torch.device("meta"):
        model = BertModel(config, **heads)
    report = LoadReport(source=source, skipped=list(skipped))

    # A tied duplicated BERT stores its copies at the extra depths: skip them.
    for depth, layer in tied_copy_rows(config):
        prefix = f"bert.encoder.layer.{depth}." if source_format == "huggingface" else f"bert/encoder/layer_{depth}/"
        for name in [n for n in tensors if n.startswith(prefix)]:
            tensors.pop(name)
            report.skipped.append((name, f"tied copy of layer {layer}"))
    return fill(model, expand(module_rows(config, **heads), source_format), tensors, report)


def build_and_fill_deberta(config, raw, source):
    """build_and_fill for DeBERTa: a DebertaModel with the parts the file
    holds (docs/deberta.md 4.3, 4.4), filled through name_maps.py's DeBERTa table.

    * `lm_predictions.lm_head.*` present -> the MLM head (with_mlm_head);
      `pooler.dense.*` present -> the pooler.
    * The absolute position table `deberta.embeddings.position_embeddings`
      is read when the model uses it: at the input (position_biased_input)
      or in the Enhanced Mask Decoder under the MLM head. Without the MLM
      head it is skipped (only EMD reads it; transformers skips it too).
    * transformers never saves that table (its models have no EMD), so a
      folder written by its DebertaForMaskedLM has the head and no table:
      the head is then loaded to read the last layer directly, exactly what
      transformers computes, and the report says so.
    * v3's `mask_predictions.*` (the replaced-token-detection head) is skipped.
    """
    tensors, skipped = normalize_deberta_names(raw)
    parts = detect_deberta_heads(tensors)
    check_layer_count(config.num_hidden_layers, len(deberta_layer_names(config, 0)), tensors, source)
    report = LoadReport(source=source, skipped=list(skipped))
    with_head, has_table = parts["with_mlm_head"], parts["with_position_table"]
    head_without_table = with_head and not config.position_biased_input and not has_table
    if has_table and not config.position_biased_input and not with_head:
        report.skipped.append((DEBERTA_POSITION_TABLE, "absolute positions for the Enhanced Mask Decoder, which only "
                                                       "the MLM head runs; the file has no MLM head"))
        tensors.pop(DEBERTA_POSITION_TABLE)
    with torch.device("meta"):
        model = DebertaModel(config, with_pooler=parts["with_pooler"],
                             with_mlm_head=with_head and not head_without_table)
        if head_without_table:
            model.mlm_head = MaskedLMHead(config)   # uses_emd stays False: the head reads the last layer
            report.notes.append(f"no {DEBERTA_POSITION_TABLE} (transformers does not save it): mlm_logits read the "
                                "last layer without the Enhanced Mask Decoder, as transformers' DebertaForMaskedLM does")
    names = deberta_tensor_names(config, **deberta_parts(model))
    return fill(model, names, tensors, report)


def deberta_parts(model):
    """The optional parts of a DebertaModel, as deberta_tensor_names takes them."""
    return dict(with_position_table=model.embeddings.position_embeddings is not None,
                with_pooler=model.pooler is not None, with_mlm_head=model.mlm_head is not None)


def fill(model, names, tensors, report):
    """Copy the file's `tensors` into `model` (built on the meta device)
    through `names` (TensorName rows: ours <-> the file's). Checks every
    tensor first, then allocates the model and copies: anything missing,
    unexpected, mis-shaped or not a float is an error naming the file
    (report.source), raised before any memory is allocated."""
    source = report.source
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}   # meta: names and shapes only
    values = {}                                    # our name -> the file's tensor, checked
    remaining = dict(tensors)
    for name in names:
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
        expected = name.shape_in_file(shapes)
        if tuple(value.shape) != expected:
            report.shape_mismatches.append((name.theirs, expected, tuple(value.shape)))
            continue
        values.update(name.to_ours(value))
        report.loaded.append(name.theirs)
    report.unexpected = sorted(remaining)
    # Every parameter must come from the file: one the name map has no row
    # for would otherwise keep random values without a word.
    mapped = {ours for name in names for ours in name.our_names}
    report.missing += [f"{name} (no row in the name map)" for name in shapes if name not in mapped]
    report.raise_if_bad()

    model.to_empty(device="cpu")                   # real memory, not yet initialised: every tensor is filled now
    with torch.no_grad():
        for name, target in model.state_dict().items():
            target.copy_(values[name].to(target.dtype))
    model.load_report = report
    return model


# Tensors in one BERT layer: Q, K, V, W^O, W1, W2 (weight and bias each) and
# two LayerNorms (gain and bias each).
TENSORS_PER_LAYER = 16


def check_layer_count(distinct_layers, tensors_per_layer, tensors, source):
    """A config asking for more distinct layers than the file could hold is
    refused before any model is built (even on the meta device, a million
    layers take minutes to construct)."""
    if distinct_layers * tensors_per_layer > len(tensors):
        raise MiniBertError(f"{source}: the config asks for {distinct_layers} distinct layers "
                            f"({distinct_layers * tensors_per_layer} tensors), but the file holds only "
                            f"{len(tensors)} tensors")


# ----------------------------------------------------------------------------
# Saving: Hugging Face layout, so `transformers` loads what minibert writes
# ----------------------------------------------------------------------------


def huggingface_config(model):
    """config.json as transformers expects it."""
    return HUGGINGFACE_CODE[family_of(model).model_class].config(model)


def huggingface_state_dict(model):
    """Our tensors under Hugging Face names, each its own contiguous copy
    (safetensors cannot store two names for one tensor)."""
    return HUGGINGFACE_CODE[family_of(model).model_class].state_dict(model)


def bert_huggingface_config(model):
    """config.json of a BertModel (BERT, ALBERT). A tied duplicated model is
    written with every depth as its own layer (transformers has no tied
    layers) plus minibert's own `layer_order` key, which transformers ignores
    and minibert uses to tie the copies again on load."""
    config = model.config
    family = family_of(config)
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
    values = {"architectures": [family.architecture + head], "model_type": config.model_type,
              **{k: v for k, v in config.to_dict().items() if k not in minibert_only}}
    if family.deepens == SHARED_GROUP:   # how ALBERT's shared layers are laid out (transformers' AlbertConfig)
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


def bert_state_dict(model):
    """huggingface_state_dict of a BertModel (BERT, ALBERT): the MLM decoder is
    left out because transformers ties it to the word embeddings, and a tied
    duplicated BERT's layers are written at every depth that runs them."""
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


def deberta_state_dict(model):
    """huggingface_state_dict of a DebertaModel, through name_maps.py's DeBERTa table (v1's Q, K, V fused)."""
    state = model.state_dict()
    return {name.theirs: name.from_ours(state).detach().to("cpu").contiguous().clone()
            for name in deberta_tensor_names(model.config, **deberta_parts(model))}


def deberta_huggingface_config(model):
    """config.json for a DebertaModel: transformers' DebertaConfig (v1) or
    DebertaV2Config (v2, v3) fields, `"legacy": false` so that its
    Deberta(V2)ForMaskedLM builds the `lm_predictions` head the file holds
    (its default, legacy=true, builds another, BERT-style head;
    docs/deberta.md 2), and float32 as for BERT (see bert_huggingface_config)."""
    config = model.config
    family = family_of(config)
    head = "ForMaskedLM" if model.mlm_head is not None else "Model"
    values = {"architectures": [family.architecture + head], **config.to_dict(), "legacy": False}
    for field_name in family.unwritten_fields:      # v1: the fields only v2/v3's code reads
        values.pop(field_name, None)
    values.update(dtype="float32", torch_dtype="float32")
    return values


def save_pretrained(model, directory, tokenizer=None, *, head=None, labels=None):
    """Write config.json, model.safetensors and the tokenizer files: those of
    `tokenizer` if given, else those of the folder the model was loaded from
    (model.source_dir), if it has any.

    With a task `head` (a fine-tuned model: minibert/heads.py's OutputLayer
    or SpanHead) and the task's `labels`, the folder is transformers' model
    for that task: the head's tensors under its names and config.json's
    architecture and labels (name_maps.py's task heads' table)."""
    from minibert.checkpoints.safetensors import save_safetensors
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors, config = huggingface_state_dict(model), huggingface_config(model)
    if head is not None:
        tensors.update(head_state_dict(head))
        config.update(head_config(model, head, labels))
    save_safetensors(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    write_json(directory / "config.json", config)
    source = getattr(model, "source_dir", None)
    if tokenizer is None and source is not None:
        if family_of(model).copies_tokenizer and has_deberta_tokenizer(source):
            copy_deberta_tokenizer_files(source, directory)
        elif any((Path(source) / n).exists() for n in TOKENIZER_FILES):
            tokenizer = load_tokenizer(source)
    if tokenizer is not None:
        tokenizer.save(directory)


def has_deberta_tokenizer(folder):
    """Does `folder` hold a released DeBERTa's tokenizer (spm.model, or vocab.json + merges.txt)?
    (A DeBERTa that minibert pretrained has a WordPiece vocab.txt instead.)"""
    return any((Path(folder) / name).is_file() for name in ("spm.model", "vocab.json", "merges.txt"))


def copy_deberta_tokenizer_files(source, directory):
    """Copy, byte for byte, whichever DeBERTa tokenizer files the folder
    `source` has (spm.model, or vocab.json + merges.txt, and their configs)."""
    if Path(source).resolve() == Path(directory).resolve():
        return
    for file_name in DEBERTA_TOKENIZER_FILES:
        if (Path(source) / file_name).is_file():
            with atomic_write(Path(directory) / file_name) as f:
                f.write((Path(source) / file_name).read_bytes())


class HuggingFaceCode(NamedTuple):
    """How one model class's Hugging Face files are read and written: its
    tensors through its name map (name_maps.py)."""
    read: Callable          # (config, the file's tensors, source) -> the model, filled
    config: Callable        # model -> config.json's fields
    state_dict: Callable    # model -> {Hugging Face name: tensor}


# A family's entry (families.py) names its model class; this table, its checkpoint code.
HUGGINGFACE_CODE = {
    BertModel: HuggingFaceCode(read_bert_tensors, bert_huggingface_config, bert_state_dict),
    DebertaModel: HuggingFaceCode(build_and_fill_deberta, deberta_huggingface_config, deberta_state_dict),
}
