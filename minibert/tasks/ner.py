"""Named entity recognition on CoNLL-2003 ([BERT] 5.3; Figure 4d, "single
sentence tagging").

Every token's final hidden vector T_i goes through dropout and one linear
layer W (K x H), and softmax(T_i W^T) is the distribution over the K tags.
WordPiece splits a word into pieces, but the tags belong to words: as in the
paper (5.3), only the FIRST piece of each word is labelled and predicted;
the other pieces get the label IGNORE_INDEX (-100), which the cross-entropy
skips, and their outputs are not read (docs/papers.md 4.2).

    words   Jim    Henson         was
    pieces  jim    hen    ##son   was
    labels  B-PER  I-PER  -100    O

Tags: CoNLL-2003's shared files are IOB1 (an entity starts with I-; B- only
separates two adjacent entities of one type). The model is trained on IOB2
(every entity starts with B-), which gives "first word of an entity" one
consistent tag; conlleval reads both the same (metrics.py), so gold tags are
scored as written, and predictions are written back in the file's scheme
(`iob2_to_iob1`, `tagging_scheme`). The CoNLL files are read and written at
the end of this file (`read_conll`, `write_conll_predictions`).
"""

import bisect
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch.nn.functional as F

from minibert import metrics
from minibert.heads import IGNORE_INDEX, OutputLayer
from minibert.support import MiniBertError
from minibert.support.files import atomic_write
from minibert.support.task_files import check_format, line_error, numbered_lines
from minibert.tasks import Task

NER = "conll2003"


# ----------------------------------------------------------------------------
# Words -> word pieces
# ----------------------------------------------------------------------------


def word_of_each_piece(words, offsets):
    """For each piece, given its character `offsets` in the words joined by
    single spaces, the word it starts in (the tokenizer's word_ids split at
    punctuation: "U.S." is four words); a piece that starts on a space (a
    lone SentencePiece "▁") belongs to the next word."""
    starts, ends, position = [], [], 0
    for word in words:
        starts.append(position)
        ends.append(position + len(word))
        position += len(word) + 1   # the joining space
    word_of_piece = []
    for start, _ in offsets:
        word = bisect.bisect_right(starts, start) - 1
        if start >= ends[word]:      # on the space after `word`
            word += 1
        word_of_piece.append(word)
    return word_of_piece


def window_starts(word_of_piece, budget):
    """Where to cut a sentence's pieces into windows of at most `budget`
    pieces (the start index of each window). Every word needs a tag, so a
    sentence longer than max_seq_len is cut into consecutive windows, each a
    feature of its own, rather than truncated. A cut falls between two words;
    only a word of more than `budget` pieces is itself cut (its first, the
    labelled piece, stays in the earlier window). Windows do not overlap:
    few CoNLL sentences are longer than the 126 pieces of max_seq_len 128."""
    starts = [0]
    while len(word_of_piece) - starts[-1] > budget:
        cut = starts[-1] + budget            # the furthest this window can reach
        while cut > starts[-1] and word_of_piece[cut] == word_of_piece[cut - 1]:
            cut -= 1                         # back to the start of the word that `cut` splits
        starts.append(cut if cut > starts[-1] else starts[-1] + budget)
    return starts


def first_pieces(word_of_piece):
    """For each piece: the index of the word it starts, None for the word's
    later pieces (the only pieces that are labelled and predicted)."""
    # exercise: first-piece-labels
    starting = []
    for i, word in enumerate(word_of_piece):
        starts_a_word = i == 0 or word != word_of_piece[i - 1]
        starting.append(word if starts_a_word else None)
    return starting
    # end exercise


# ----------------------------------------------------------------------------
# The task
# ----------------------------------------------------------------------------


class NerTask(Task):
    """CoNLL-2003 NER: IOB2 tags, one per word, from the word's first piece.
    `labels` is the tag set, "O" first (its index is the class index). By
    default it is learned from the IOB2 tags of the files `read` before the
    head is made (the training and evaluation files), sorted; a fine-tuned
    folder keeps it in task.json."""

    main_metric = "f1"
    uses_pooler = False       # a class per token: the head reads every token, not [CLS]

    def __init__(self, labels=None, name=NER, settings=None):
        self.name = name
        self.labels = list(labels) if labels is not None else None
        self.learning_labels = labels is None

    def read(self, path):
        """The sentences of a CoNLL file, as NerExamples."""
        examples = NerExamples(read_conll(path))
        if self.learning_labels:
            self.learn_labels(examples)
        return examples

    def split(self, examples, fraction, seed):
        """CoNLL-2003 is not split: it has its own dev file."""
        raise MiniBertError("conll2003 has its own dev file (eng.testa): evaluate on it instead of holding out "
                            "part of the training file")

    def learn_labels(self, examples):
        """Add the IOB2 tags of `examples` to the labels ("O" first, then sorted)."""
        tags = {tag for sentence in examples if sentence.tags for tag in metrics.iob1_to_iob2(sentence.tags)}
        if not tags:   # a file to predict on: nothing to learn from
            return
        known = set(self.labels or []) | tags | {"O"}
        self.labels = ["O"] + sorted(known - {"O"})

    @property
    def label_to_id(self):
        """{tag: class index}, as ClassificationTask.label_to_id."""
        return {label: i for i, label in enumerate(self.labels or [])}

    def labels_of_words(self, sentence, index):
        """The class index of each word's IOB2 tag."""
        ids, tags = self.label_to_id, metrics.iob1_to_iob2(sentence.tags)
        check_known_tags(tags, self.labels, sentence, index)
        return [ids[tag] for tag in tags]

    def features(self, examples, tokenizer, max_seq_len):
        """One feature per window of max_seq_len - 2 pieces ([CLS] window [SEP]), usually one
        per sentence: the model inputs, "labels" (tagged files: the tag index at a word's
        first piece, IGNORE_INDEX elsewhere), "example" (the sentence index) and, for
        `predict`, "_word_starting_here" (per token: the word it starts, or None)."""
        check_tag_set(self.labels)
        budget = max_seq_len - 2
        if budget < 1:
            raise MiniBertError(f"max_seq_len {max_seq_len} leaves no room for a word between [CLS] and [SEP]")
        texts = [" ".join(sentence.words) for sentence in examples]
        encodings = tokenizer.encode_many(texts)   # no max_length: the windows below keep every piece
        features = []
        for index, (sentence, encoding) in enumerate(zip(examples, encodings)):
            real = [i for i, sequence in enumerate(encoding.sequence_ids) if sequence is not None]   # drop [CLS]/[SEP]
            ids = [encoding.ids[i] for i in real]
            word_of_piece = word_of_each_piece(sentence.words, [encoding.offsets[i] for i in real])
            starting = first_pieces(word_of_piece)
            tag_ids = self.labels_of_words(sentence, index) if sentence.tags is not None else None
            starts = window_starts(word_of_piece, budget)
            for start, end in zip(starts, starts[1:] + [len(ids)]):
                word_starting_here = [None] + starting[start:end] + [None]   # [CLS] and [SEP] start no word
                feature = {"input_ids": [tokenizer.cls_id] + ids[start:end] + [tokenizer.sep_id],
                           "token_type_ids": [0] * len(word_starting_here), "example": index,
                           "_word_starting_here": word_starting_here}
                if tag_ids is not None:
                    feature["labels"] = [IGNORE_INDEX if word is None else tag_ids[word] for word in word_starting_here]
                features.append(feature)
        return features

    def make_head(self, config):
        """The head; from here on the labels are fixed (they are its outputs)."""
        check_tag_set(self.labels)
        self.learning_labels = False
        return OutputLayer(config, len(self.labels), per_token=True)   # on every token

    # ---- the objective ---------------------------------------------------------

    def loss(self, logits, batch):
        """L = -(1/N) sum_i log softmax(T_i W^T)[y_i] over the N labelled
        pieces (a word's first piece); IGNORE_INDEX pieces are skipped."""
        logits = logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1),
                               ignore_index=IGNORE_INDEX)

    def counts(self, batch):
        return {"ner": int((batch["labels"] != IGNORE_INDEX).sum())}

    def losses(self, logits, batch):
        """N L, the SUM over this batch's labelled pieces, in training.training_step's
        form (see ClassificationTask.losses); a batch with none adds 0."""
        labels = batch["labels"]
        n = int((labels != IGNORE_INDEX).sum())
        loss = self.loss(logits, batch) * n if n else logits.float().sum() * 0.0
        correct = ((logits.argmax(-1) == labels) & (labels != IGNORE_INDEX)).sum()
        return {"ner": (loss, correct)}

    def distributions(self, logits, batch):
        """What the loss compares (SiFT): one row of K logits per labelled piece, weight 1."""
        return logits[batch["labels"] != IGNORE_INDEX], 1.0                # (N, K)

    # ---- predictions and metrics -------------------------------------------

    def outputs(self, logits, batch):
        """Per feature: (tokens, labels) probabilities of its real tokens."""
        probabilities = logits.detach().float().softmax(-1).cpu().numpy()
        lengths = batch["attention_mask"].sum(-1).tolist()
        return [row[:n] for row, n in zip(probabilities, lengths)]

    def predict(self, examples, features, outputs):
        """One list of IOB2 tags per sentence, one per word: the argmax at the word's first
        piece, as in BERT (an I- after O can occur: conlleval reads it as an entity's
        start). A word with no piece (a lone control character) is O."""
        tags = [["O"] * len(sentence.words) for sentence in examples]
        for feature, probabilities in zip(features, outputs):
            for token, word in enumerate(feature["_word_starting_here"]):
                if word is not None:
                    tags[feature["example"]][word] = self.labels[int(np.argmax(probabilities[token]))]
        return tags

    def metrics(self, examples, predictions):
        """conlleval's precision, recall and F1 over entities (percent), overall
        and "per_type", gold tags as the file writes them (IOB1)."""
        if any(sentence.tags is None for sentence in examples):
            raise MiniBertError("conll2003: the evaluation file has no tag column")
        scores = metrics.conlleval([sentence.tags for sentence in examples], predictions)
        return {key: scores[key] for key in ("precision", "recall", "f1", "per_type")}

    def has_gold(self, examples):
        """Whether every sentence has its tags (so the predictions can be scored)."""
        return all(sentence.tags is not None for sentence in examples)

    def write_predictions(self, examples, predictions, path):
        """The input file plus the predicted tags (what the conlleval script scores) in the
        file's scheme: IOB1 next to IOB1 gold, so its token accuracy compares like with like."""
        ner_file = ner_file_of(examples)
        if tagging_scheme(examples) == "IOB1":
            predictions = [iob2_to_iob1(tags) for tags in predictions]
        write_conll_predictions(ner_file, predictions, path)
        return [path]


def iob2_to_iob1(tags):
    """One sentence's tags as IOB1, the inverse of iob1_to_iob2: a chunk
    starts with I-, and with B- only right after a chunk of the same type.

        ["B-PER", "I-PER", "B-PER", "O", "B-LOC"] -> ["I-PER", "I-PER", "B-PER", "O", "I-LOC"]
    """
    converted = ["O"] * len(tags)
    previous_end, previous_type = None, None
    for chunk_type, start, end in metrics.conll_chunks(tags):
        touches_same_type = previous_end == start - 1 and previous_type == chunk_type
        converted[start] = f"B-{chunk_type}" if touches_same_type else f"I-{chunk_type}"
        for position in range(start + 1, end + 1):
            converted[position] = f"I-{chunk_type}"
        previous_end, previous_type = end, chunk_type
    return converted


def tagging_scheme(sentences):
    """"IOB1" when some entity of the sentences' tags starts with I- (as in CoNLL-2003's
    files), else "IOB2" (also for a file without tags or entities: the model's own)."""
    for sentence in sentences:
        for _, start, _ in metrics.conll_chunks(sentence.tags or []):
            if sentence.tags[start].startswith("I-"):
                return "IOB1"
    return "IOB2"


# ----------------------------------------------------------------------------
# The files: CoNLL-2003 columns; the checks of the tag set
# ----------------------------------------------------------------------------


def check_tag_set(labels):
    """The NER task needs its tag set before it makes features or a head."""
    if not labels:
        raise MiniBertError("conll2003: the tag set is unknown: read the training file with this task first "
                            "(its tags are the labels), or pass NerTask(labels=[...])")


def check_known_tags(tags, labels, sentence, index):
    """Every (IOB2) tag of sentence number `index` must be one of the model's labels."""
    unknown = [tag for tag in tags if tag not in labels]
    if unknown:
        raise MiniBertError(f"line {sentence.line_numbers[0]} (sentence {index}): tag {unknown[0]!r} is not one "
                            f"of the model's labels {labels}")


@dataclass
class NerSentence:
    """One CoNLL sentence: its words, their tags (None in a file without a
    tag column) and the 1-based line number of each word."""
    words: list
    tags: Optional[list]
    line_numbers: list


@dataclass
class NerFile:
    """A CoNLL file's lines as read (without line endings) and its sentences.
    The lines are kept so that predictions can be written back as the input
    file plus one column (`write_conll_predictions`)."""
    lines: list
    sentences: list


class NerExamples(list):
    """The sentences (NerSentence) of one CoNLL file, in file order, as the
    NER task reads them.

    A list, so that len() and iteration work as for every other task
    (fine_tune counts its training examples), plus `ner_file`, the NerFile
    they came from: its lines are what `write_conll_predictions` writes back."""

    def __init__(self, ner_file):
        super().__init__(ner_file.sentences)
        self.ner_file = ner_file


DOCSTART = "-DOCSTART-"

# conlleval's tags: O, or B/I/E/S, a hyphen and the entity type.
_NER_TAG = re.compile(r"O|[BIES]-\S+")


def has_tag_column(columns):
    """Whether a CoNLL file with this many columns per token carries NER tags.

    4 (`word POS chunk NER`, CoNLL-2003) and 2 (`word NER`): yes, the last
    column. 1 (words only) and 3 (`word POS chunk`, a file to predict on): no.
    More than 4 (e.g. a predictions file, `... gold predicted`): the last.
    """
    return columns not in (1, 3)


def _is_docstart(fields):
    return bool(fields) and fields[0] == DOCSTART


def read_conll(path):
    """Sentences of a CoNLL-2003 file: one token per line, whitespace-separated
    columns with the word first, blank lines between sentences, `-DOCSTART-`
    lines between documents (neither is a token).

    Every token line must have the same number of columns; whether the last
    is the NER tag follows from that number (`has_tag_column`). Tags must be
    O or B-/I-/E-/S- plus a type, and are kept as written (CoNLL-2003 is IOB1;
    minibert.metrics.iob1_to_iob2 converts).
    """
    check_format(path, NER, ("conll", "columns", "tsv"))   # CoNLL files may lack -DOCSTART-; some use tabs
    lines, sentences = [], []
    words, tags, numbers = [], [], []
    columns = first_token_line = None
    for number, line in numbered_lines(path):
        if "\r" in line:                   # old Mac line endings: the whole file would be one line
            raise line_error(path, number, "a carriage return (\\r) inside a line: convert the file's line endings "
                                       "to \\n")
        lines.append(line)
        fields = line.split()
        if not fields or _is_docstart(fields):
            if words:
                sentences.append(NerSentence(words, tags if has_tag_column(columns) else None, numbers))
                words, tags, numbers = [], [], []
            continue
        if columns is None:
            columns, first_token_line = len(fields), number
        elif len(fields) != columns:
            raise line_error(path, number, f"{len(fields)} columns, but line {first_token_line} has {columns}")
        if has_tag_column(columns) and not _NER_TAG.fullmatch(fields[-1]):
            raise line_error(path, number, f"unknown NER tag {fields[-1]!r} (expected O or B-/I-/E-/S-TYPE)")
        words.append(fields[0])
        tags.append(fields[-1])
        numbers.append(number)
    if words:
        sentences.append(NerSentence(words, tags if has_tag_column(columns) else None, numbers))
    if not sentences:
        raise MiniBertError(f"{path}: no sentences (only blank and -DOCSTART- lines)")
    return NerFile(lines, sentences)


def ner_file_of(examples):
    """The NerFile that `examples` (as NerTask.read returns them) came from."""
    if not isinstance(examples, NerExamples):
        raise MiniBertError("conll2003: write_predictions needs the examples NerTask.read returned "
                            "(they keep the file's lines)")
    return examples.ner_file


def write_conll_predictions(ner_file, predicted_tags_per_sentence, path):
    """Write `ner_file` back with a predicted tag appended to every token line.

    Blank lines stay as they are. `-DOCSTART-` lines get "O" appended too:
    conlleval requires every non-blank line to have the same number of
    columns. The separator is the file's own (a tab if it used tabs). With a
    gold column, the result is what conlleval scores: gold second to last,
    prediction last. Written atomically: a crash leaves no half file.
    """
    sentences = ner_file.sentences
    if len(predicted_tags_per_sentence) != len(sentences):
        raise MiniBertError(f"{path}: {len(predicted_tags_per_sentence)} predicted sentences "
                            f"for {len(sentences)} sentences in the input")
    tag_of_line = {}
    for index, (sentence, tags) in enumerate(zip(sentences, predicted_tags_per_sentence)):
        if len(tags) != len(sentence.words):
            raise MiniBertError(f"{path}: sentence {index} (line {sentence.line_numbers[0]}) has "
                                f"{len(sentence.words)} words but {len(tags)} predicted tags")
        for number, tag in zip(sentence.line_numbers, tags):
            if not isinstance(tag, str) or not _NER_TAG.fullmatch(tag):
                raise MiniBertError(f"{path}: predicted tag {tag!r} for line {number} is not a NER tag")
            tag_of_line[number] = tag
    first_token_line = ner_file.lines[sentences[0].line_numbers[0] - 1]
    separator = "\t" if "\t" in first_token_line else " "
    with atomic_write(path, mode="w") as f:
        for number, line in enumerate(ner_file.lines, start=1):
            if number in tag_of_line:
                line = line.rstrip() + separator + tag_of_line[number]
            elif _is_docstart(line.split()):
                line = line.rstrip() + separator + "O"
            f.write(line + "\n")
