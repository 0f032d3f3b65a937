"""What only the distillation lesson (distillation.py) reads and checks: the
part-of-speech tagged file its transfer set learns its replacements from,
the word vectors the student's embeddings may start from, the student's
vocab.txt and padded batches, and a distillation run's settings and the files
they name.

torch is imported inside the functions that use it: distill.py checks its
flags and settings with this module before it imports torch, so --help and a
bad flag answer at once (tests/test_cli.py).
"""

import math
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from minibert.support.checks import EMBEDDINGS_MODES, MAX_EMBEDDING_DIM as MAX_DIM
from minibert.support import MiniBertError
from minibert.support.files import atomic_write, copy_for, not_a_file
from minibert.support.outputs import describe_model_folder, model_folder_kind, read_record

# ==============================================================================
# Support for minibert/distillation.py's transfer set: the words and tags of a
# part-of-speech tagged file ("word TAG ..." per line, as CoNLL-2003's) that
# distillation.PosLexicon learns from, and the checks of the augmenter's arguments.
# ==============================================================================


def tagged_lines(path):
    """(1-based line number, whitespace-separated fields) of each line that is
    neither blank nor a CoNLL "-DOCSTART-" line."""
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                fields = line.split()
                if fields and fields[0] != "-DOCSTART-":
                    yield number, fields
    except UnicodeDecodeError:
        raise MiniBertError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise MiniBertError(f"{path}: cannot read ({e.strerror or e})") from None


def tagged_word_counts(paths, split_words):
    """word -> Counter({tag: count}) of tagged files: lines "word TAG [more
    columns]", the first two whitespace-separated columns (CoNLL-2003's "word
    POS chunk NER" gives its POS column). Blank lines and "-DOCSTART-" lines
    are skipped; words are lower-cased. Only words that `split_words` (the
    lesson's, augment.split_words) keeps whole are used ("u.s." is not: the sentences would never contain it as one word)."""
    counts = defaultdict(Counter)
    for path in paths:
        lines, worded, first = 0, 0, None
        for number, fields in tagged_lines(path):
            if len(fields) < 2:
                raise MiniBertError(f"{path}: line {number}: one column {fields[0]!r}; "
                                    f"expected 'word TAG' (a word and its part-of-speech tag)")
            lines += 1
            # Tag sets write their tags in capitals or punctuation (NN, JJ, NOUN, ","); prose has words there.
            if any(c.islower() for c in fields[1]):
                worded += 1
                first = first or (number, fields[1])
            word = fields[0].lower()
            if split_words(word) == [word]:
                counts[word][fields[1]] += 1
        if lines == 0:
            raise MiniBertError(f"{path}: no 'word TAG' lines (the file is empty or has only "
                                f"blank and -DOCSTART- lines)")
        if worded > lines / 2:
            raise MiniBertError(f"{path}: line {first[0]}: {first[1]!r} in the tag column, and a word there in "
                                f"{worded:,} of {lines:,} lines: prose? expected 'word TAG' lines (a word and its "
                                f"part-of-speech tag, such as NN or JJ)")
    if not counts:
        raise MiniBertError(f"{', '.join(map(str, paths))}: no usable words (every word has punctuation inside)")
    return counts


PAIR_SCHEMES = ("consistent", "independent")   # one fate per word across the pair; each sentence on its own


def check_augmentation(p_mask, p_pos, p_ng, max_n, pair_scheme="consistent", n_iter=1):
    """The augmenter's arguments (distillation.py's transfer set): probabilities, n-gram and sample counts, the
    pair scheme."""
    if pair_scheme not in PAIR_SCHEMES:
        raise MiniBertError(f"pair scheme {pair_scheme!r}: expected consistent or independent")
    for name, p in (("p_mask", p_mask), ("p_pos", p_pos), ("p_ng", p_ng)):
        if not 0 <= p <= 1:
            raise MiniBertError(f"{name} = {p}: expected a probability in [0, 1]")
    if p_mask + p_pos > 1:
        raise MiniBertError(f"p_mask + p_pos = {p_mask} + {p_pos} > 1: a word is masked, replaced or kept, "
                            f"so the two probabilities must add up to at most 1")
    if not (isinstance(max_n, (int, np.integer)) and max_n >= 1):
        raise MiniBertError(f"max_n = {max_n}: expected an integer >= 1 (the longest n-gram)")
    if not (isinstance(n_iter, (int, np.integer)) and n_iter >= 1):
        raise MiniBertError(f"n_iter = {n_iter}: expected an integer >= 1 (samples per example)")


# ==============================================================================
# Support for minibert/distillation.py: the vectors the student's embedding
# table may start from besides Tang's random ones: pre-trained word vectors
# (word2vec or GloVe text files) for the words of its vocabulary, or the
# teacher's word-piece embedding matrix (--embeddings teacher).
# ==============================================================================


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
    import torch
    from minibert.support.runtime import generator_for
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

    def fill(self, weight, padding_id):
        """Copy them into the student's embedding weight (V, dim), drawn at random before."""
        import torch
        with torch.no_grad():
            if self.matrix is not None:
                weight.copy_(self.matrix)
                weight[padding_id].zero_()      # never read (packed away), as in lstm.py
            for word, vector in self.vectors.items():
                weight[self.ids[word]] = torch.from_numpy(vector)


# ==============================================================================
# Support for minibert/distillation.py: the student's word vocabulary file
# (vocab.txt, written and read back with its checks; the vocabulary itself is
# distillation.build_vocabulary's), and padded batches: `collate_student`
# stacks one batch of the student's features (ids, gold labels, the teacher's
# logits) for finetuning.LengthGroupedBatches.
# ==============================================================================


VOCAB_FILE = "vocab.txt"


def write_word_vocabulary(folder, words):
    """vocab.txt: one word per line, in id order."""
    with atomic_write(Path(folder) / VOCAB_FILE, mode="w") as f:
        f.write("".join(word + "\n" for word in words))


def read_word_vocabulary(folder, special_words):
    """The words of vocab.txt, one per line, checked: no blanks or spaces, no
    word twice, `special_words` first."""
    path = Path(folder) / VOCAB_FILE
    try:
        words = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise MiniBertError(f"{path}: cannot read the student's vocabulary ({e})") from None
    if words and words[-1] == "":
        words.pop()
    for number, word in enumerate(words, start=1):
        if not word or word != word.strip():
            raise MiniBertError(f"{path}: line {number}: expected one word without spaces, got {word!r}")
    if len(set(words)) != len(words):
        raise MiniBertError(f"{path}: a word appears twice")
    if tuple(words[:len(special_words)]) != tuple(special_words):
        raise MiniBertError(f"{path}: expected the first lines to be {', '.join(special_words)}")
    return words


def pad(sequences, pad_id):
    """Right-padded ids (B, T) and their attention mask (B, T), T the longest."""
    import torch
    from torch.nn.utils.rnn import pad_sequence
    rows = [torch.as_tensor(s, dtype=torch.long) for s in sequences]
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id)                     # (B, T)
    lengths = torch.tensor([len(s) for s in sequences])
    return ids, (torch.arange(ids.shape[1]) < lengths[:, None]).long()


def collate_student(features, pad_id):
    """A batch (the collate hook of finetuning's LengthGroupedBatches):
    input_ids, attention_mask, input_ids_b / attention_mask_b for pairs,
    labels (B,), and the teacher's logits (B, K) when the features carry them."""
    import torch
    batch = {}
    batch["input_ids"], batch["attention_mask"] = pad([f["input_ids"] for f in features], pad_id)
    if "input_ids_b" in features[0]:
        batch["input_ids_b"], batch["attention_mask_b"] = pad([f["input_ids_b"] for f in features], pad_id)
    batch["labels"] = torch.tensor([f["labels"] for f in features], dtype=torch.long)
    if "teacher_logits" in features[0]:
        batch["teacher_logits"] = torch.from_numpy(np.stack([f["teacher_logits"] for f in features]))
    return batch


# ==============================================================================
# Support for minibert/distillation.py: the checks of a distillation run's
# settings (distillation.DistillationSettings, where the values and their
# reasons are) and of the files they name.
# ==============================================================================


DISTILL_TERMS = ("mse", "squared-l2")
UNLABELLED_TARGETS = ("none", "teacher")


def check_files(settings):
    """The files the settings name exist: a typo must not surface only after
    hours of augmentation and teacher logits."""
    if settings.embeddings not in ("random", "teacher"):
        if not Path(settings.embeddings).exists():
            raise MiniBertError(f"--embeddings {settings.embeddings}: expected random, teacher or a word-vectors "
                                f"file (no such file)")
        check_word_vectors(settings.embeddings, settings.embedding_dim)     # every line, before the slow work
    if settings.pos_file is not None:
        pos_file_path(settings.pos_file)


def pos_file_path(pos_file):
    """The part-of-speech file for POS-guided replacement (--pos-file; distill.py
    gives its default)."""
    if pos_file is None:
        raise MiniBertError("augmentation needs a part-of-speech lexicon: pass --pos-file FILE ('word TAG' lines, "
                            "e.g. CoNLL-2003's eng.train) or --no-augment")
    pos_file = copy_for(pos_file)         # a pipe: the copy distill.py made (files.read_once)
    if not_a_file(pos_file, "--pos-file"):
        raise MiniBertError(not_a_file(pos_file, "--pos-file"))
    return Path(pos_file)


def check_teacher_folder(folder, task_name, classification_tasks):
    """A fine-tuned *sentence classifier* folder, or a one-line error naming
    what it is instead (a NER or SQuAD model, a pretrained model without a
    head, another task than `task_name`)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MiniBertError(f"--teacher {folder}: no such folder")
    if model_folder_kind(folder) == "student":
        raise MiniBertError(f"--teacher {folder}: {describe_model_folder(folder)}, not a BERT-family "
                            f"classifier; a teacher is a finetune.py classifier folder")
    if not (folder / "task.json").is_file():
        if task_name is not None:        # a folder trained with transformers: its config.json is checked as it is read
            return
        raise MiniBertError(f"--teacher {folder}: not a finetune.py classifier folder (no task.json: a pretrained "
                            f"model? fine-tune it first with finetune.py --task ...; a classifier trained with "
                            f"transformers needs --task)")
    task = read_record(folder, "task.json", required=("task", "max_seq_len"))["task"]
    if task not in classification_tasks:
        raise MiniBertError(f"--teacher {folder}: a {task} model; distillation needs a sentence "
                            f"classifier ({', '.join(classification_tasks)})")
    if task_name is not None and task_name != task:
        raise MiniBertError(f"--task {task_name}: the teacher {folder} was fine-tuned for {task}")


def check_run(settings, task, has_teacher, distilling, classification_tasks):
    """The run asked for makes sense, before any work: the task is a
    sentence classification, --embeddings teacher has a teacher, the
    optimizer is known, and without teacher logits the loss is the gold
    labels' alone (alpha 1). `settings` are the resolved ones."""
    if not has_teacher and settings.embeddings == "teacher":
        raise MiniBertError("--embeddings teacher needs --teacher DIR")
    if task.name not in classification_tasks:
        raise MiniBertError(f"--task {task.name}: distillation is for sentence classification "
                            f"({', '.join(classification_tasks)})")
    for flag, value, known in (("--embeddings-mode", settings.embeddings_mode, EMBEDDINGS_MODES),
                               ("--pair-augment", settings.pair_augment, ("consistent", "independent")),
                               ("--distill-term", settings.distill_term, DISTILL_TERMS),
                               ("--unlabelled-target", settings.unlabelled_target, UNLABELLED_TARGETS)):
        if value is not None and value not in known:
            raise MiniBertError(f"{flag} {value!r}: expected one of {', '.join(known)}")
    if settings.embeddings_mode == "rand" and settings.embeddings != "random":
        raise MiniBertError(f"--embeddings-mode rand starts from random vectors, not --embeddings "
                            f"{settings.embeddings}: use static, nonstatic or multichannel")
    if settings.optimizer not in ("adadelta", "adam"):
        raise MiniBertError(f"--optimizer {settings.optimizer!r}: expected adadelta or adam")
    if not distilling and settings.alpha != 1.0:
        raise MiniBertError(f"--alpha {settings.alpha}: without teacher logits the student learns from gold labels "
                            f"only (alpha 1)")
