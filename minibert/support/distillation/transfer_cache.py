"""Support for minibert/distillation.py: the cache of the transfer set and the
teacher's logits on it.

Augmenting a training set and running the teacher on every sample is the slow
part of a distillation run; the numbers depend only on the teacher's files,
the training data and the augmentation settings. So the first run writes them
to CACHE_DIR/<key>.npz, the key a SHA-256 of everything they depend on, and a
later run with the same inputs reads them back. Change any input and the key
changes: the cache is recomputed, never wrongly reused.
"""

import json
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from minibert.support.errors import MiniBertError
from minibert.support.fileio import atomic_write, file_sha256
from minibert.support.fingerprints import fingerprint
from minibert.support.google_archives import default_cache_dir
from minibert.support.inputs import copy_for
from minibert.support.task_files import ClassificationExample

CACHE_FORMAT = 1                           # bump when the cache file's content changes meaning


def teacher_fingerprint(folder):
    """A SHA-256 of the files that decide the teacher's logits: its config,
    weights (the head's among them), task.json (labels, max_seq_len) and
    tokenizer files."""
    names = ("config.json", "model.safetensors", "pytorch_model.bin", "task.json", "vocab.txt", "spiece.model",
             "tokenizer.json", "tokenizer_config.json")
    return fingerprint({name: file_sha256(Path(folder) / name) for name in names if (Path(folder) / name).is_file()})


def transfer_key(teacher_folder, train_file, settings, task, n_examples, label_map=None):
    """The cache file's name: a SHA-256 of everything the cached numbers
    depend on (the teacher's files, the training file's bytes, how many of
    its examples are used, the augmentation settings and the POS lexicon).
    Change any of them and the key changes, so the cache is recomputed."""
    parts = {"format": CACHE_FORMAT, "teacher": teacher_fingerprint(teacher_folder),
             "data": file_sha256(train_file), "task": task.name, "examples": n_examples, "augment": settings.augment}
    if settings.augment:
        pos_file = copy_for(settings.pos_file) if settings.pos_file else None    # a pipe: its copy (inputs.read_once)
        parts.update(n_iter=settings.n_iter, seed=settings.seed, p_mask=settings.p_mask, p_pos=settings.p_pos,
                     p_ng=settings.p_ng, max_ngram=settings.max_ngram, pair_augment=settings.pair_augment,
                     pos_file=file_sha256(pos_file) if pos_file and Path(pos_file).is_file() else None)
    if label_map:                    # which of the teacher's outputs is which label
        parts["label_map"] = sorted(label_map.items())
    if settings.bf16:                # the teacher's logits computed under bfloat16 autocast differ a little
        parts["bf16"] = True
    return fingerprint(parts)


def save_transfer_cache(path, key, augmented, logits):
    """One .npz: the key (checked on reading), the augmented samples as
    UTF-8 JSON bytes ([[text_a, text_b, source line], ...]: no pickle needed
    to read them back) and the teacher's logits (N, K) for originals + samples."""
    texts = json.dumps([[e.text_a, e.text_b, e.line] for e in augmented]).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as f:
        np.savez(f, key=np.array(key), logits=logits, augmented=np.frombuffer(texts, dtype=np.uint8))


def load_transfer_cache(path, key, examples):
    """(transfer examples, logits) from a cache file, or None if the file is
    absent, unreadable or not for this key (then it is recomputed)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["key"]) != key:
                return None
            logits = data["logits"]
            texts = json.loads(data["augmented"].tobytes().decode("utf-8"))
    except Exception:   # a damaged or foreign file: recompute rather than fail
        return None
    if not all(isinstance(t, list) and len(t) == 3 for t in texts):
        return None
    augmented = [ClassificationExample(a, b, None, None, line) for a, b, line in texts]
    if logits.ndim != 2 or len(logits) != len(examples) + len(augmented):
        return None
    return list(examples) + augmented, logits.astype(np.float32)


def cached_transfer_set(compute, teacher_folder, train_file, settings, task, examples, progress=True,
                        label_map=None):
    """(transfer examples, teacher logits (N, K), whether the cache answered).

    compute() -> (transfer examples, logits) runs only when the cache file
    CACHE_DIR/<transfer_key>.npz is absent or stale; its result is then
    written there. A cache folder that cannot be written costs time, not the run.
    `label_map`: a teacher trained with transformers' renamed labels (they order its logits)."""
    cache_dir = Path(settings.cache_dir) if settings.cache_dir else default_cache_dir() / "distill"
    key = transfer_key(teacher_folder, train_file, settings, task, len(examples), label_map)
    path = cache_dir / f"{key}.npz"
    cached = load_transfer_cache(path, key, examples)
    if cached is not None:
        if progress:
            tqdm.write(f"teacher logits: reusing {path}")
        return (*cached, True)
    transfer, logits = compute()
    try:
        save_transfer_cache(path, key, transfer[len(examples):], logits)
    except (MiniBertError, OSError) as e:
        tqdm.write(f"warning: cannot write the teacher-logit cache {path} ({e})")
    return transfer, logits, False
