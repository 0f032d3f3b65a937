"""The run duplicate.py makes around minibert/duplication.py: the deeper
model its flags ask for (each choice checked first, the message naming the
flag; the lesson's own checks name its parameters), the model folder written
with duplication.json, and the layer order probe.py reads back from it.
"""

import json
from pathlib import Path

from minibert import duplication
from minibert.deberta import DebertaModel
from minibert.support.errors import MiniBertError
from minibert.support.fileio import write_json
from minibert.support.layer_orders import check_depth


def check_indices(indices, num_layers, flag):
    if not indices:
        raise MiniBertError(f"{flag}: empty; expected at least one layer index")
    for i in indices:
        if not 0 <= i < num_layers:
            raise MiniBertError(f"{flag}: layer index {i} is out of range; the model has {num_layers} layers "
                                f"(indices 0..{num_layers - 1})")


def check_repeat(model, k):
    """--repeat K: what repeat_albert refuses, said with duplicate.py's flags."""
    config = model.config
    if config.model_type != "albert":
        kind = "DeBERTa" if isinstance(model, DebertaModel) else "BERT"
        raise MiniBertError(f"--repeat: this is a {kind} model with distinct layers; use --duplicate or --order")
    if not isinstance(k, int) or k < 1:
        raise MiniBertError(f"--repeat {k}: expected a positive integer")
    G, L = config.num_groups, config.num_hidden_layers
    check_depth(L + k, f"--repeat {k}")
    if G > 1 and (L % G or k % G):
        raise MiniBertError(f"--repeat {k}: this ALBERT has {G} layer groups over {L} layers; --repeat needs "
                            f"the layer count and K to be multiples of {G} (each group then runs K/{G} more times)")


def check_layer_order(model, layer_order, tied=False):
    """--order (or the order --duplicate made) and --tied: what deepen refuses, said with the flags."""
    check_indices(layer_order, model.config.num_hidden_layers, "--order")
    check_depth(len(layer_order), "--order")
    if tied and isinstance(model, DebertaModel):
        raise MiniBertError("--tied: minibert's DeBERTa has no layer_order to run one layer at several "
                            "depths; duplicate it untied (without --tied)")
    if tied and model.config.model_type == "albert":
        raise MiniBertError("--tied: ALBERT's layers are already shared; --repeat K gives the tied form "
                            "(--duplicate/--order give the untied one)")


def duplicate_order(num_layers, duplicate, flag="--duplicate"):
    """duplication.duplicate_order for a flag's indices (bench's --patterns too)."""
    check_indices(duplicate, num_layers, flag)
    check_depth(num_layers + len(duplicate), flag)
    return duplication.duplicate_order(num_layers, duplicate)


def deeper_model(model, duplicate=None, order=None, repeat=None, tied=False):
    """duplicate.py's model: (the deeper model, the layer order it runs, as
    indices of the source's depths; None for --repeat, whose config says it
    all: group g, run k)."""
    if repeat is not None:
        check_repeat(model, repeat)
        return duplication.repeat_albert(model, repeat), None
    num_layers = model.config.num_hidden_layers
    layer_order = duplicate_order(num_layers, duplicate) if duplicate is not None else order
    check_layer_order(model, layer_order, tied)
    return duplication.deepen(model, layer_order, tied=tied), layer_order


def recorded_layer_order(folder, config):
    """The source layer run at each depth, from the duplication.json that
    `write_model` left in `folder` (its "layers_run"); None if there is none
    or it does not fit this config. Only used to label probe rows ("layer 0
    (copy)"), since an untied duplicated model's config is a plain BERT that
    cannot say it."""
    try:
        record = json.loads((Path(folder) / "duplication.json").read_text(encoding="utf-8"))
        layer_order = record["layers_run"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    fits = (isinstance(layer_order, list) and len(layer_order) == config.num_hidden_layers
            and all(isinstance(i, int) for i in layer_order))
    return layer_order if fits else None


def write_model(deeper, output, source_dir=None, record=None, force=False):
    """Hugging Face layout (config.json, model.safetensors, tokenizer files
    from `source_dir`), plus duplication.json saying how it was made,
    written as one unit (support/folders.write_folder): a kill or a full
    disk leaves the old folder or the new one. Over an old model (--force),
    the new one replaces all its model files (a fine-tuned folder's
    metrics.json, a training run's checkpoint.pt); a user's other files stay."""
    from minibert.checkpoints import save_pretrained
    from minibert.support.folders import CHECKPOINT, MODEL_FOLDER_FILES, write_folder
    from minibert.support.outputs import check_output_folder
    check_output_folder(output, force, source=source_dir)
    if source_dir is not None:
        deeper.source_dir = source_dir               # save_pretrained copies the tokenizer from here

    def write_into(staging):
        save_pretrained(deeper, staging)
        if record is not None:
            write_json(staging / "duplication.json", record)
    write_folder(output, write_into, leave_behind=MODEL_FOLDER_FILES + (CHECKPOINT,))   # another run's checkpoint too
