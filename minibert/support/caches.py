"""Caches of slow work, each keyed by a SHA-256 of everything its result
depends on, so a changed input builds a new entry and a stale one is never
reused: the pretraining corpus tokenized once (pretraining.py), and a
distillation's transfer set with the teacher's logits on it (distillation.py).
"""

import json
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from minibert.support import MiniBertError
from minibert.support.files import (atomic_write, copy_for, file_sha256, fingerprint, remove_leftovers_in, save_array,
                                    tokenizer_fingerprint, write_json)
from minibert.support.hub import default_cache_dir
from minibert.support.task_files import ClassificationExample

# ==============================================================================
# The pretraining corpus, tokenized once: the token cache that
# minibert/pretraining.py packs into sequences.
#
# Input files hold one paragraph per line; a blank line or a new file starts a
# new document. Paragraphs are split into sentences by the lesson's rule
# (pretraining.split_sentences, passed in). The
# result is three numpy arrays saved in a folder named by a hash of (corpus,
# vocabulary, settings), so a changed file, vocabulary or setting builds a new
# cache, and the arrays are opened as memory maps (the corpus never has to fit
# in memory twice).
# ==============================================================================


CACHE_VERSION = 1


def read_documents(files):
    """Yield documents, each a list of paragraphs (strings)."""
    for path in files:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise MiniBertError(f"{path}: cannot read corpus file as UTF-8 text ({e})") from None
        document = []
        for line in text.splitlines():
            if line.strip():
                document.append(line)
            elif document:
                yield document
                document = []
        if document:
            yield document


def cache_key(files, tokenizer_fingerprint, settings):
    """Hash of everything the cache depends on: each file's name, size and
    content hash, the vocabulary, and the settings."""
    return fingerprint([CACHE_VERSION, tokenizer_fingerprint, settings,
                        [[path, file_sha256(path)] for path in sorted(map(str, files))]])[:16]


def encode_sentences(tokenizer, sentences):
    """Word-piece ids of each sentence, without [CLS] and [SEP] (the
    `tokenizers` backend encodes a whole batch in parallel)."""
    return [e.ids for e in tokenizer.backend.encode_batch(sentences, add_special_tokens=False)]


def build_token_cache(files, tokenizer, cache_dir, split_sentences, rule, progress=True):
    """Tokenize the corpus into `cache_dir/<key>/`: tokens.npy (all word-piece
    ids, back to back), sentence_starts.npy (offset of each sentence, plus the
    end), sentence_documents.npy (document index of each sentence). Returns the
    folder; an existing complete cache is reused.

    split_sentences: paragraph -> sentences (pretraining.split_sentences);
    rule: what the key records of it (its regular expression), so that a
    changed rule builds a new cache."""
    files = [Path(f) for f in files]
    if not files:
        raise MiniBertError("--corpus: no text files given")
    for path in files:
        if not path.is_file():
            raise MiniBertError(f"{path}: corpus file not found")
    key = cache_key(files, tokenizer_fingerprint(tokenizer), {"splitter": rule})
    folder = Path(cache_dir) / key
    if (folder / "done").exists():
        try:
            read_cache_marker(folder)
            return folder
        except MiniBertError as e:  # a damaged marker: build the cache again rather than trust the arrays
            tqdm.write(f"rebuilding the token cache: {e}")

    tokens, starts, documents = [], [0], []
    total = 0
    all_documents = list(read_documents(files))
    if not all_documents:
        raise MiniBertError(f"corpus {', '.join(map(str, files[:3]))}: the files hold no text")
    for doc_index, document in enumerate(tqdm(all_documents, desc="tokenizing corpus", unit="doc", disable=not progress)):
        sentences = [s for paragraph in document for s in split_sentences(paragraph)]
        for ids in encode_sentences(tokenizer, sentences):
            if not ids:
                continue
            tokens.append(np.asarray(ids, dtype=np.int32))
            total += len(ids)
            starts.append(total)
            documents.append(doc_index)
    if total == 0:
        raise MiniBertError("the corpus produced no tokens")
    dtype = np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max else np.int32
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MiniBertError(f"--cache-dir {cache_dir}: cannot make the token cache folder ({e.strerror})") from None
    save_array(folder / "tokens.npy", np.concatenate(tokens).astype(dtype))
    save_array(folder / "sentence_starts.npy", np.asarray(starts, dtype=np.int64))
    save_array(folder / "sentence_documents.npy", np.asarray(documents, dtype=np.int32))
    # The marker last, and atomically: a cache killed half-way has no marker
    # (or the old one), never half a marker next to half-written arrays.
    write_json(folder / "done", {"files": [str(f) for f in files], "tokens": total,
                                 "tokenizer": tokenizer_fingerprint(tokenizer)})
    return folder


def is_token_cache(path):
    return (Path(path) / "done").is_file() and (Path(path) / "tokens.npy").is_file()


def read_cache_marker(folder):
    """The `done` file that build_token_cache writes last: a JSON object naming
    the files, the token count and the vocabulary's fingerprint."""
    path = Path(folder) / "done"
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # ValueError covers bad JSON and bad UTF-8
        raise MiniBertError(f"{path}: damaged token cache marker ({e}); delete {folder} to build it again") from None
    if not isinstance(marker, dict) or not isinstance(marker.get("tokenizer"), str):
        raise MiniBertError(f"{path}: damaged token cache marker (expected a JSON object with a \"tokenizer\" "
                            f"fingerprint); delete {folder} to build it again")
    return marker


def check_token_cache(folder, tokenizer):
    """A prepared cache given directly (e.g. copied to another machine) must
    have been made with this vocabulary."""
    made_with = read_cache_marker(folder)["tokenizer"]
    if made_with != tokenizer_fingerprint(tokenizer):
        raise MiniBertError(f"{folder}: this token cache was made with a different vocabulary or casing")
    return folder


class TokenCache:
    """The cached arrays, memory-mapped."""

    def __init__(self, folder):
        folder = Path(folder)
        try:
            self.tokens = np.load(folder / "tokens.npy", mmap_mode="r")
            self.sentence_starts = np.load(folder / "sentence_starts.npy")
            self.sentence_documents = np.load(folder / "sentence_documents.npy")
        except (OSError, ValueError, EOFError) as e:  # missing, truncated or not numpy arrays
            raise MiniBertError(f"{folder}: damaged token cache ({e}); delete it to build it again") from None

    def sentence(self, index):
        return self.tokens[self.sentence_starts[index]:self.sentence_starts[index + 1]]


# ==============================================================================
# Support for minibert/distillation.py: the cache of the transfer set and the
# teacher's logits on it.
#
# Augmenting a training set and running the teacher on every sample is the slow
# part of a distillation run; the numbers depend only on the teacher's files,
# the training data and the augmentation settings. So the first run writes them
# to CACHE_DIR/<key>.npz, the key a SHA-256 of everything they depend on, and a
# later run with the same inputs reads them back. Change any input and the key
# changes: the cache is recomputed, never wrongly reused.
# ==============================================================================


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
        pos_file = copy_for(settings.pos_file) if settings.pos_file else None    # a pipe: its copy (files.read_once)
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
    remove_leftovers_in(cache_dir)      # a killed run's file under another key than this run's (settings changed)
    try:
        save_transfer_cache(path, key, transfer[len(examples):], logits)
    except (MiniBertError, OSError) as e:
        tqdm.write(f"warning: cannot write the teacher-logit cache {path} ({e})")
    return transfer, logits, False
