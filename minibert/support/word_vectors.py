"""Support for minibert/distillation.py: the vectors the student's embedding
table may start from besides Tang's random ones: pre-trained word vectors
(word2vec or GloVe text files) for the words of its vocabulary, or the
teacher's word-piece embedding matrix (--embeddings teacher)."""

import math
from pathlib import Path

import numpy as np
import torch

from minibert.support.errors import MiniBertError
from minibert.support.seeds import generator_for


def read_word_vectors(path, words, dim=None):
    """({word: vector}, dimension) for the `words` found in a word2vec or
    GloVe text file: "word x1 x2 ... xd" per line, an optional first line
    "count dim". Words are matched lower-cased (the vocabulary is); the first
    vector of a word wins (files list frequent spellings first). Words of the
    file that are not in the vocabulary are skipped."""
    path = Path(path)
    wanted, found, file_dim = set(words), {}, None
    try:
        f = open(path, "rb")
    except OSError as e:
        raise MiniBertError(f"--embeddings {path}: cannot read ({e.strerror or e})") from None
    with f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8").rstrip()
            except UnicodeDecodeError:
                raise MiniBertError(f"{path}: line {number}: not UTF-8 text (binary word2vec files are not read: "
                                    f"convert to the text format)") from None
            if not line:
                continue
            fields = line.split()
            if number == 1 and len(fields) == 2 and all(x.isdigit() for x in fields):
                file_dim = int(fields[1])                         # word2vec's "count dim" header
                continue
            if file_dim is None:
                file_dim = len(fields) - 1
                if file_dim < 1:
                    raise MiniBertError(f"{path}: line {number}: expected a word and its vector's numbers")
            word, *values = line.rsplit(None, file_dim)          # a word may hold spaces (GloVe 840B)
            if len(values) != file_dim:
                raise MiniBertError(f"{path}: line {number}: {len(values)} numbers; expected {file_dim}")
            word = word.lower()
            if word in wanted and word not in found:
                try:
                    vector = np.array(values, dtype=np.float32)
                except ValueError:
                    raise MiniBertError(f"{path}: line {number}: expected {file_dim} numbers after the word") from None
                if not np.isfinite(vector).all():
                    raise MiniBertError(f"{path}: line {number}: a vector value is not finite")
                found[word] = vector
    if file_dim is None:
        raise MiniBertError(f"{path}: no word vectors in the file")
    if dim is not None and dim != file_dim:
        raise MiniBertError(f"{path}: holds {file_dim}-dimensional vectors, but --embedding-dim is {dim} "
                            f"(leave it out to take the file's)")
    return found, file_dim


def teacher_embedding_matrix(base_model, dim, seed):
    """The teacher's word-piece embedding matrix (V, E), at width `dim`: as
    it is when dim equals E, else times a fixed random projection P (E, dim)
    with entries N(0, 1/dim), which keeps lengths and angles roughly
    (Johnson-Lindenstrauss) and is a function of the seed alone."""
    weight = base_model.embeddings.word_embeddings.weight.detach().float()  # (V, E)
    if dim == weight.shape[1]:
        return weight.clone()
    projection = torch.randn(weight.shape[1], dim, generator=generator_for(seed, "embedding projection"))
    return weight @ projection / math.sqrt(dim)                              # (V, dim)


class StartingEmbeddings:
    """What the student's embedding table starts from (--embeddings): random
    U(-0.25, 0.25) as the model draws it (Tang's "rand"), the teacher's
    word-piece embeddings (a teacher's base model), or the vectors a
    word2vec/GloVe file has for the vocabulary's words (the others stay random).
    `dim` is the width the student must have, `report` says what was used."""

    def __init__(self, settings, tokenizer, teacher_base_model=None):
        self.dim, self.report = settings.embedding_dim or 300, "random U(-0.25, 0.25)"
        self.matrix, self.vectors = None, {}
        if settings.embeddings == "teacher":
            width = teacher_base_model.embeddings.word_embeddings.weight.shape[1]
            self.dim = settings.embedding_dim or width
            self.matrix = teacher_embedding_matrix(teacher_base_model, self.dim, settings.seed)
            self.report = (f"the teacher's word-piece embeddings ({width}-d"
                           + (")" if self.dim == width else f", randomly projected to {self.dim}-d)"))
        elif settings.embeddings != "random":
            self.vectors, self.dim = read_word_vectors(settings.embeddings, tokenizer.words, settings.embedding_dim)
            self.report = (f"{settings.embeddings}: vectors for {len(self.vectors):,} of "
                           f"{tokenizer.vocab_size - 3:,} words, the others random U(-0.25, 0.25)")
        self.ids = getattr(tokenizer, "ids", {})

    @torch.no_grad()
    def fill(self, weight, padding_id):
        """Copy them into the student's embedding weight (V, dim), drawn at random before."""
        if self.matrix is not None:
            weight.copy_(self.matrix)
            weight[padding_id].zero_()      # never read (packed away), as in lstm.py
        for word, vector in self.vectors.items():
            weight[self.ids[word]] = torch.from_numpy(vector)
