"""Distilling a fine-tuned BERT classifier into a BiLSTM (Tang et al. 2019).

Tang et al. train a small student (minibert/lstm.py: embeddings -> BiLSTM ->
ReLU layer -> logits z^(S), siamese for sentence pairs) to reproduce a
fine-tuned BERT's *logits* z^(B) on many more sentences than the labelled
training set. This file reads in the paper's order ([Tang] section 3):

  1. the student's inputs: words (or the teacher's pieces), starting vectors;
  2. the transfer set ("Data Augmentation for Distillation"): the training
     examples plus `n_iter` perturbed copies of each (`transfer_set`);
  3. the teacher's logits z^(B) on every transfer example, computed once;
  4. THE loss ("Distillation Objective"), on logits:
         L = alpha * CE(z^(S), gold label) + (1 - alpha) * ||z^(B) - z^(S)||^2

  5. the optimizer: Adadelta at a constant rate, as the authors' code.

The settings (DistillationSettings) and their per-task defaults come first.
The run (commands.trainer.train with this optimizer, the best epoch kept) is in
minibert/commands/distill.py. [Tang] Tang, Lu, Liu, Mou, Vechtomova, Lin
2019, arXiv:1903.12136; the authors' code castorini/d-bert (docs/papers.md 2.2).
"""

import dataclasses
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from minibert.finetuning import run_model
from minibert.heads import IGNORE_INDEX
from minibert.lstm import BiLSTMClassifier, StudentConfig
from minibert.support import MiniBertError
from minibert.support.runtime import seed_from
from minibert.support.student_files import (StartingEmbeddings, check_augmentation, collate_student,
                                            read_word_vocabulary, tagged_word_counts, write_word_vocabulary)
from minibert.support.task_files import ClassificationExample

MASK = "[MASK]"      # what the augmenter (section 2) puts for a masked word; one word to the student (section 1)

# ---- 0. The settings and their per-task defaults ------------------------------------------------

SINGLE_SENTENCE_TASKS = ("sst2",)          # the other classification tasks are sentence pairs: a siamese student


def is_pair_task(task):
    """A sentence-pair task gets the siamese student ([Tang] section 3)."""
    return task.name not in SINGLE_SENTENCE_TASKS


@dataclass
class DistillationSettings:
    """Tang et al.'s settings: everything a distillation run needs besides the
    data and the teacher (the values and why, beside each field; the paper's
    and the authors' code's values: docs/papers.md section 2). None means "the
    default for this task" (resolved by `resolved`)."""

    # the student (minibert/lstm.py; defaults: d-bert's confs/birnn_sst2.json)
    embeddings: str = "random"               # "random" (U(-0.25, 0.25), Tang's "rand"), "teacher", or a
                                             # word2vec/GloVe text file
    embedding_dim: Optional[int] = None      # 300; a vectors file's own; the teacher's width
    hidden_size: Optional[int] = None        # per direction: 150 (single sentences), 300 (pairs)
    fc_size: int = 200
    pooling: str = "final"                   # "final" states (the authors' default) or "max" over time
    dropout: float = 0.1
    min_count: int = 1                       # a word enters the vocabulary when it occurs this often
    max_seq_len: int = 128                   # words (or word pieces) per text for the student
    # The authors' embedding modes (d-bert model/base.py): "rand" (random vectors, trained), "static" (frozen:
    # distill.py --freeze-embeddings), "nonstatic" (trained), "multichannel" (a frozen and a trained copy of the
    # same vectors concatenated: a 2E-d LSTM input, the paper's 0.96M SST-2 student). None: rand for random
    # vectors, nonstatic for a vectors file or the teacher's.
    embeddings_mode: Optional[str] = None
    # the transfer set ([Tang] section 3.2; section 2 below)
    augment: bool = True
    n_iter: Optional[int] = None             # samples per example: 20 (single sentences), 10 (pairs)
    p_mask: float = 0.1
    p_pos: float = 0.1
    p_ng: float = 0.25
    max_ngram: int = 5
    pair_augment: str = "consistent"         # one fate per word across a pair; "independent": each sentence on
                                             # its own, as the authors' augment_paired_data.py
    pos_file: Optional[str] = None           # 'word TAG' lines (distill.py's default: CoNLL-2003's eng.train)
    cache_dir: Optional[str] = None          # default: $MINIBERT_CACHE/distill (~/.cache/minibert/distill)
    teacher_batch_size: int = 128
    # the loss and the training
    # alpha: 0, the distillation term alone. The augmented samples (about 95%
    # of the transfer set at n_iter 20) have no gold label, and the teacher's
    # logits on the originals already carry it. The authors' code weighs both
    # terms 1 (confs/base.json): that is --alpha 0.5, because Adadelta's step
    # hardly depends on the loss's overall scale.
    alpha: Optional[float] = None            # 0.0 with a teacher; 1.0 (gold labels only) without
    distill_term: str = "mse"                # (1/K)||z^(B) - z^(S)||^2 as torch's MSE and the authors' code; or
                                             # "squared-l2": ||z^(B) - z^(S)||^2, the paper's equation
    unlabelled_target: str = "none"          # the CE target of an augmented sample: none (L_distill only), or
                                             # "teacher": the teacher's argmax, the paper's reading
    optimizer: str = "adadelta"              # d-bert's Adadelta(rho=0.95); or "adam"
    lr: Optional[float] = None               # 1.0 for Adadelta (its usual value), 5e-4 for Adam (d-bert's lr)
    rho: float = 0.95
    weight_decay: float = 0.0
    max_grad_norm: float = 0.0               # 0: no clipping (d-bert clips at 30000, which never binds)
    epochs: int = 30
    batch_size: int = 50
    eval_batch_size: int = 256
    seed: int = 0
    max_train_examples: Optional[int] = None
    max_minutes: Optional[float] = None
    bf16: bool = False                       # bfloat16 autocast for every forward (teacher and student), as
                                             # finetune.py --bf16; weights stay float32. False: float32 throughout

    def resolved(self, task, with_teacher):
        """A copy with every None replaced by its value for this task: the
        wider student (300 per direction) and fewer samples per example (10)
        for sentence pairs, as the authors' confs; alpha 0 when there are
        teacher logits to learn from; each optimizer's usual rate."""
        pair = is_pair_task(task)
        values = dataclasses.asdict(self)
        defaults = {"hidden_size": 300 if pair else 150, "n_iter": 10 if pair else 20,
                    "alpha": 0.0 if with_teacher else 1.0, "lr": 1.0 if self.optimizer == "adadelta" else 5e-4}
        defaults["embeddings_mode"] = "rand" if self.embeddings == "random" else "nonstatic"
        for key, value in defaults.items():
            if values[key] is None:
                values[key] = value
        return DistillationSettings(**values)


# The paper's students, one flag each (--paper-config): d-bert's confs/birnn_sst2_150.json, the SST-2 BiLSTM of
# Table 3 with 0.96M parameters besides its embeddings: 300-d vectors in "multichannel" (600-d LSTM input),
# hidden 150 per direction, fc 200, dropout 0.1, batch 50 (its count: commands/distill.PAPER_SST2).
PAPER_CONFIGS = {"sst2": {"embeddings_mode": "multichannel", "embedding_dim": 300, "hidden_size": 150,
                          "fc_size": 200, "dropout": 0.1, "batch_size": 50}}


# ---- 1. The student's inputs --------------------------------------------------------------------
#
# Tang et al.'s student reads words, not word pieces: a vocabulary of the
# transfer set's words ([PAD], [UNK], [MASK], then the words by frequency),
# split exactly as the augmenter splits them, so that an augmented "[MASK]" is
# one word. With settings.embeddings "teacher" it reads the teacher's own
# pieces instead (PieceTokenizer).


SPECIAL_WORDS = ("[PAD]", "[UNK]", MASK)     # ids 0, 1, 2


def words_of(text):
    """split_words, except that the augmenter's "[MASK]" stays one word
    (split_words would give "[", "mask", "]")."""
    words = []
    for piece in re.split(r"(\[MASK\])", text):
        words.extend([MASK] if piece == MASK else split_words(piece))
    return words


def build_vocabulary(texts, min_count=1):
    """[PAD], [UNK], [MASK], then every word occurring at least `min_count`
    times, most frequent first (ties alphabetically, so the order is a
    function of the texts alone)."""
    counts = Counter(word for text in texts for word in words_of(text))
    for special in SPECIAL_WORDS:
        counts.pop(special, None)
    words = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    return list(SPECIAL_WORDS) + words


class WordTokenizer:
    """A word vocabulary: text -> word ids (words_of), unknown words -> [UNK]."""

    kind = "words"

    def __init__(self, words, max_seq_len):
        if list(words[:len(SPECIAL_WORDS)]) != list(SPECIAL_WORDS):
            raise MiniBertError(f"a word vocabulary must start with {', '.join(SPECIAL_WORDS)}")
        self.words = list(words)
        self.ids = {word: i for i, word in enumerate(self.words)}
        self.pad_id, self.unk_id, self.mask_id = 0, 1, 2
        self.vocab_size = len(self.words)
        self.max_seq_len = max_seq_len

    def encode_many(self, texts):
        """One list of ids per text: at most max_seq_len, at least one ([UNK]
        for an empty text: the LSTM needs a real token to read)."""
        encoded = []
        for text in texts:
            ids = [self.ids.get(word, self.unk_id) for word in words_of(text)[:self.max_seq_len]]
            encoded.append(ids or [self.unk_id])
        return encoded

    def save(self, folder):
        write_word_vocabulary(folder, self.words)     # vocab.txt: support/student_files.py

    @classmethod
    def load(cls, folder, max_seq_len):
        """The vocabulary of a student folder's vocab.txt, checked."""
        return cls(read_word_vocabulary(folder, SPECIAL_WORDS), max_seq_len)


class PieceTokenizer:
    """The teacher's own tokenizer (WordPiece or SentencePiece), without
    [CLS]/[SEP]: the student reads the teacher's pieces (settings.embeddings
    "teacher"), and starts from the teacher's embeddings of them."""

    kind = "teacher"

    def __init__(self, tokenizer, max_seq_len):
        self.tokenizer = tokenizer
        self.pad_id, self.unk_id = tokenizer.pad_id, tokenizer.unk_id
        self.vocab_size = tokenizer.vocab_size
        self.max_seq_len = max_seq_len

    def encode_many(self, texts):
        encodings = self.tokenizer.encode_many(texts, max_length=self.max_seq_len + 2)
        return [e.ids[1:-1] or [self.unk_id] for e in encodings]      # drop [CLS] ... [SEP]

    def save(self, folder):
        self.tokenizer.save(folder)


def student_tokenizer(settings, teacher, transfer):
    """Tang et al.'s student reads words: a vocabulary of the transfer set
    (training examples and augmented samples, "[MASK]" one word). With
    settings.embeddings "teacher" it reads the teacher's word pieces instead."""
    if settings.embeddings == "teacher":
        return PieceTokenizer(teacher.tokenizer, settings.max_seq_len)
    texts = [e.text_a for e in transfer] + [e.text_b for e in transfer if e.text_b]
    return WordTokenizer(build_vocabulary(texts, settings.min_count), settings.max_seq_len)


def build_student(task, tokenizer, settings, teacher=None):
    """(a fresh student, what its embeddings started from: Tang's random U(-0.25, 0.25), a
    word-vector file, or the teacher's word-piece embeddings); its weights depend on the seed alone."""
    start = StartingEmbeddings(settings, tokenizer, teacher.model.base_model if teacher else None)
    config = StudentConfig(vocab_size=tokenizer.vocab_size, num_classes=len(task.labels), embedding_dim=start.dim,
                           hidden_size=settings.hidden_size, fc_size=settings.fc_size, pair=is_pair_task(task),
                           pooling=settings.pooling, dropout=settings.dropout, padding_id=tokenizer.pad_id,
                           embeddings_mode=settings.embeddings_mode)      # rand, static, nonstatic, multichannel
    torch.manual_seed(seed_from(settings.seed, "student"))
    model = BiLSTMClassifier(config)
    start.fill(model.embedding.weight, config.padding_id)
    model.copy_static_channel()                 # multichannel: the frozen copy starts from the same vectors
    return model, start.report


# ---- 2. The transfer set ([Tang] section 3, "Data Augmentation for Distillation") ---------------
#
# The transfer set: new sentences made from the training set, for distillation.
#
# A student learns more from its teacher when it sees more inputs than the
# labelled training set. Tang et al. 2019 perturb the training sentences
# ([Tang] section 3): for each sentence, `n_iter` samples (20 for single
# sentences, 10 for pairs); in each sample, for each word draw u ~ U(0, 1):
#
#     u < p_mask                 the word becomes [MASK]           (p_mask = 0.1)
#     u < p_mask + p_pos         a word with the same part-of-speech tag,
#                                drawn by unigram frequency        (p_pos = 0.1)
#     otherwise                  the word is kept
#
# then, with probability p_ng (0.25), only one random n-gram of the sample is
# kept: n uniform in 1..max_n (max_n = 5), capped by the sentence length, a
# contiguous window. Masking asks the teacher what a sentence means with a word
# missing; POS replacement gives grammatical new sentences; n-grams, short phrases.
#
# A sample is dropped when it equals an original sentence or an earlier sample
# (it would add nothing), and, as in the authors' code (castorini/d-bert,
# augment_data.py), when every word was masked or replaced (nothing of the
# original is left to anchor it). Pairs are "augmented consistently" by
# default, or each sentence on its own as the authors' code does (`augment_pair`).
#
# The tags come from a `PosLexicon` learned from any tagged corpus ("word TAG"
# lines, e.g. CoNLL-2003's POS column): each word gets its most frequent tag
# (the authors tagged with NLTK; a lexicon needs no tagger, at the price that a
# word always has the same tag). Words it does not know are only masked.
#
# Texts are lower-cased and split into words and punctuation marks (`split_words`);
# samples are words joined by single spaces. Example i draws from its own numpy Generator,
# seeded with seed_from(seed, "augment", i), whatever the other examples
# ([Tang] arXiv:1903.12136, section 3).


# ---- 2. The transfer set: words -----------------------------------------------------------------

WORD = re.compile(r"\w+|[^\w\s]")      # a run of letters and digits, or one punctuation mark


def split_words(text):
    """Lower-cased words and punctuation marks: "Don't!" -> don ' t !

    The unit that augmentation masks or replaces and that the student's word
    vocabulary counts (words_of, section 1). The authors' code splits with
    NLTK; a regular expression is minibert's simpler choice, with no tagger's
    tokenizer to install. Lower-cased so that "The" and "the" are one word
    with one vector."""
    return WORD.findall(text.lower())


# ---- 2. The transfer set: one sample ------------------------------------------------------------


def _fate(word, u, lexicon, p_mask, p_pos, rng):
    """(new word, whether it was masked or replaced) for a draw u ~ U(0, 1)."""
    # exercise: augment-mask-pos
    if u < p_mask:
        return MASK, True
    tag = lexicon.tag_of(word)
    if u < p_mask + p_pos and tag is not None:
        # may draw the word itself; the authors' code counts it as replaced too
        return lexicon.sample(tag, rng), True
    return word, False
    # end exercise


def _ngram(words, rng, max_n):
    """One random contiguous window of n words, n uniform in 1..max_n, capped
    by the length (so a 3-word sentence gives n in 1..3, not 3 most of the time)."""
    if not words:
        return words
    n = int(rng.integers(1, min(max_n, len(words)) + 1))
    start = int(rng.integers(0, len(words) - n + 1))
    return words[start:start + n]


def _augment(words, lexicon, rng, p_mask, p_pos, p_ng, max_n):
    """(sample, whether any word was kept) for one sentence."""
    draws = rng.random(len(words))
    fates = [_fate(word, u, lexicon, p_mask, p_pos, rng) for word, u in zip(words, draws)]
    sample = [new for new, _ in fates]
    kept_any = not all(changed for _, changed in fates)
    if rng.random() < p_ng:
        sample = _ngram(sample, rng, max_n)
    return sample, kept_any


def _augment_pair(words_a, words_b, lexicon, rng, p_mask, p_pos, p_ng, max_n, scheme="consistent"):
    """((sample_a, sample_b), whether any word of the pair was kept) for one pair."""
    if scheme == "independent":      # the authors' augment_paired_data.py: each sentence as a single one
        (sample_a, kept_a), (sample_b, kept_b) = (_augment(words, lexicon, rng, p_mask, p_pos, p_ng, max_n)
                                                  for words in (words_a, words_b))
        return (sample_a, sample_b), kept_a or kept_b
    types = list(dict.fromkeys(words_a + words_b))  # distinct words, in order of first appearance
    draws = rng.random(len(types))
    fates = {word: _fate(word, u, lexicon, p_mask, p_pos, rng) for word, u in zip(types, draws)}
    kept_any = not all(changed for _, changed in fates.values())
    samples = []
    for words in (words_a, words_b):
        sample = [fates[word][0] for word in words]
        if rng.random() < p_ng:  # each sentence its own n-gram, as the paper's per-sentence rule
            sample = _ngram(sample, rng, max_n)
        samples.append(sample)
    return tuple(samples), kept_any


def augment_words(words, lexicon, rng, p_mask=0.1, p_pos=0.1, p_ng=0.25, max_n=5):
    """One perturbed copy of a sentence's words ([Tang] section 3): each word
    masked with probability p_mask, replaced by a word of its POS tag with
    probability p_pos (unknown words: kept), then with probability p_ng only a
    random n-gram (n in 1..max_n) is kept. `rng` is a numpy.random.Generator."""
    check_augmentation(p_mask, p_pos, p_ng, max_n)
    return _augment(list(words), _EMPTY_LEXICON if lexicon is None else lexicon, rng, p_mask, p_pos, p_ng, max_n)[0]


def augment_pair(words_a, words_b, lexicon, rng, p_mask=0.1, p_pos=0.1, p_ng=0.25, max_n=5, scheme="consistent"):
    """One perturbed copy of a sentence pair, augmented consistently (or, with
    scheme="independent", each sentence on its own as by `augment_words`, the
    first sentence's draws first: the authors' augment_paired_data.py).

    Our reading of [Tang] section 3 for pairs (the paper gives no detail): each
    distinct word gets one fate per sample (kept, masked, or replaced by one
    drawn word) wherever it occurs in either sentence, so a word shared by
    premise and hypothesis stays shared and the pair keeps the alignment its
    label depends on. The n-gram step is applied to each sentence on its own."""
    check_augmentation(p_mask, p_pos, p_ng, max_n, scheme)
    return _augment_pair(list(words_a), list(words_b), _EMPTY_LEXICON if lexicon is None else lexicon, rng,
                         p_mask, p_pos, p_ng, max_n, scheme)[0]


# ---- 2. The transfer set: every sample of every example -----------------------------------------


def transfer_set(texts_a, texts_b=None, lexicon=None, n_iter=20, seed=0, p_mask=0.1, p_pos=0.1, p_ng=0.25,
                 max_n=5, progress=False, pair_scheme="consistent"):
    """The augmented samples of every example: a list of (text_a, text_b or
    None, source_index), words joined by single spaces.

    Up to `n_iter` samples per example ([Tang]: 20 for single sentences, 10
    for pairs), the originals not included (the caller adds them); a sample
    equal to any original (after `split_words`), to an earlier sample, or
    with every word masked or replaced is dropped (only this filter looks
    across examples, as the authors' did). Without a lexicon, words are only
    masked (and n-grams taken); pairs are perturbed by `pair_scheme`."""
    check_augmentation(p_mask, p_pos, p_ng, max_n, pair_scheme, n_iter)
    texts_a = list(texts_a)
    if texts_b is not None:
        texts_b = list(texts_b)
        if len(texts_b) != len(texts_a):
            raise MiniBertError(f"texts_b: {len(texts_b)} second sentences for {len(texts_a)} first sentences")
    lexicon = _EMPTY_LEXICON if lexicon is None else lexicon

    words_a = [split_words(text) for text in texts_a]
    words_b = None if texts_b is None else [split_words(text) for text in texts_b]
    seen = {_key(words_a[i], None if words_b is None else words_b[i]) for i in range(len(texts_a))}

    samples = []
    for i in tqdm(range(len(texts_a)), desc="augmenting", unit="example", disable=not progress):
        rng = np.random.default_rng(seed_from(seed, "augment", i))
        for _ in range(n_iter):
            if words_b is None:
                sample_a, kept_any = _augment(words_a[i], lexicon, rng, p_mask, p_pos, p_ng, max_n)
                sample_b = None
            else:
                (sample_a, sample_b), kept_any = _augment_pair(words_a[i], words_b[i], lexicon, rng,
                                                               p_mask, p_pos, p_ng, max_n, pair_scheme)
            key = _key(sample_a, sample_b)
            if kept_any and key not in seen:
                seen.add(key)
                samples.append((key[0], key[1], i))
    return samples


def _key(words_a, words_b):
    """(text_a, text_b or None): what two samples must share to be duplicates."""
    return " ".join(words_a), None if words_b is None else " ".join(words_b)


# ---- 2. The transfer set: the part-of-speech lexicon --------------------------------------------


class PosLexicon:
    """word -> its most frequent tag; tag -> the words whose tag it is, with
    their counts, to draw replacements by unigram frequency ([Tang] section 3).

    `counts` maps word -> {tag: count}. A word is sampled for its most frequent
    tag only, with weight its total count, so a replacement always has the tag
    of the word it replaces: tag_of(sample(tag_of(w))) == tag_of(w).
    """

    def __init__(self, counts):
        self._tag = {}
        total = {}
        for word, tag_counts in counts.items():
            # max keeps the first-seen tag on a tie: deterministic for a file
            self._tag[word] = max(tag_counts, key=tag_counts.get)
            total[word] = sum(tag_counts.values())
        words_by_tag = defaultdict(list)
        for word, tag in self._tag.items():
            words_by_tag[tag].append(word)
        # Per tag: its words and their cumulative counts. A draw r ~ U(0, total)
        # falls in word i's interval [cum[i-1], cum[i]) with probability count_i / total.
        self._words = {tag: words for tag, words in words_by_tag.items()}
        self._cumulative = {tag: np.cumsum([total[w] for w in words]) for tag, words in words_by_tag.items()}

    @classmethod
    def from_file(cls, path):
        """The lexicon of one tagged file (support/student_files.tagged_word_counts), its words
        those that split_words keeps whole."""
        return cls(tagged_word_counts([path], split_words))

    def tag_of(self, word):
        """The word's most frequent tag, or None for a word the lexicon does not know."""
        return self._tag.get(word)

    def sample(self, tag, rng):
        """A word whose tag is `tag`, drawn with probability proportional to its count."""
        if tag not in self._words:
            raise MiniBertError(f"PosLexicon.sample: no word has the tag {tag!r}")
        cumulative = self._cumulative[tag]
        index = np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")
        return self._words[tag][index]

    def __len__(self):
        return len(self._tag)


_EMPTY_LEXICON = PosLexicon({})


# ---- 2. The transfer set: the training examples, then their samples -----------------------------


def make_transfer_set(examples, lexicon, settings, progress=False):
    """The training examples, then their augmented samples (no label) in the
    order transfer_set makes them. Each sample keeps its source's
    line number, so a message about it points at the sentence it came from."""
    texts_b = None if all(e.text_b is None for e in examples) else [e.text_b or "" for e in examples]
    samples = transfer_set([e.text_a for e in examples], texts_b, lexicon, n_iter=settings.n_iter,
                           seed=settings.seed, p_mask=settings.p_mask, p_pos=settings.p_pos, p_ng=settings.p_ng,
                           max_n=settings.max_ngram, progress=progress, pair_scheme=settings.pair_augment)
    return list(examples) + [ClassificationExample(a, b, None, None, examples[i].line) for a, b, i in samples]


# ---- 3. The teacher's logits on the transfer set ------------------------------------------------


def teacher_logits(teacher, examples, batch_size=128, device="cpu", progress=True, bf16=False):
    """The teacher's logits z^(B) for every example, (N, K) float32, in large length-sorted
    batches without gradients (bf16: under bfloat16 autocast). The features are made by the
    teacher's own task object, as it was fine-tuned; gold labels play no part."""
    unlabelled = [dataclasses.replace(e, label=None) for e in examples]
    features = teacher.task.features(unlabelled, teacher.tokenizer, teacher.record["max_seq_len"])
    def logits_as_arrays(logits, batch):     # run_model's `outputs`: one (K,) array per row (not probabilities)
        return list(logits.float().cpu().numpy())
    rows = run_model(teacher.model, features, teacher.tokenizer.pad_id, logits_as_arrays, batch_size, device, progress,
                     bf16=bf16)
    return np.stack(rows).astype(np.float32)


def student_features(task, examples, tokenizer, logits=None):
    """One dict per example: input_ids (and input_ids_b for a pair) as int32
    arrays, labels (the gold class, or IGNORE_INDEX for an augmented sample),
    and teacher_logits (K,) when the teacher's logits are given."""
    ids_a = tokenizer.encode_many([e.text_a for e in examples])
    ids_b = tokenizer.encode_many([e.text_b or "" for e in examples]) if is_pair_task(task) else None
    features = []
    for i, example in enumerate(examples):
        if example.label is not None and example.label not in task.label_to_id:
            raise MiniBertError(f"line {example.line}: label {example.label!r} is not one of "
                                f"{task.name}'s labels {task.labels}")
        feature = {"input_ids": np.asarray(ids_a[i], dtype=np.int32),
                   "labels": IGNORE_INDEX if example.label is None else task.label_to_id[example.label]}
        if ids_b is not None:
            feature["input_ids_b"] = np.asarray(ids_b[i], dtype=np.int32)
        if logits is not None:
            feature["teacher_logits"] = logits[i]
        features.append(feature)
    return features


def student_logits(model, batch):
    """z^(S) (B, K): run_model's `logits_of` for the student."""
    return model(batch["input_ids"], batch["attention_mask"], batch.get("input_ids_b"), batch.get("attention_mask_b"))


# ---- 4. THE loss ([Tang] section 3, "Distillation Objective") -----------------------------------


def distillation_loss(z_student, z_teacher, labels, alpha, distill_term="mse", unlabelled="none"):
    """L on one batch of logits z^(S), z^(B) (B, K) and gold labels (B,):

        L         = alpha * L_CE + (1 - alpha) * L_distill
        L_CE      = -log softmax(z^(S))[gold]     mean over the examples with a gold label
        L_distill = (1/K) ||z^(B) - z^(S)||^2     mean over all examples

    on logits, before any softmax. distill_term "squared-l2" drops the 1/K:
    the paper's equation; the default "mse" is torch's MSE, the authors' code.
    An augmented sample has no gold label (IGNORE_INDEX): only L_distill sees
    it, unless unlabelled="teacher" gives it the teacher's argmax as its label
    (ce_targets). Returns (L, sums): each weighted term summed over the batch
    (a term of weight 0 left out); training.training_step divides each sum by
    `averaged_over` for its whole step, which is L."""
    labels = ce_targets(labels, z_teacher, unlabelled)
    # exercise: distillation-loss
    sums = {}
    if alpha < 1:      # the paper's squared distance; "mse" divides it by K, as torch's MSE and the authors' code
        squared_distance = ((z_student - z_teacher) ** 2).sum(-1)         # (B,): ||z^(B) - z^(S)||^2
        if distill_term == "mse":
            squared_distance = squared_distance / z_student.shape[-1]
        sums["distill"] = (1 - alpha) * squared_distance.sum()
    if alpha > 0:      # the cross-entropy skips the rows labelled IGNORE_INDEX
        sums["gold"] = alpha * F.cross_entropy(z_student, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    counts = averaged_over(labels, alpha)
    return sum(sums[term] / max(counts[term], 1) for term in sums), sums     # L: each sum over its count
    # end exercise


def ce_targets(labels, z_teacher, unlabelled="none"):
    """The labels L_CE reads: as given, or with unlabelled="teacher" each
    IGNORE_INDEX replaced by the teacher's argmax (the paper's reading for
    the transfer set, docs/guide.md)."""
    teacher_labels = unlabelled == "teacher" and z_teacher is not None
    return torch.where(labels == IGNORE_INDEX, z_teacher.argmax(-1), labels) if teacher_labels else labels


def averaged_over(labels, alpha):
    """How many examples each term of L is a mean over: all of them for
    L_distill, those with a gold label for L_CE."""
    counts = {}
    if alpha < 1:
        counts["distill"] = len(labels)
    if alpha > 0:
        counts["gold"] = int((labels != IGNORE_INDEX).sum())
    return counts


class DistillationObjective:
    """distillation_loss in training.training_step's objective interface. Each term's
    "accuracy" is the student's agreement with the teacher's argmax (distill)
    or with the gold label (gold)."""

    def __init__(self, alpha, distill_term="mse", unlabelled="none"):
        self.alpha, self.distill_term, self.unlabelled = alpha, distill_term, unlabelled

    def counts(self, batch):
        return averaged_over(ce_targets(batch["labels"], batch.get("teacher_logits"), self.unlabelled), self.alpha)

    def losses(self, model, batch):
        z_student, labels = student_logits(model, batch).float(), batch["labels"]
        z_teacher = batch["teacher_logits"].float() if "teacher_logits" in batch else None
        _, sums = distillation_loss(z_student, z_teacher, labels, self.alpha, self.distill_term, self.unlabelled)
        labels, predicted = ce_targets(labels, z_teacher, self.unlabelled), z_student.argmax(-1)
        right = {"distill": lambda: (predicted == z_teacher.argmax(-1)).sum(),         # agrees with the teacher
                 "gold": lambda: ((predicted == labels) & (labels != IGNORE_INDEX)).sum()}  # right on a gold label
        return {term: (value, right[term]()) for term, value in sums.items()}


# ---- 5. The optimizer (the authors' code, docs/papers.md 2.2) ------------------------------------


def optimizer_factory(settings):
    """training.train's optimizer_factory: Tang et al.'s code trains the student
    with Adadelta (rho 0.95, d-bert's distill_birnn.py) at a constant learning
    rate, with no warm-up or decay: Adadelta scales each parameter's step by
    running averages of its own gradients and steps, so it needs no schedule
    (and hardly depends on the loss's overall scale). settings.optimizer "adam" gives Adam, also at a constant rate."""
    def make(model):
        parameters = [p for p in model.parameters() if p.requires_grad]
        optimizer = (torch.optim.Adadelta(parameters, lr=settings.lr, rho=settings.rho,
                                          weight_decay=settings.weight_decay) if settings.optimizer == "adadelta"
                     else torch.optim.Adam(parameters, lr=settings.lr, weight_decay=settings.weight_decay))
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return make


def predict_student(model, task, tokenizer, examples, features=None, batch_size=256, device="cpu", progress=False,
                    bf16=False):
    """The classification task's predictions from the student's probabilities
    (task.outputs; task.metrics scores them); bf16: under bfloat16 autocast."""
    features = features if features is not None else student_features(task, examples, tokenizer)
    outputs = run_model(model, features, tokenizer.pad_id, task.outputs, batch_size, device, progress, bf16=bf16,
                        collate=collate_student, logits_of=student_logits)
    return task.predict(examples, features, outputs)

