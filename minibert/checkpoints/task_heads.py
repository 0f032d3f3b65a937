"""Name map for the task heads fine-tuning adds: ours <-> transformers' For<Task> models.

A fine-tuned folder is a complete Hugging Face model folder: config.json and
model.safetensors as transformers' BertForSequenceClassification (and its
kin) write them, so AutoModelForSequenceClassification & co. and the
pipelines load it as it is (docs/formats.md, "The fine-tuned folder"). The
encoder keeps the names of name_maps.py (BERT, ALBERT) or deberta_names.py
(DeBERTa) under its prefix (`bert.`, `albert.`, `deberta.`), and so does the
pooler a sentence head reads (`bert.pooler.dense`, `albert.pooler`, DeBERTa's
ContextPooler `pooler.dense`). The head itself is one more table, the same
in every family (transformers' modeling_bert.py, modeling_albert.py,
modeling_deberta.py, modeling_deberta_v2.py):

    kind      minibert's head (heads.py)   ours        Hugging Face   transformers' model
    sentence  OutputLayer on [CLS]         classifier  classifier     <Family>ForSequenceClassification
    token     OutputLayer on every token   classifier  classifier     <Family>ForTokenClassification
    span      SpanHead                     span        qa_outputs     <Family>ForQuestionAnswering

with <Family> Bert, Albert, Deberta (v1) or DebertaV2 (v2, v3). config.json
gets `architectures` and the labels: `num_labels`, `id2label`, `label2id`
(transformers' pipelines name their answers by id2label). The question
answering head's two outputs are its start and end logits.

`python -m minibert.checkpoints.task_heads` prints the table.
"""

import sys
from pathlib import Path

import torch

from minibert.checkpoints.families import family_of
from minibert.checkpoints.name_maps import LINEAR, TASK_HEAD_PREFIXES, expand
from minibert.checkpoints.safetensors import load_safetensors
from minibert.heads import OutputLayer, SpanHead
from minibert.support.errors import MiniBertError

# kind: (transformers' class suffix, rows (ours, inside the head; Hugging Face; kind))
TASK_HEADS = {
    "sentence": ("ForSequenceClassification", [("classifier", "classifier", LINEAR)]),
    "token": ("ForTokenClassification", [("classifier", "classifier", LINEAR)]),
    "span": ("ForQuestionAnswering", [("span", "qa_outputs", LINEAR)]),
}
assert all(theirs + "." in TASK_HEAD_PREFIXES for _, rows in TASK_HEADS.values() for _, theirs, _ in rows)

SPAN_LABELS = ["start", "end"]     # what the question answering head's two outputs are


def head_kind(head):
    """"sentence", "token" or "span": which transformers model the head is the head of."""
    if isinstance(head, SpanHead):
        return "span"
    if isinstance(head, OutputLayer):
        return "token" if head.per_token else "sentence"
    raise MiniBertError(f"a {type(head).__name__} head has no Hugging Face name")


def head_tensor_names(kind):
    """TensorName rows: our name inside the head <-> the Hugging Face name."""
    return expand([(ours, theirs, None, row_kind) for ours, theirs, row_kind in TASK_HEADS[kind][1]],
                  "huggingface")


def head_config(model, head, labels):
    """The config.json fields a task model adds: its architecture and labels."""
    kind = head_kind(head)
    labels = SPAN_LABELS if kind == "span" else list(labels)
    return {"architectures": [family_of(model).architecture + TASK_HEADS[kind][0]], "num_labels": len(labels),
            "id2label": {str(i): label for i, label in enumerate(labels)},
            "label2id": {label: i for i, label in enumerate(labels)}}


def head_state_dict(head):
    """The head's tensors under Hugging Face names (cpu, contiguous copies)."""
    state = head.state_dict()
    return {name.theirs: name.from_ours(state).detach().to("cpu").contiguous().clone()
            for name in head_tensor_names(head_kind(head))}


def load_task_head(head, weights_file, what):
    """Fill `head` from a fine-tuned folder's model.safetensors and return it.
    A missing file or tensor, a tensor of another shape or not a float is a
    MiniBertError naming the file and `what` the head is."""
    names = head_tensor_names(head_kind(head))
    if not Path(weights_file).is_file():
        raise MiniBertError(f"{weights_file}: no such file, which holds {what}")
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


def print_task_heads(file=sys.stdout):
    """Print the table: kind, ours (in TaskModel), Hugging Face, transformers' model."""
    for kind, (suffix, _) in TASK_HEADS.items():
        for name in head_tensor_names(kind):
            print(f"{kind:10s} head.{name.ours:25s} {name.theirs:25s} <Family>{suffix}", file=file)


if __name__ == "__main__":
    print_task_heads()
