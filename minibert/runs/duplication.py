"""The run duplicate.py makes around minibert/duplication.py: the deeper
model its flags ask for, the model folder written with duplication.json, and
the layer order probe.py reads back from it.
"""

import json
from pathlib import Path

from minibert import duplication
from minibert.support.files import write_json


def deeper_model(model, duplicate=None, order=None, repeat=None, tied=False):
    """duplicate.py's model: (the deeper model, the layer order it runs, as
    indices of the source's depths; None for --repeat, whose config says it
    all: group g, run k). The lesson checks each choice; its errors name its
    parameters, which the script shows as the flags (support/cli.FLAGS)."""
    if repeat is not None:
        return duplication.repeat_albert(model, repeat), None
    layer_order = (duplication.duplicate_order(model.config.num_hidden_layers, duplicate) if duplicate is not None
                   else order)
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
    written as one unit (support/outputs.write_folder): a kill or a full
    disk leaves the old folder or the new one. Over an old model (--force),
    the new one replaces all its model files (a fine-tuned folder's
    metrics.json, a training run's checkpoint.pt); a user's other files stay."""
    from minibert.checkpoints import save_pretrained
    from minibert.support.outputs import CHECKPOINT, MODEL_FOLDER_FILES, write_folder
    from minibert.support.outputs import check_output_folder
    check_output_folder(output, force, source=source_dir)
    if source_dir is not None:
        deeper.source_dir = source_dir               # save_pretrained copies the tokenizer from here

    def write_into(staging):
        save_pretrained(deeper, staging)
        if record is not None:
            write_json(staging / "duplication.json", record)
    write_folder(output, write_into, leave_behind=MODEL_FOLDER_FILES + (CHECKPOINT,))   # another run's checkpoint too
