"""Fingerprints: a short hash that says whether two things are the same.

`fingerprint(value)` is the one hash of a record (a JSON-able value), and
fileio.file_sha256 the one hash of a file's bytes: every cache key and every
record --resume compares is made of these two. A tokenizer's fingerprint covers its kind, its casing and every token in id
order. The pretraining token cache is keyed by it (token_cache.py), --resume
compares it, and a fine-tuned folder records it in task.json, so that a
vocab.txt replaced later (another vocabulary of any size, or another casing)
is refused instead of quietly feeding the model the wrong ids.
"""

import hashlib
import json
from pathlib import Path

from minibert.support.errors import MiniBertError


def fingerprint(value):
    """SHA-256 (hex) of a JSON-able value, its dict keys sorted."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def vocabulary(tokenizer):
    """Every token, in id order."""
    return tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))


def tokenizer_fingerprint(tokenizer):
    """SHA-256 of the tokenizer's kind, casing and tokens in id order."""
    return fingerprint([tokenizer.kind, tokenizer.do_lower_case, vocabulary(tokenizer)])


def check_tokenizer_matches(folder, tokenizer, config, record):
    """A fine-tuned folder's tokenizer is the one its model was fine-tuned
    with. Ids beyond the embedding table would fail mid-run (an index out of
    range); another vocabulary of any size would quietly feed the model wrong
    ids (task.json records the fingerprint, and a task.json without it is
    refused: the check cannot be made)."""
    if tokenizer.vocab_size > config.vocab_size:
        raise MiniBertError(f"{folder}: its tokenizer has {tokenizer.vocab_size} tokens, more than the model's "
                            f"vocab_size {config.vocab_size} (config.json): the vocabulary is not this model's")
    if "vocabulary_fingerprint" not in record:
        raise MiniBertError(f"{Path(folder) / 'task.json'}: field 'vocabulary_fingerprint' is missing")
    if record["vocabulary_fingerprint"] != tokenizer_fingerprint(tokenizer):
        raise MiniBertError(f"{folder}: its tokenizer files (vocab.txt, ...) are not the vocabulary it was "
                            f"fine-tuned with (task.json's vocabulary_fingerprint): tokens or casing changed")
