"""Support for minibert/distillation.py: the vectors the student's embedding
table may start from besides Tang's random ones: pre-trained word vectors
(word2vec or GloVe text files) for the words of its vocabulary, or the
teacher's word-piece embedding matrix (--embeddings teacher)."""

import math
from pathlib import Path

import numpy as np
import torch

from minibert.support.distillation.student_config import MAX_EMBEDDING_DIM as MAX_DIM
from minibert.support.errors import MiniBertError
from minibert.support.seeds import generator_for




def vector_lines(path):
    """Yield (line number, word, the vector's numbers as text) for each line
    of a word2vec or GloVe text file, every line's form checked: UTF-8, and
    as many numbers as the first vector line (or the header) says.

    word2vec's files start with a header "count dim", and their words hold
    no spaces: a line with more fields than 1 + dim means the header's
    dimension is wrong (read as it says, the extra numbers would become part
    of the word and no word would match). GloVe's have no header, and a word
    may hold spaces (GloVe 840B), so the numbers are the last dim fields."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise MiniBertError(f"--embeddings {path}: cannot read ({e.strerror or e})") from None
    header_dim, file_dim = None, None
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
            if number == 1 and len(fields) == 2 and all(x.isascii() and x.isdigit() for x in fields):
                header_dim = file_dim = int(fields[1])                # word2vec's "count dim" header
                if not 1 <= file_dim <= MAX_DIM:
                    raise MiniBertError(f"{path}: line 1: the header says {file_dim:,}-dimensional vectors; "
                                        f"expected 1 to {MAX_DIM:,}")
                continue
            if file_dim is None:
                file_dim = len(fields) - 1
                if file_dim < 1:
                    raise MiniBertError(f"{path}: line {number}: expected a word and its vector's numbers")
            if header_dim is not None and len(fields) > header_dim + 1:
                raise MiniBertError(f"{path}: line {number}: a word and {len(fields) - 1} numbers, but the header "
                                    f"(line 1) says {header_dim}-dimensional vectors")
            word, *values = line.rsplit(None, file_dim)          # a word may hold spaces (GloVe 840B)
            if len(values) != file_dim:
                raise MiniBertError(f"{path}: line {number}: {len(values)} numbers; expected {file_dim}")
            yield number, word, values
    if file_dim is None:
        raise MiniBertError(f"{path}: no word vectors in the file")


def parse_vector(path, number, values):
    try:
        vector = np.array(values, dtype=np.float32)
    except ValueError:
        raise MiniBertError(f"{path}: line {number}: expected {len(values)} numbers after the word") from None
    if not np.isfinite(vector).all():
        raise MiniBertError(f"{path}: line {number}: a vector value is not finite")
    return vector


def check_dim(path, file_dim, dim):
    if dim is not None and dim != file_dim:
        raise MiniBertError(f"{path}: holds {file_dim}-dimensional vectors, but --embedding-dim is {dim} "
                            f"(leave it out to take the file's)")


def check_word_vectors(path, dim=None):
    """Read the whole file once before any slow work (augmentation, the
    teacher's logits), so that a bad line near its end stops the run at once
    rather than hours later: every line's form and numbers. Returns the
    vectors' dimension. (The vocabulary the vectors are read for is known
    only after the transfer set is built, so read_word_vectors reads again.)"""
    path, file_dim = Path(path), None
    if not path.is_file():            # read twice (here, then for the words): a pipe would be empty the second time
        raise MiniBertError(f"--embeddings {path}: not a regular file (a folder, a pipe or a device); expected a "
                            f"word-vectors text file, which is read twice")
    for number, word, values in vector_lines(path):
        parse_vector(path, number, values)
        file_dim = len(values)
    check_dim(path, file_dim, dim)
    return file_dim


def read_word_vectors(path, words, dim=None):
    """({word: vector}, dimension) for the `words` found in a word2vec or
    GloVe text file: "word x1 x2 ... xd" per line, an optional first line
    "count dim". Words are matched lower-cased (the vocabulary is); the first
    vector of a word wins (files list frequent spellings first). Words of the
    file that are not in the vocabulary are skipped."""
    path = Path(path)
    wanted, found, file_dim = set(words), {}, None
    for number, word, values in vector_lines(path):
        file_dim = len(values)
        word = word.lower()
        if word in wanted and word not in found:
            found[word] = parse_vector(path, number, values)
    check_dim(path, file_dim, dim)
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
