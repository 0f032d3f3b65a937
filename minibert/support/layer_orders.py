"""Support for minibert/duplication.py: the checks of a layer order (the
source layer index run at each new depth) before any layer is copied.

Nothing else bounds how deep a duplicated model gets: `--repeat 100000000`
on an ALBERT builds a config of 100,000,003 layers (a model no script can
run), and an untied `--order` of 60,000 entries copies 60,000 layers until
the allocator gives up. MAX_DEPTH is far above any model of the paper
(BERT-large duplicated whole is 48 layers) and still fits: 1,000 untied
BERT-base layers are 7.1M parameters each, 28 GB in float32.
"""

import re

from minibert.support.config_checks import MAX_LAYERS as MAX_DEPTH   # what a config may hold
from minibert.support.errors import MiniBertError, ParameterError

INDEX = re.compile(r"-?[0-9]+")     # ASCII digits only: int() would also read "٢" (Arabic-Indic two) as 2


def parse_indices(text, flag):
    """"0,1,2" -> [0, 1, 2]; anything else is a MiniBertError naming the flag."""
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise MiniBertError(f"{flag}: empty; expected comma-separated layer indices such as 0,1,2")
    if not all(INDEX.fullmatch(p) for p in parts):
        raise MiniBertError(f"{flag} {text!r}: expected comma-separated integer layer indices such as 0,1,2 "
                            f"(digits 0-9)")
    return [int(p) for p in parts]


def check_depth(depth, name):
    """A deeper model of `depth` layers is one that fits (MAX_DEPTH above);
    `name`: the lesson's parameter that asked for it."""
    if depth > MAX_DEPTH:
        raise ParameterError(f"{name}: would make a model of {depth:,} layers; the limit is {MAX_DEPTH:,}")


def check_pretrained_source(folder):
    """Duplication copies an encoder with its pretraining heads. A fine-tuned
    folder (finetune.py's, with task.json) has a task head that the copy
    would drop, together with task.json: refused, rather than writing a
    model that is neither the fine-tuned one nor its base."""
    from minibert.support.outputs import describe_model_folder, model_folder_kind
    if folder is not None and model_folder_kind(folder) == "fine-tuned":
        raise MiniBertError(f"--model {folder}: {describe_model_folder(folder)}; duplicating it would drop its "
                            f"task head and task.json. Give the pretrained model it was fine-tuned from, then "
                            f"fine-tune the deeper one")
