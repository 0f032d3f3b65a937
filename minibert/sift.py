"""SiFT: scale-invariant fine-tuning, DeBERTa's virtual adversarial training.

[DeBERTa] section 3.3 adds one regulariser to fine-tuning: besides the task
loss on the real input, the model is asked to give the *same* output when its
input embeddings are nudged in the direction that changes the output most
(virtual adversarial training, [VAT]). Perturbing raw word embeddings works
badly on large models, because their norms differ across words and models;
SiFT perturbs the *normalised* embeddings instead, so one perturbation size
fits every model.

The paper gives the idea; the details below are the official code's
(docs/deberta.md section 5, read from microsoft/DeBERTa's
DeBERTa/sift/sift.py and apps/run.py), per training batch:

  0. clean forward: task loss l and logits z. A forward pre-hook on the
     embedding LayerNorm records x_hat = LN0(x), the embedding sum x (word +
     position + segment, (B, T, E)) normalised per token to mean 0 and
     variance 1 by a LayerNorm without weights (eps 1e-7). The clean forward
     itself is untouched.
  1. delta ~ N(0, sigma^2), clipped to +-2 sigma, one value per token and
     embedding dimension (B, T, E), float32.
  2. with the parameters frozen, forward with the LayerNorm's input replaced
     by x_hat + delta (LN(LN0(x)) = LN(x) up to eps, so delta = 0 would give
     the clean model); g = d/d delta of sum_rows SKL(z', stopgrad(z)).
  3. one ascent step, normalised per token by the largest |g| over the
     embedding axis:  delta <- delta + eta g / (1e-6 + max_e |g|).
     No projection back onto a ball, a single step (K = 1).
  4. with the parameters unfrozen, forward with x_hat + delta (delta now a
     constant) -> z''; l_adv = mean over the items SKL(z'', z), with gradients
     into both z'' and the clean z.
  5. the loss is l + lambda * l_adv.

The defaults are the official ones (deberta.md section 5): sigma =
vat_init_perturbation = 1e-2 and eta = vat_learning_rate = 1e-4 (apps/run.py's
defaults), lambda = vat_lambda = 5 (the base, v3-base, v3-small and
xxlarge-v2 SiFT runs in experiments/glue/mnli.sh; v3-xsmall uses 3; run.py's
own default 0 means "off").

Here it is a wrapper around a task object's objective (`SiftObjective`), so
commands.trainer.train runs it unchanged, under DistributedDataParallel and bf16
autocast too. Which output distributions the symmetric KL compares is the
task's to say, `task.distributions(logits, batch) -> (rows, weight)`: one
softmax row per example (classification), per labelled word piece (NER), or
the start and the end distributions over positions, weight 1/2 each (SQuAD),
so that the weighted sum counts the same items as the task's loss.

References
  [DeBERTa] He, Liu, Gao, Chen 2021, "DeBERTa: Decoding-enhanced BERT with
            Disentangled Attention", ICLR 2021, arXiv:2006.03654, section 3.3.
  [VAT]     Miyato, Maeda, Koyama, Ishii 2018, "Virtual Adversarial Training:
            a Regularization Method for Supervised and Semi-Supervised
            Learning", arXiv:1704.03976.
  [SMART]   Jiang et al. 2020, "SMART: Robust and Efficient Fine-Tuning for
            Pre-trained Natural Language Models", arXiv:1911.03437 (the
            symmetric KL as the adversarial loss).
"""

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minibert.support import MiniBertError

NORMALISATION_EPS = 1e-7      # the official PerturbationLayer's LayerNorm(hidden, 1e-7, no weights)
GRADIENT_EPS = 1e-6           # in the ascent step's denominator (deberta.md section 5, step 4)


@dataclass
class SiftConfig:
    """SiFT's three numbers (deberta.md section 5). `lambda_` is lambda (a
    trailing underscore because `lambda` is a Python keyword)."""
    lambda_: float = 5.0        # lambda: weight of the adversarial loss (vat_lambda)
    init_scale: float = 1e-2    # sigma: std of the initial perturbation (vat_init_perturbation)
    step_size: float = 1e-4     # eta: size of the one ascent step (vat_learning_rate)

    def __post_init__(self):
        for name in ("lambda_", "init_scale", "step_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise MiniBertError(f"SiFT setting '{name.rstrip('_')}' = {value!r}: expected a finite number > 0")

    def to_dict(self):
        """What task.json records of a SiFT run."""
        return {"lambda": self.lambda_, "init_scale": self.init_scale, "step_size": self.step_size,
                "loss": "symmetric-kl", "ascent_steps": 1,
                "perturbed": "embedding sum normalised per token (LN0), at the embedding LayerNorm's input"}


# ----------------------------------------------------------------------------
# The perturbation: a forward pre-hook on the embedding LayerNorm
# ----------------------------------------------------------------------------


def normalise(x):
    """LN0(x): each token's vector to mean 0, variance 1, no weights (float32)."""
    return F.layer_norm(x.float(), x.shape[-1:], eps=NORMALISATION_EPS)


class EmbeddingPerturbation:
    """A forward pre-hook on the embedding LayerNorm, in one of three states:

      off        the model runs exactly as without the hook (evaluation)
      capturing  the model runs unchanged; the hook records x_hat = LN0(x)
      perturbed  the LayerNorm reads x_hat + delta instead of x

    The perturbed input starts from the x_hat of the clean forward, detached
    (as the official code does): the adversarial loss reaches the embedding
    tables only through the clean logits z."""

    def __init__(self, layer_norm):
        self.layer_norm = layer_norm
        self.normalized = None        # x_hat of the last capturing forward, (B, T, E) float32
        self.capturing_now = False
        self.delta = None             # (B, T, E) float32 while perturbed
        self.handle = layer_norm.register_forward_pre_hook(self.hook)

    def hook(self, module, inputs):
        x = inputs[0]                                        # (B, T, E): the embedding sum
        if self.delta is not None:
            if self.normalized is None or self.normalized.shape != x.shape:
                raise RuntimeError("SiFT: a perturbed forward needs a capturing forward on the same batch first")
            return ((self.normalized + self.delta).to(x.dtype),)
        if self.capturing_now:
            with torch.no_grad():
                self.normalized = normalise(x)
        return None                                          # None: the input is not changed

    @contextlib.contextmanager
    def capturing(self):
        self.capturing_now = True
        try:
            yield
        finally:
            self.capturing_now = False

    @contextlib.contextmanager
    def perturbed(self, delta):
        self.delta = delta
        try:
            yield
        finally:
            self.delta = None

    def remove(self):
        self.handle.remove()
        self.normalized = self.delta = None


def unwrap(model):
    """The module inside a DistributedDataParallel wrapper (or the model itself)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def embedding_layer_norm(model):
    """The LayerNorm that reads the embedding sum: the first module named
    `...embeddings.layer_norm` (the official code takes the first whose name
    contains `embeddings.LayerNorm`)."""
    for name, module in unwrap(model).named_modules():
        if name == "embeddings.layer_norm" or name.endswith(".embeddings.layer_norm"):
            return module
    raise MiniBertError(f"SiFT: {type(unwrap(model)).__name__} has no embeddings.layer_norm module to perturb")


@contextlib.contextmanager
def frozen(module):
    """The module's trainable parameters with requires_grad off, for the
    ascent step: its forward then builds no graph into them, so nothing can
    reach their .grad (deberta.md section 5, step 1). Restored on exit, before
    the loss's backward needs them."""
    trainable = [p for p in module.parameters() if p.requires_grad]
    for p in trainable:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in trainable:
            p.requires_grad_(True)


def initial_delta(shape, init_scale, device=None):
    """delta ~ N(0, sigma^2) clipped to [-2 sigma, 2 sigma], float32 (deberta.md
    section 5, step 2). Clipping (not resampling) leaves about 4.6% of the
    values at +-2 sigma and a std of about 0.959 sigma. Drawn from torch's
    global generator, which commands.trainer.train re-seeds every step, so a
    resumed run draws the same perturbations."""
    delta = torch.randn(shape, device=device, dtype=torch.float32) * init_scale
    return delta.clamp(-2 * init_scale, 2 * init_scale)


def ascent_step(delta, grad, step_size):
    """delta + eta g / (1e-6 + max_e |g|), the max over each token's embedding
    vector (deberta.md section 5, step 4): every token moves by at most eta
    per coordinate, whatever the gradient's scale. A NaN or infinite gradient
    (an overflow) skips the step, as the official code does."""
    # exercise: sift-perturbation
    if not torch.isfinite(grad).all():
        return delta
    largest = grad.abs().amax(dim=-1, keepdim=True)               # (B, T, 1): max_e |g| per token
    step = step_size * grad / (GRADIENT_EPS + largest)            # (B, T, E): at most eta per coordinate
    return delta + step
    # end exercise


# ----------------------------------------------------------------------------
# The adversarial loss
# ----------------------------------------------------------------------------


def symmetric_kl(perturbed_logits, clean_logits):
    """(N, C), (N, C) -> (N,): KL(p||q) + KL(q||p), p = softmax(clean),
    q = softmax(perturbed), in float32.

    As in the official code, each KL's probability weights are constants
    (stop-gradient), so the gradients are q - p for the perturbed logits and
    p - q for the clean ones. The official code computes the two
    cross-entropies -sum p log q - sum q log p, whose value is larger by the
    entropies H(p) + H(q) (deberta.md section 5); subtracting those constants
    changes no gradient and makes the value the symmetric KL itself: 0 when
    the outputs agree."""
    log_q = F.log_softmax(perturbed_logits.float(), dim=-1)
    log_p = F.log_softmax(clean_logits.float(), dim=-1)
    p, q = log_p.exp().detach(), log_q.exp().detach()
    kl_pq = (p * (log_p.detach() - log_q)).sum(-1)      # KL(p||q): gradient reaches the perturbed logits
    kl_qp = (q * (log_q.detach() - log_p)).sum(-1)      # KL(q||p): gradient reaches the clean logits
    return kl_pq + kl_qp


# ----------------------------------------------------------------------------
# The objective
# ----------------------------------------------------------------------------


def forward(model, batch):
    return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


class SiftObjective:
    """training.training_step's objective (counts / losses) for a task, with SiFT.

    losses(model, batch) returns the task's own term unchanged plus a term
    "sift" = lambda * sum of the SKLs, averaged over the task's items, so
    the total training.training_step minimises is  l + lambda * l_adv. In the
    training log, sift_loss is lambda * l_adv and sift_accuracy the share of
    items whose perturbed prediction equals the clean one.

    `model` may be a DistributedDataParallel wrapper: the clean and the final
    perturbed forward run through it (their gradients are averaged over the
    processes); the ascent step runs the module inside, with its parameters
    frozen, and takes torch.autograd.grad with respect to delta only, so it
    neither touches a parameter's .grad nor fires DDP's gradient hooks."""

    TERM = "sift"

    def __init__(self, task, config=None):
        self.task = task
        self.config = config or SiftConfig()
        self.perturbations = {}          # id(embedding LayerNorm) -> EmbeddingPerturbation

    def attach(self, model):
        """The perturbation hook on `model`'s embedding LayerNorm (installed once)."""
        layer_norm = embedding_layer_norm(model)
        if id(layer_norm) not in self.perturbations:
            self.perturbations[id(layer_norm)] = EmbeddingPerturbation(layer_norm)
        return self.perturbations[id(layer_norm)]

    def remove_hooks(self):
        for perturbation in self.perturbations.values():
            perturbation.remove()
        self.perturbations = {}

    def counts(self, batch):
        counts = self.task.counts(batch)
        if len(counts) != 1:
            raise MiniBertError(f"SiFT: the {self.task.name} objective has terms {sorted(counts)}; expected one")
        (n,) = counts.values()
        return {**counts, self.TERM: n}

    def ascend(self, model, batch, clean_logits, delta):
        """Steps 2-3 of the module docstring: the perturbed forward with frozen
        parameters, g = d SKL / d delta, one normalised ascent step. Needs the
        capturing forward on this batch first. Returns the new delta (detached)."""
        module = unwrap(model)
        perturbation = self.attach(module)
        delta = delta.detach().requires_grad_(True)
        with frozen(module), perturbation.perturbed(delta):
            rows, weight = self.task.distributions(forward(module, batch), batch)
            clean_rows, _ = self.task.distributions(clean_logits.detach(), batch)
            divergence = weight * symmetric_kl(rows, clean_rows).sum()
            (grad,) = torch.autograd.grad(divergence, delta)          # (B, T, E); no parameter .grad
        return ascent_step(delta.detach(), grad, self.config.step_size).detach()

    def losses(self, model, batch):
        perturbation = self.attach(model)
        try:
            with perturbation.capturing():
                logits = forward(model, batch)                         # the clean forward, unchanged
            terms = self.task.losses(logits, batch)
            delta = initial_delta(perturbation.normalized.shape, self.config.init_scale,
                                  perturbation.normalized.device)
            delta = self.ascend(model, batch, logits, delta)
            with perturbation.perturbed(delta):
                adversarial_logits = forward(model, batch)             # z'', gradients into the model
        finally:
            perturbation.normalized = None                             # free the (B, T, E) tensor
        rows, weight = self.task.distributions(adversarial_logits, batch)
        clean_rows, _ = self.task.distributions(logits, batch)
        divergence = weight * symmetric_kl(rows, clean_rows).sum()    # sum over items: training.training_step divides
        agree = weight * (rows.argmax(-1) == clean_rows.argmax(-1)).sum()
        terms[self.TERM] = (self.config.lambda_ * divergence, agree)
        return terms
