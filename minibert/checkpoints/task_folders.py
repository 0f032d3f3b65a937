"""A fine-tuned folder's head, read: minibert's own, and one trained with transformers.

load_task_head fills a task head from a fine-tuned folder's
model.safetensors, under the names of the task heads' table (name_maps.py:
transformers' For<Task> names). A folder of minibert's own says its task in
task.json (commands/finetune.load_task_model reads it).

transformers' AutoModelForSequenceClassification, ...ForTokenClassification
and ...ForQuestionAnswering write the same folder minibert's fine-tuning
writes (the encoder and the head under the same names, config.json with
`architectures` and `id2label`), but no task.json. So the encoder is read by
load_pretrained and the head by load_task_head, as for a folder of
minibert's own; what task.json would say comes from elsewhere
(read_task_folder):

  the task          the caller's (finetune.py's and distill.py's --task)
  its head          config.json's `architectures`: <Family>ForSequenceClassification
                    is the sentence head, ...ForTokenClassification the token
                    head, ...ForQuestionAnswering the span head; it must be the
                    head the task makes
  the labels        config.json's `id2label` (left out: LABEL_0, LABEL_1), renamed by `label_map` (--label-map
                    LABEL_0=0,LABEL_1=1) where the model's names are not the
                    task's: transformers names unnamed labels LABEL_0, LABEL_1, ...
  max_seq_len       the task's default, at most the model's max_position_embeddings

A task with fixed labels (SST-2's "0" and "1", MNLI's three) needs each of
its labels exactly once among the model's, in any order: the head's output
rows are put in the task's order, so that output i is task.labels[i] as in a
folder of minibert's own. A task that takes its labels from the model
(CoNLL-2003's tags) keeps the model's order; question answering has no labels.
"""

import re
from pathlib import Path

import torch

from minibert.checkpoints.families import BY_MODEL_TYPE
from minibert.checkpoints.name_maps import TASK_HEADS, head_kind, head_tensor_names
from minibert.checkpoints.pretrained import load_pretrained
from minibert.checkpoints.safetensors import load_safetensors, load_torch_bin
from minibert.support import MiniBertError, ParameterError
from minibert.support.files import check_tokenizer_matches, read_json_object, tokenizer_fingerprint
from minibert.support.outputs import describe_model_folder, model_folder_kind
from minibert.tokenization import load_tokenizer

GENERIC_LABEL = re.compile(r"LABEL_\d+")      # transformers' name for a label config.json does not name


def load_task_head(head, weights_file, what):
    """Fill `head` from a fine-tuned folder's model.safetensors (or, from
    transformers' save_pretrained(safe_serialization=False), its
    pytorch_model.bin) and return it. A missing file or tensor, a tensor of
    another shape or not a float is a MiniBertError naming the file and
    `what` the head is."""
    names = head_tensor_names(head_kind(head))
    if not Path(weights_file).is_file():
        raise MiniBertError(f"{weights_file}: no such file, which holds {what}")
    if Path(weights_file).suffix == ".bin":
        wanted = {name.theirs for name in names}
        tensors = {key: value for key, value in load_torch_bin(weights_file).items() if key in wanted}
    else:
        tensors = load_safetensors(weights_file, names=[name.theirs for name in names])
    shapes = {key: tuple(value.shape) for key, value in head.state_dict().items()}
    state = {}
    for name in names:
        value = tensors.get(name.theirs)
        if value is None:
            raise MiniBertError(f"{weights_file}: tensor {name.theirs!r} of {what} is missing")
        if not value.is_floating_point():
            raise MiniBertError(f"{weights_file}: tensor {name.theirs!r} has dtype "
                                f"{str(value.dtype).removeprefix('torch.')}; expected a floating-point weight")
        if tuple(value.shape) != shapes[name.ours]:
            raise MiniBertError(f"{weights_file}: does not fit {what} ({name.theirs} has shape "
                                f"{list(value.shape)}, the head needs {list(shapes[name.ours])})")
        state[name.ours] = value.to(torch.float32)
    head.load_state_dict(state)
    return head



def architecture_kind(architecture):
    """"sentence", "token" or "span" for a transformers task class name, or None."""
    return next((kind for kind, (suffix, _) in TASK_HEADS.items() if architecture.endswith(suffix)), None)


def read_head_config(folder):
    """(config.json's path, its values, the architecture, the model's label
    names in output order) of a folder trained with transformers."""
    config_file = Path(folder) / "config.json"
    if not Path(folder).is_dir():
        raise MiniBertError(f"{folder}: no such folder")
    if not config_file.is_file():
        kind = f"{describe_model_folder(folder)}, " if model_folder_kind(folder) == "student" else ""
        raise MiniBertError(f"{folder}: {kind}no task.json and no config.json: not a fine-tuned model folder")
    values = read_json_object(config_file)
    architectures = values.get("architectures")
    if not (isinstance(architectures, list) and len(architectures) == 1 and isinstance(architectures[0], str)):
        raise MiniBertError(f"{config_file}: field 'architectures' must name the one task model the folder holds "
                            f"(e.g. [\"BertForSequenceClassification\"]), got {str(architectures)[:60]}")
    architecture = architectures[0]
    kind = architecture_kind(architecture)
    family = BY_MODEL_TYPE.get(values.get("model_type"))
    if kind is None:
        raise MiniBertError(f"{config_file}: {architecture} has no task head minibert reads (and the folder no "
                            f"task.json); expected " + " or ".join(f"<Family>{suffix}" for suffix, _ in
                                                                   TASK_HEADS.values()))
    if family is not None and architecture != family.architecture + TASK_HEADS[kind][0]:
        raise MiniBertError(f"{config_file}: architecture {architecture} is not a {values['model_type']} model "
                            f"(expected {family.architecture + TASK_HEADS[kind][0]})")
    # transformers leaves out id2label when it is its default: num_labels (2 unless given) labels LABEL_0, ...
    num_labels = values.get("num_labels", 2)
    default = {str(i): f"LABEL_{i}" for i in range(num_labels)} if type(num_labels) is int and num_labels > 0 else {}
    id2label = values.get("id2label") or default
    try:
        labels = [str(id2label[key]) for key in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        raise MiniBertError(f"{config_file}: field 'id2label' must map 0, 1, ... to label names, "
                            f"got {str(id2label)[:60]}") from None
    if labels and sorted(int(key) for key in id2label) != list(range(len(labels))):
        raise MiniBertError(f"{config_file}: field 'id2label' must number its labels 0 to {len(labels) - 1}")
    return config_file, values, architecture, labels


def match_labels(config_file, model_labels, task_name, task_labels, label_map=None):
    """(the labels in the task's order, order): order[i] is the model's output
    row of label i. `task_labels` None: the task takes the model's labels
    (renamed by label_map) in the model's order."""
    label_map = dict(label_map or {})
    unknown = [name for name in label_map if name not in model_labels]
    if unknown:
        raise ParameterError(f"label_map: {unknown[0]!r} is not one of the model's labels "
                             f"({', '.join(model_labels)}; {config_file}'s id2label)")
    names = [label_map.get(name, name) for name in model_labels]
    repeated = next((name for name in names if names.count(name) > 1), None)
    if repeated is not None:
        raise ParameterError(f"label_map: two of the model's labels are named {repeated!r}; each must be "
                             f"a different label")
    hint = (f"give --label-map {','.join(f'{m}=...' for m in model_labels)}, naming one of {task_name}'s labels "
            f"for each of the model's")
    if task_labels is None:                   # the task learns its labels from the model (NER's tag set)
        generic = [name for name in names if GENERIC_LABEL.fullmatch(name)]
        if generic:
            raise MiniBertError(f"{config_file}: the model's label {generic[0]!r} names none of {task_name}'s labels: "
                                f"{hint}")
        return names, list(range(len(names)))
    extra = [model_label for model_label, name in zip(model_labels, names) if name not in task_labels]
    if extra and extra[0] in label_map:
        raise ParameterError(f"label_map: {extra[0]}={label_map[extra[0]]}: {label_map[extra[0]]!r} is not one of "
                             f"{task_name}'s labels ({', '.join(task_labels)})")
    if extra:
        raise MiniBertError(f"{config_file}: the model's label {extra[0]!r} is not one of {task_name}'s labels "
                            f"({', '.join(task_labels)}): {hint}")
    missing = [label for label in task_labels if label not in names]
    if missing:
        raise MiniBertError(f"{config_file}: {task_name}'s label {missing[0]!r} is none of the model's labels "
                            f"({', '.join(names)}): {hint}")
    return list(task_labels), [names.index(label) for label in task_labels]


def reorder_head(head, order):
    """Put the head's output rows (its weight's rows, its bias) in `order`."""
    state = head.state_dict()
    for name in head_tensor_names(head_kind(head)):
        state[name.ours] = state[name.ours][order]
    head.load_state_dict(state)
    return head


def read_task_folder(folder, make_task, task_name, label_map=None, overrides=None):
    """(base model, head, task, tokenizer, record) of a folder trained with
    transformers (no task.json), read as the task `task_name` (make_task
    makes it, as commands/finetune.load_task_model's). `record` holds what
    task.json would: the task, its labels, max_seq_len, the tokenizer's
    fingerprint, and the folder's architecture and label_map."""
    config_file, values, architecture, model_labels = read_head_config(folder)
    base_model = load_pretrained(folder)
    # The head the task makes, with as many outputs as the model has labels: its kind must be the architecture's.
    head = make_task(task_name, labels=model_labels or None).make_head(base_model.config)
    if head_kind(head) != architecture_kind(architecture):
        wanted = TASK_HEADS[head_kind(head)][0]
        raise ParameterError(f"task_name {task_name}: {config_file} holds a {architecture}, which is not a "
                             f"{task_name} model (expected a ...{wanted}); is it another task's?")
    order = None
    if head_kind(head) == "span":             # start and end: no labels to match
        if label_map:
            raise ParameterError(f"label_map: {task_name} has no labels to map (its model gives start and end "
                                 f"logits)")
        labels = None
    else:
        labels, order = match_labels(config_file, model_labels, task_name, make_task(task_name).labels, label_map)
    record = {"task": task_name, "labels": labels,
              "max_seq_len": min(make_task(task_name).default_max_seq_len,
                                 values.get("max_position_embeddings") or 512),
              "architecture": architecture, "label_map": dict(label_map or {})}
    task = make_task(task_name, labels=labels, settings={**record, **(overrides or {})})
    what = f"the {task_name} head with {len(labels or [])} labels"
    weights = Path(folder) / "model.safetensors"
    if not weights.is_file() and (Path(folder) / "pytorch_model.bin").is_file():
        weights = Path(folder) / "pytorch_model.bin"          # the encoder came from it too (load_pretrained)
    load_task_head(head, weights, what)
    if order is not None:
        reorder_head(head, order)
    tokenizer = load_tokenizer(folder)
    record["vocabulary_fingerprint"] = tokenizer_fingerprint(tokenizer)    # nothing to compare it with: the size
    check_tokenizer_matches(folder, tokenizer, base_model.config, record)
    return base_model, head, task, tokenizer, record
