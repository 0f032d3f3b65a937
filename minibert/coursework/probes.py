"""Inputs the submission never saw: each exercise's function on data drawn
from a seed the grader picks for every grade.

The grading child runs `run(name, seed)` after the exercise's tests, in
both the instructor's run and the submission's, with the same seed; the
grader compares what every call returned (check.py). Shapes and values are
drawn too, so an answer written for the shipped tests' inputs does not
carry over. Every probe draws from its own generators (never a model's
dropout: a probe's calls draw nothing from torch's generator), and uses no
other exercise's function, so each exercise is checked on its own.

This file is the grader's: it is copied next to the runner, never taken
from a submission.
"""

import importlib
import random
import string
import struct
import types

import numpy as np
import torch


def run(name, seed):
    """Call exercise `name`'s function on inputs drawn from `seed`."""
    PROBES[name](random.Random(f"{name}:{seed}"), torch.Generator().manual_seed(seed))


def module(name):
    return importlib.import_module(name)


def tensor(g, *shape, scale=1.0, dtype=torch.float32):
    return (scale * torch.randn(*shape, generator=g)).to(dtype)


def small_config(rng, **overrides):
    from minibert.model import BertConfig
    heads = rng.choice([1, 2, 3])
    values = dict(vocab_size=rng.randint(20, 60), hidden_size=heads * rng.choice([2, 4]), num_hidden_layers=2,
                  num_attention_heads=heads, intermediate_size=rng.randint(5, 17), max_position_embeddings=16,
                  type_vocab_size=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **overrides})


def randomized(layer, g):
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(0.7 * torch.randn(p.shape, generator=g))
    return layer.eval()


# ---- assignment 1: the encoder ---------------------------------------------


def embeddings_sum(rng, g):
    model = module("minibert.model")
    for albert in (False, True):
        extra = dict(model_type="albert", embedding_size=rng.choice([3, 5]), num_hidden_groups=1) if albert else {}
        config = small_config(rng, **extra)
        embeddings = randomized(model.Embeddings(config), g)
        B, T = rng.randint(1, 3), rng.randint(2, 9)
        embeddings(torch.randint(config.vocab_size, (B, T), generator=g), torch.randint(2, (B, T), generator=g))


def attention(rng, g):
    model = module("minibert.model")
    for dtype in (torch.float32, torch.float64):
        B, A, T, S, D = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 7), rng.randint(1, 7), rng.randint(2, 9)
        q, k, v = tensor(g, B, A, T, D, dtype=dtype), tensor(g, B, A, S, D, dtype=dtype), tensor(g, B, A, S, D, dtype=dtype)
        keep = torch.rand(B, 1, 1, S, generator=g) < 0.7
        keep[..., 0] = True
        bias = torch.where(keep, 0.0, -10000.0).to(dtype)
        model.attention(q, k, v, bias)                           # dropout off: the values are comparable


def padding_mask(rng, g):
    model = module("minibert.model")
    for dtype in (torch.float32, torch.float64, torch.float16):
        mask = (torch.rand(rng.randint(1, 4), rng.randint(1, 9), generator=g) < 0.6).long()
        model.padding_bias(mask, dtype)


def split_merge_heads(rng, g):
    model = module("minibert.model")
    for _ in range(3):
        heads = rng.randint(1, 5)
        model.split_heads(tensor(g, rng.randint(1, 3), rng.randint(1, 6), heads * rng.randint(1, 4)), num_heads=heads)


def gelu_erf(rng, g):
    model = module("minibert.model")
    model.gelu(tensor(g, rng.randint(1, 4), rng.randint(1, 40), scale=rng.uniform(1, 5)))
    model.gelu(tensor(g, rng.randint(2, 30), scale=3.0, dtype=torch.float64))


def gelu_tanh(rng, g):
    model = module("minibert.model")
    model.gelu_tanh(tensor(g, rng.randint(1, 4), rng.randint(1, 40), scale=rng.uniform(1, 5)))
    model.gelu_tanh(tensor(g, rng.randint(2, 30), scale=3.0, dtype=torch.float64))


def layer_norm(rng, g):
    model = module("minibert.model")
    for dtype in (torch.float32, torch.float64):
        H = rng.randint(2, 17)
        x = tensor(g, rng.randint(1, 3), rng.randint(1, 5), H, scale=rng.uniform(0.5, 4), dtype=dtype) + rng.uniform(-3, 3)
        model.layer_norm(x, tensor(g, H, dtype=dtype), tensor(g, H, dtype=dtype), rng.choice([1e-12, 1e-5, 0.5]))


def feed_forward(rng, g):
    model = module("minibert.model")
    config = small_config(rng)
    block = randomized(model.FeedForward(config), g)
    block(tensor(g, rng.randint(1, 3), rng.randint(1, 6), config.hidden_size))


def albert_depth_plan(rng, g):
    from minibert.model import BertConfig
    for _ in range(6):
        layers = rng.randint(1, 24)
        BertConfig(model_type="albert", num_hidden_layers=layers, num_hidden_groups=rng.randint(1, layers)).depth_plan()


# ---- assignment 2: tokenization and pretraining ------------------------------

PIECES = ["un", "re", "aff", "able", "ing", "ed", "s", "a", "b", "ab", "ba", "the", "cat", "at", "t", "e", "é"]


def random_text(rng):
    alphabet = string.ascii_letters + "  \t\n.,!?'\"-()$%&" + "éüñÅ" + "中文字" + "\u00a0\u200b\x00"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))


def basic_tokenizer(rng, g):
    tokenization = module("minibert.tokenization")
    for _ in range(6):
        tokenization.basic_tokenize(random_text(rng), do_lower_case=rng.random() < 0.5)


def wordpiece(rng, g):
    tokenization = module("minibert.tokenization")
    pieces = rng.sample(PIECES, rng.randint(4, len(PIECES)))
    vocab_list = ["[UNK]"] + pieces + ["##" + p for p in rng.sample(PIECES, rng.randint(4, len(PIECES)))]
    vocab = {token: i for i, token in enumerate(vocab_list)}
    for _ in range(8):
        word = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 5)))
        tokenization.wordpiece(word, vocab)
    tokenization.wordpiece(rng.choice(pieces) * rng.choice([50, 101]), vocab)


def mlm_masking(rng, g):
    data = module("minibert.pretraining")
    vocab_size = rng.randint(50, 200)
    input_ids = torch.randint(5, vocab_size, (rng.randint(2, 20), rng.randint(5, 40)), generator=g)
    chosen = torch.rand(input_ids.shape, generator=g) < rng.uniform(0.1, 0.5)
    data.corrupt_chosen(input_ids, chosen, 4, 5, vocab_size, torch.Generator().manual_seed(rng.randrange(1 << 30)))


def mlm_loss(rng, g):
    pretraining = module("minibert.pretraining")
    B, T, V = rng.randint(1, 3), rng.randint(2, 8), rng.randint(3, 12)
    logits = tensor(g, B, T, V, scale=2.0)

    def model(input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None):
        chosen = logits if mlm_positions is None else logits[mlm_positions]
        return types.SimpleNamespace(selected_mlm_logits=chosen)
    labels = torch.randint(V, (B, T), generator=g)
    labels[torch.rand(B, T, generator=g) < 0.5] = -100
    labels[0, 0] = 1
    batch = {"input_ids": torch.randint(5, 20, (B, T), generator=g), "attention_mask": torch.ones(B, T, dtype=torch.long),
             "token_type_ids": torch.zeros(B, T, dtype=torch.long), "mlm_labels": labels}
    pretraining.masked_lm_loss(model, batch)


def lr_schedule(rng, g):
    training = module("minibert.training")
    for _ in range(2):
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=rng.uniform(1e-5, 1.0))
        total = rng.randint(2, 60)
        training.warmup_then_linear_decay(optimizer, rng.randint(0, total), total)


# ---- assignment 3: checkpoints -----------------------------------------------


def varint_bytes(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def varint(rng, g):
    protobuf = module("minibert.support.protobuf")
    for _ in range(6):
        value = rng.choice([rng.randrange(128), rng.randrange(1 << 14), rng.randrange(1 << 35), rng.randrange(1 << 64)])
        prefix = bytes(rng.randrange(256) for _ in range(rng.randint(0, 3)))
        protobuf.read_varint(prefix + varint_bytes(value) + b"\x07", len(prefix))


def tensorbundle_entry(rng, g):
    tf_bundle = module("minibert.checkpoints.tf_bundle")

    def field(number, wire, payload):
        return varint_bytes(number << 3 | wire) + payload
    for _ in range(4):
        dims = b"".join(field(2, 2, varint_bytes(len(d)) + d)
                        for d in (field(1, 0, varint_bytes(rng.randint(1, 3000))) for _ in range(rng.randint(0, 3))))
        raw = (field(1, 0, varint_bytes(rng.choice([1, 2, 3, 9]))) + field(2, 2, varint_bytes(len(dims)) + dims)
               + field(3, 0, varint_bytes(rng.randint(0, 5))) + field(4, 0, varint_bytes(rng.randrange(1 << 40)))
               + field(5, 0, varint_bytes(rng.randrange(1 << 30))) + field(6, 5, struct.pack("<I", rng.randrange(1 << 32)))
               + field(9, 0, varint_bytes(rng.randrange(1000))))
        tf_bundle._parse_entry(raw, "layer/kernel", "model.ckpt.index")


def masked_crc32c(rng, g):
    tf_bundle = module("minibert.checkpoints.tf_bundle")
    for _ in range(3):
        tf_bundle._crc_update(rng.randrange(1 << 32), bytes(rng.randrange(256) for _ in range(rng.randint(0, 300))))


# ---- assignment 4: Kao et al. -----------------------------------------------


def reconstruction_score(rng, g):
    probing = module("minibert.probing")
    score = probing.Score()
    for _ in range(2):
        N, V = rng.randint(1, 12), rng.randint(2, 30)
        score.add(tensor(g, N, V, scale=3.0), torch.randint(V, (N,), generator=g))


def small_bert(rng, g):
    from minibert.model import BertModel
    torch.manual_seed(rng.randrange(1 << 30))
    return BertModel(small_config(rng, num_hidden_layers=rng.randint(2, 4))).eval()


def duplicate_untied(rng, g):
    duplication = module("minibert.duplication")
    model = small_bert(rng, g)
    L = model.config.num_hidden_layers
    order = sorted(rng.randrange(L) for _ in range(rng.randint(L, 2 * L)))
    duplication.copy_layers(model, len(order), order)


def duplicate_tied(rng, g):
    duplication = module("minibert.duplication")
    for _ in range(5):
        duplication.tied_layers([rng.randrange(6) for _ in range(rng.randint(1, 10))])


# ---- assignment 5: fine-tuning ----------------------------------------------


def classification_head(rng, g):
    heads, model = module("minibert.heads"), module("minibert.model")
    config = small_config(rng)
    H, B, T = config.hidden_size, rng.randint(1, 3), rng.randint(1, 6)
    output = model.BertModelOutput(tensor(g, B, T, H), pooled_output=tensor(g, B, H))
    for per_token in (False, True):
        randomized(heads.OutputLayer(config, rng.randint(2, 6), per_token=per_token), g)(output)


def first_piece_labels(rng, g):
    ner = module("minibert.tasks.ner")
    for _ in range(4):
        words, word = [], rng.randint(0, 5)
        for _ in range(rng.randint(0, 15)):
            word += rng.random() < 0.6
            words.append(word)
        ner.first_pieces(words)


def conll_chunks(rng, g):
    metrics = module("minibert.metrics")
    tags = ["O"] + [f"{p}-{t}" for p in "BI" for t in ("PER", "LOC", "ORG", "MISC")]
    for _ in range(5):
        metrics.conll_chunks([rng.choice(tags) for _ in range(rng.randint(0, 14))])


def squad_span(rng, g):
    squad = module("minibert.tasks.squad")
    for _ in range(3):
        length, context_from = rng.randint(3, 14), rng.randint(1, 3)
        offsets = np.array([[-1, -1]] * context_from + [[2 * i, 2 * i + 1] for i in range(length - context_from)])
        allowed = np.array([i >= context_from and rng.random() < 0.8 for i in range(length)])
        task = squad.SquadTask(version="1.1", max_answer_len=rng.randint(1, 6), n_best=rng.randint(1, 8))
        log_start = np.round(np.array([rng.uniform(-3, 3) for _ in range(length)]), 3)
        log_end = np.round(np.array([rng.uniform(-3, 3) for _ in range(length)]), 3)
        task.best_span(log_start, log_end, {"_offsets": offsets, "_max_context": allowed})


def squad_f1(rng, g):
    metrics = module("minibert.metrics")
    words = ["a", "cat", "sat", "on", "the", "mat", "dog"]
    for _ in range(5):
        metrics._overlap_f1([rng.choice(words) for _ in range(rng.randint(1, 6))],
                            [rng.choice(words) for _ in range(rng.randint(1, 6))])


# ---- assignment 6: distillation ------------------------------------------------


def lstm_gates(rng, g):
    lstm = module("minibert.lstm")
    for _ in range(2):
        B, I, H = rng.randint(1, 4), rng.randint(1, 6), rng.randint(1, 6)
        lstm.lstm_cell(tensor(g, B, I), tensor(g, B, H), tensor(g, B, H), tensor(g, 4 * H, I), tensor(g, 4 * H, H),
                       tensor(g, 4 * H), tensor(g, 4 * H))


def distillation_loss(rng, g):
    distillation = module("minibert.distillation")
    for alpha in (0.0, rng.uniform(0.1, 0.9), 1.0):
        B, K = rng.randint(1, 6), rng.randint(2, 5)
        labels = torch.randint(K, (B,), generator=g)
        labels[torch.rand(B, generator=g) < 0.4] = -100
        distillation.distillation_loss(tensor(g, B, K), tensor(g, B, K), labels, alpha,
                                       distill_term=rng.choice(["mse", "squared-l2"]))


def augment_mask_pos(rng, g):
    augment = module("minibert.distillation")
    lexicon = augment.PosLexicon({"cat": {"NN": 3}, "dog": {"NN": 1}, "runs": {"VBZ": 2}, "red": {"JJ": 1},
                                  "blue": {"JJ": 4}})
    for _ in range(8):
        word = rng.choice(["cat", "dog", "runs", "red", "blue", "zebra"])
        augment._fate(word, rng.random(), lexicon, rng.uniform(0, 0.4), rng.uniform(0, 0.4),
                      np.random.default_rng(rng.randrange(1 << 30)))


# ---- assignment 7: DeBERTa ---------------------------------------------------


def log_bucket(rng, g):
    deberta = module("minibert.deberta")
    for buckets, largest in ((rng.choice([8, 16, 32]), rng.choice([64, 128])), (256, 512)):
        deberta.log_bucket(torch.randint(-2 * largest, 2 * largest, (rng.randint(1, 40),), generator=g), buckets, largest)


def c2p_p2c(rng, g):
    deberta = module("minibert.deberta")
    B, A, T, S, D = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 7), rng.randint(1, 4), rng.randint(2, 6)
    q, k = tensor(g, B, A, T, D), tensor(g, B, A, T, D)
    K_r, Q_r = tensor(g, 1, A, 2 * S, D), tensor(g, 1, A, 2 * S, D)
    positions = torch.arange(T)
    delta = (positions[:, None] - positions[None, :] + S).clamp(0, 2 * S - 1)
    deberta.relative_scores_gathered(q, k, K_r, Q_r, delta)
    deberta.relative_scores_gathered(q, k, K_r, None, delta)


def sift_perturbation(rng, g):
    sift = module("minibert.sift")
    B, T, E = rng.randint(1, 3), rng.randint(1, 5), rng.randint(1, 6)
    sift.ascent_step(tensor(g, B, T, E), tensor(g, B, T, E, scale=rng.choice([1e-3, 1.0, 50.0])), rng.uniform(0.01, 1))


# ---- assignment 8: the milestone's optimizer and step ---------------------------


def adamw_update(rng, g):
    training = module("minibert.training")
    shape = (rng.randint(1, 4), rng.randint(1, 5))
    x, m, v = tensor(g, *shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
    for t in range(1, 4):
        training.adamw_update(x, tensor(g, *shape, dtype=torch.float64), m, v, t, rng.uniform(1e-3, 0.1),
                              (rng.uniform(0.8, 0.95), rng.uniform(0.9, 0.999)), 1e-6, rng.choice([0.0, 0.01, 0.1]),
                              bias_correction=rng.random() < 0.5)


class TinyClassifier(torch.nn.Module):
    """A sentence classifier with none of BERT's exercises and no dropout."""

    def __init__(self, g, vocab_size=30, hidden=6):
        super().__init__()
        self.word_embeddings = torch.nn.Embedding(vocab_size, hidden)
        self.layer_norm = torch.nn.LayerNorm(hidden)
        self.classifier = torch.nn.Linear(hidden, 2)
        randomized(self, g).train()

    def forward(self, input_ids, attention_mask, token_type_ids):
        mask = attention_mask[..., None].float()
        pooled = (self.word_embeddings(input_ids) * mask).sum(1) / mask.sum(1)
        return self.classifier(torch.tanh(self.layer_norm(pooled)))


def training_step(rng, g):
    training = module("minibert.training")
    from minibert.finetuning import Objective
    from minibert.tasks.classification import ClassificationTask
    model = TinyClassifier(g)
    optimizer = torch.optim.SGD(model.parameters(), lr=rng.uniform(0.05, 0.5))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (step + 1))
    batches = []
    for _ in range(rng.randint(1, 3)):
        B, T = rng.randint(1, 4), rng.randint(2, 7)
        batches.append({"input_ids": torch.randint(1, 30, (B, T), generator=g), "attention_mask": torch.ones(B, T, dtype=torch.long),
                        "token_type_ids": torch.zeros(B, T, dtype=torch.long), "labels": torch.randint(2, (B,), generator=g)})
    training.training_step(model, batches, Objective(ClassificationTask("sst2")), optimizer, scheduler,
                           max_grad_norm=rng.choice([0.01, 1.0]))


# exercise name -> its probe (every exercise of exercises.ASSIGNMENTS has one)
PROBES = {
    "embeddings-sum": embeddings_sum, "attention": attention, "padding-mask": padding_mask,
    "split-merge-heads": split_merge_heads, "gelu-erf": gelu_erf, "gelu-tanh": gelu_tanh, "layer-norm": layer_norm,
    "feed-forward": feed_forward, "albert-depth-plan": albert_depth_plan, "basic-tokenizer": basic_tokenizer,
    "wordpiece": wordpiece, "mlm-masking": mlm_masking, "mlm-loss": mlm_loss, "lr-schedule": lr_schedule,
    "varint": varint, "tensorbundle-entry": tensorbundle_entry, "masked-crc32c": masked_crc32c,
    "reconstruction-score": reconstruction_score, "duplicate-untied": duplicate_untied,
    "duplicate-tied": duplicate_tied, "classification-head": classification_head,
    "first-piece-labels": first_piece_labels, "conll-chunks": conll_chunks, "squad-span": squad_span,
    "squad-f1": squad_f1, "lstm-gates": lstm_gates, "distillation-loss": distillation_loss,
    "augment-mask-pos": augment_mask_pos, "log-bucket": log_bucket, "c2p-p2c": c2p_p2c,
    "sift-perturbation": sift_perturbation, "adamw-update": adamw_update, "training-step": training_step,
}
