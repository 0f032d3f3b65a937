"""minibert: a from-scratch, readable PyTorch BERT, ALBERT and DeBERTa.

    import minibert
    model = minibert.load_pretrained()        # the bundled model; or a folder, or "bert-base-uncased"
    tokenizer = minibert.load_tokenizer()     # the same arguments
    batch = tokenizer.batch_encode(["she opened the [MASK] and walked into the room."])
    logits = model(**batch).mlm_logits        # (batch, tokens, vocab); the [MASK] predicts "door"

The public API, importable from `minibert` itself:

    load_pretrained(name_or_path=None)   a BertModel (BERT, ALBERT) from Google's TF checkpoints,
                                         Hugging Face folders (safetensors or .bin), a hub id
                                         ("google-bert/bert-base-uncased", through huggingface_hub
                                         and its cache) or a known name; a DebertaModel
                                         (minibert/deberta.py) from a DeBERTa folder or hub id
    save_pretrained(model, directory)    Hugging Face layout that `transformers` loads
    load_tokenizer(name_or_path=None)    WordPiece or SentencePiece, as the folder says
    BertConfig, BertModel                the model itself (minibert/model.py)
    MiniBertError                        the one exception raised for bad input

The names are imported on first use, so `import minibert` stays cheap and
the submodules (which import each other) never meet a half-built package.
"""

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "load_pretrained": "minibert.checkpoints",
    "save_pretrained": "minibert.checkpoints",
    "load_tokenizer": "minibert.tokenization",
    "BertConfig": "minibert.model",
    "BertModel": "minibert.model",
    "MiniBertError": "minibert.support",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'minibert' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
