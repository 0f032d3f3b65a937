"""Tiny random models in Hugging Face layout with a tiny WordPiece vocab, for
tests that need a model folder but no shared data and no network."""

import random
import re

import torch

from minibert.checkpoints import save_pretrained
from minibert.model import BertConfig, BertModel

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

SENTENCES = [
    "the cat sat on the mat .",
    "a dog ran in the park with a red ball .",
    "my sister reads a book every night .",
    "the old man walked to the river slowly .",
    "we ate bread and cheese for lunch .",
    "the sun is warm and the sky is blue .",
    "he found a key under the green door .",
    "birds sing in the tall tree every morning .",
    "the train left the station at noon .",
    "she wrote a letter to her friend in paris .",
    "children play in the snow after school .",
    "the river runs past the small village .",
]


def words_of(sentences):
    """Lower-cased words and punctuation, in order of first appearance."""
    seen = dict.fromkeys(t for s in sentences for t in re.findall(r"\w+|[^\w\s]", s.lower()))
    return list(seen)


def write_vocab(folder, sentences=SENTENCES, size=None):
    """vocab.txt: specials, the sentences' words, single characters and their
    ## continuations (so every word tokenizes), then filler up to `size`."""
    tokens = list(SPECIALS) + words_of(sentences)
    characters = sorted({c for s in sentences for c in s.lower() if not c.isspace()})
    tokens += [c for c in characters if c not in tokens] + [f"##{c}" for c in characters]
    if size is not None:
        tokens += [f"[unused{i}]" for i in range(size - len(tokens))]
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return len(tokens)


def tiny_config(vocab_size, model_type="bert", **overrides):
    values = dict(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=64, model_type=model_type)
    if model_type == "albert":
        values.update(embedding_size=16, num_hidden_groups=1, hidden_act="gelu_new", num_hidden_layers=3)
    values.update(overrides)
    return BertConfig(**values)


def make_readable(model, seed=0, layer_scale=0.15):
    """Random weights that make the input *recoverable*, so probe accuracies
    are far from zero and differ by layer: large word embeddings, small
    position and segment embeddings, an MLM head that starts from the
    identity map, and layers that perturb the residual stream a little more
    at each depth."""
    generator = torch.Generator().manual_seed(seed)
    randn = lambda *shape: torch.randn(*shape, generator=generator)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm.weight" in name:
                p.copy_(1.0 + 0.1 * randn(p.shape))
            elif name.startswith("encoder.layers."):
                depth = int(name.split(".")[2]) + 1
                p.copy_(layer_scale * depth * randn(p.shape))
            else:
                p.copy_(0.1 * randn(p.shape))
        model.embeddings.word_embeddings.weight.copy_(randn(model.embeddings.word_embeddings.weight.shape))
        if model.embeddings.projection is not None:   # ALBERT: E -> H, start from the identity too
            H, E = model.embeddings.projection.weight.shape
            model.embeddings.projection.weight.copy_(torch.eye(H, E) + 0.05 * randn(H, E))
        if model.mlm_head is not None:
            E, H = model.mlm_head.dense.weight.shape
            model.mlm_head.dense.weight.copy_(3.0 * torch.eye(E, H) + 0.05 * randn(E, H))
    return model


def save_tiny_model(folder, model_type="bert", sentences=SENTENCES, seed=0, vocab_size=None, layer_scale=0.15,
                    with_pooler=True, with_mlm_head=True, with_pair_head=True, **overrides):
    """Write vocab.txt + a readable random model to `folder`; return the model."""
    folder.mkdir(parents=True, exist_ok=True)
    V = write_vocab(folder, sentences, vocab_size)
    model = BertModel(tiny_config(V, model_type, **overrides), with_pooler=with_pooler,
                      with_mlm_head=with_mlm_head, with_pair_head=with_pair_head)
    make_readable(model, seed, layer_scale).eval()
    save_pretrained(model, folder)
    return model


def random_batch(vocab_size, batch=3, length=11, seed=0):
    """(input_ids, attention_mask, token_type_ids): three rows of different
    lengths (two padded) and two segments."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[1, 7:] = 0          # padding in two rows of different lengths
    attention_mask[2, 4:] = 0
    input_ids[attention_mask == 0] = 0
    token_type_ids = torch.zeros(batch, length, dtype=torch.long)
    token_type_ids[:, 5:] = 1
    return input_ids, attention_mask, token_type_ids


# A learnable toy SST-2 for the fine-tuning tests: label 1 iff the sentence
# holds a positive word.
POSITIVE = ["good", "great", "fine", "happy", "lovely"]
NEGATIVE = ["bad", "awful", "poor", "sad", "ugly"]
FILLER = ["the", "film", "was", "a", "story", "and", "very", "plot", "it", "show"]


def sentiment_rows(n, seed, max_filler=9):
    """n (sentence, label) rows: 2..max_filler filler words and one positive or negative word."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        label = rng.random() < 0.5
        words = rng.sample(FILLER, rng.randint(2, max_filler)) + [rng.choice(POSITIVE if label else NEGATIVE)]
        rng.shuffle(words)
        rows.append((" ".join(words), str(int(label))))
    return rows


def write_sst2(path, rows):
    """A GLUE SST-2 TSV (header, sentence<TAB>label)."""
    path.write_text("sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows), encoding="utf-8")
    return path


def small_config(**overrides):
    """A BERT small enough to check by hand (H=8, two heads, two layers, V=40), dropout off."""
    values = dict(vocab_size=40, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=12,
                  max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **overrides})


def write_toy_sst2(root):
    """A tiny BERT without pooler (like the bundled model) in root/base, and a
    toy SST-2 split: 320 training and 64 dev sentences. Returns (train, dev)."""
    (root / "base").mkdir()
    vocab_size = write_vocab(root / "base", [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)             # Google's initialisation; no pooler, like the bundled model
    save_pretrained(BertModel(tiny_config(vocab_size), with_pooler=False, with_pair_head=False), root / "base")
    return write_sst2(root / "train.tsv", sentiment_rows(320, seed=0)), write_sst2(root / "dev.tsv", sentiment_rows(64, seed=1))


class BagOfWordsClassifier(torch.nn.Module):
    """A stand-in sentence classifier for the optimizer and step exercises:
    it takes a batch as the task model does, has weights that decay and
    some that do not (a bias, a layer norm), and dropout, but none of BERT's
    own code, so those exercises' tests do not need the model's exercises."""

    def __init__(self, vocab_size=40, hidden=8, labels=2, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.word_embeddings = torch.nn.Embedding(vocab_size, hidden)
        self.token_type_embeddings = torch.nn.Embedding(2, hidden)
        self.layer_norm = torch.nn.LayerNorm(hidden)
        self.dropout = torch.nn.Dropout(0.1)
        self.classifier = torch.nn.Linear(hidden, labels)

    def forward(self, input_ids, attention_mask, token_type_ids):
        vectors = self.layer_norm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids))
        mask = attention_mask.unsqueeze(-1).float()
        mean = (vectors * mask).sum(1) / mask.sum(1)                    # the mean over real tokens
        return self.classifier(self.dropout(torch.tanh(mean)))
