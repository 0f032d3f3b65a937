"""Tang et al.'s student: a one-layer BiLSTM classifier, written out by hand.

Read it top to bottom: the LSTM cell, the LSTM that runs it over a padded
batch in both directions, and the classifier with its config (StudentConfig; the checks of
its fields: support/checks.py).

Tang et al. distil a fine-tuned BERT into "a single-layer BiLSTM, as well as its siamese
counterpart for sentence-pair tasks" ([Tang] Section 3; d-bert's model/bi_rnn.py, siamese_rnn.py):

    single sentence:  words -> embeddings (B, T, E)
                            -> one-layer BiLSTM, H per direction
                            -> h = [forward final state, backward final state]   (B, 2H)
                            -> fc1 -> ReLU -> dropout -> fc2 -> logits           (B, K)
    sentence pair:    the same BiLSTM encodes both sentences to h1, h2 (shared
                      weights, "siamese"); the classifier reads
                      [h1, h2, h1 * h2, |h1 - h2|]                               (B, 8H)
    (pooling="max": the maximum of each output over the real positions, d-bert's use_maxpool)

The LSTM ([LSTM]; with the forget gate of Gers et al. 2000) reads a sequence
x_1 .. x_T one vector at a time and keeps two states, h (the output) and c
(the memory cell). One step, in the form torch.nn.LSTM computes (its
documentation; sigma is the logistic sigmoid, * elementwise):

    i  = sigma(W_ii x + b_ii + W_hi h + b_hi)     input gate: how much new to write
    f  = sigma(W_if x + b_if + W_hf h + b_hf)     forget gate: how much of c to keep
    g  = tanh (W_ig x + b_ig + W_hg h + b_hg)     the candidate to write
    o  = sigma(W_io x + b_io + W_ho h + b_ho)     output gate: how much of c to show
    c' = f * c + i * g
    h' = o * tanh(c')

The four W_i* are stacked into one (4H, I) matrix `weight_ih` in the row
order i, f, g, o; likewise `weight_hh` (4H, H) and the biases (4H,) (two per
gate only because cuDNN has two; their sum is what matters).

A bidirectional LSTM runs a second LSTM, with its own weights, from the end of
the sentence back to its start, so each position sees both its left and its
right context. In a padded batch, "the end" is each sentence's last *real*
token: the backward direction must start there, not at the padding, or every
short sentence would be read as a run of [PAD]s followed by the sentence.

`LSTM.written_out = True` runs the cell above step by step in Python; the default runs
PyTorch's fused LSTM kernel on the same parameters (the tests check both give the same numbers).

References: [Tang] arXiv:1903.12136. [LSTM] Hochreiter & Schmidhuber 1997,
"Long Short-Term Memory"; Gers, Schmidhuber & Cummins 2000, "Learning to
Forget: Continual Prediction with LSTM" (the forget gate f).

Shapes in comments: B batch, T sequence length, I input size, H hidden size
per direction, D directions (1 or 2), E embedding size, K classes.
"""

import functools
import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from minibert.support.checks import REQUIRED, check_student_fields, student_fields_from
from minibert.support import MiniBertError

# ----------------------------------------------------------------------------
# The student's hyper-parameters
# ----------------------------------------------------------------------------


@dataclass
class StudentConfig:
    """The student's hyper-parameters. Defaults are d-bert's confs/birnn_sst2.json
    (300-d "rand" word embeddings, hidden 150 per direction, fc 200, dropout
    0.1: 603,002 parameters besides the embeddings). The paper's 0.96M SST-2
    student (Table 3) is the same with embeddings_mode "multichannel"
    (confs/birnn_sst2_150.json): a 600-d LSTM input, 963,002 parameters.
    The checks of the fields are support code (support/checks.py)."""

    vocab_size: int
    num_classes: int                 # K
    embedding_dim: int = 300         # E
    hidden_size: int = 150           # H per direction
    fc_size: int = 200               # width of fc1
    pair: bool = False               # siamese: encode two sentences with the shared BiLSTM
    pooling: str = "final"           # "final": concatenated final states (the authors' default); "max": max over time
    dropout: float = 0.1             # after fc1's ReLU
    padding_id: int = 0              # the id that pads input_ids (its embedding stays zero)
    embeddings_mode: str = "rand"    # the authors' modes: "rand", "static" (frozen), "nonstatic", or "multichannel":
                                     # a frozen copy beside the trained table, the LSTM reading both (2E)

    def __post_init__(self):
        check_student_fields(self.to_dict(), "StudentConfig")    # a config that exists is a valid one

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, values, source):
        """A config from a dict read from `source` (a file name, for the
        messages), every field checked (student_fields_from)."""
        defaults = {f.name: f.default for f in fields(cls) if f.name not in REQUIRED}
        return cls(**student_fields_from(values, source, defaults))

# ----------------------------------------------------------------------------
# One LSTM step
# ----------------------------------------------------------------------------


def lstm_cell(x_t, h, c, weight_ih, weight_hh, bias_ih, bias_hh):
    """One LSTM step, the equations of the module docstring one by one.

    x_t (B, I), h and c (B, H); weight_ih (4H, I), weight_hh (4H, H), the
    biases (4H,), each stacked in torch.nn.LSTM's row order i, f, g, o.
    Returns the new (h, c), each (B, H)."""
    # exercise: lstm-gates
    W_ii, W_if, W_ig, W_io = weight_ih.chunk(4, dim=0)     # each (H, I)
    W_hi, W_hf, W_hg, W_ho = weight_hh.chunk(4, dim=0)     # each (H, H)
    b_ii, b_if, b_ig, b_io = bias_ih.chunk(4, dim=0)       # each (H,)
    b_hi, b_hf, b_hg, b_ho = bias_hh.chunk(4, dim=0)

    i = torch.sigmoid(x_t @ W_ii.T + b_ii + h @ W_hi.T + b_hi)   # input gate (B, H)
    f = torch.sigmoid(x_t @ W_if.T + b_if + h @ W_hf.T + b_hf)   # forget gate
    g = torch.tanh(x_t @ W_ig.T + b_ig + h @ W_hg.T + b_hg)      # candidate cell content
    o = torch.sigmoid(x_t @ W_io.T + b_io + h @ W_ho.T + b_ho)   # output gate

    c = f * c + i * g            # keep part of the old memory, write part of the new
    h = o * torch.tanh(c)        # show part of the memory
    return h, c
    # end exercise


# ----------------------------------------------------------------------------
# The LSTM over a padded batch, one or both directions
# ----------------------------------------------------------------------------


def run_direction(x, lengths, weight_ih, weight_hh, bias_ih, bias_hh, reverse):
    """Run lstm_cell over every position of a padded batch, forwards or (with
    `reverse`) backwards, and return the outputs (B, T, H) and the final h (B, H).

    Padding: at a padded position (t >= the sequence's length) the state is
    not updated and the output is zero. Forwards, that holds h at its value
    after the last real token. Backwards (t = T-1 down to 0), it keeps the
    state at zero until t reaches the last real token, so each sequence is
    read from its own real end back to position 0."""
    B, T, _ = x.shape
    H = weight_hh.shape[1]
    h = x.new_zeros(B, H)
    c = x.new_zeros(B, H)
    outputs = [None] * T
    for t in (reversed(range(T)) if reverse else range(T)):
        real = (t < lengths).unsqueeze(1)                            # (B, 1): x[:, t] is a real token
        h_new, c_new = lstm_cell(x[:, t], h, c, weight_ih, weight_hh, bias_ih, bias_hh)
        h = torch.where(real, h_new, h)
        c = torch.where(real, c_new, c)
        outputs[t] = torch.where(real, h_new, torch.zeros_like(h_new))
    return torch.stack(outputs, dim=1), h                            # (B, T, H), (B, H)


@functools.lru_cache(maxsize=None)
def kernel_for(input_size, hidden_size, bidirectional):
    """A torch.nn.LSTM of the same shapes on the "meta" device (no numbers, no random draws).
    LSTM.forward lends it its own parameters for each call (torch.func.functional_call): the
    kernel is only torch's code, never a second copy of the weights (one kernel serves every
    LSTM of these shapes, the parameters swapped in and out around each call: one thread)."""
    return nn.LSTM(input_size, hidden_size, batch_first=True, bidirectional=bidirectional, device="meta")


class LSTM(nn.Module):
    """One-layer LSTM over a right-padded batch, forward or bidirectional.

    The parameters carry torch.nn.LSTM's names: `weight_ih_l0` (4H, I),
    `weight_hh_l0` (4H, H), `bias_ih_l0`, `bias_hh_l0` (4H,) for the forward
    direction and the same with `_reverse` for the backward one. So the same
    state dict works here, in torch.nn.LSTM, and in its fused kernel, which
    the default path runs on these very tensors."""

    def __init__(self, input_size, hidden_size, bidirectional=True):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.written_out = False          # True: run lstm_cell step by step (same numbers, slower)
        H = hidden_size
        for suffix in self.direction_suffixes():
            self.register_parameter(f"weight_ih_l0{suffix}", nn.Parameter(torch.empty(4 * H, input_size)))
            self.register_parameter(f"weight_hh_l0{suffix}", nn.Parameter(torch.empty(4 * H, H)))
            self.register_parameter(f"bias_ih_l0{suffix}", nn.Parameter(torch.empty(4 * H)))
            self.register_parameter(f"bias_hh_l0{suffix}", nn.Parameter(torch.empty(4 * H)))
        self.reset_parameters()

    def direction_suffixes(self):
        return ["", "_reverse"] if self.bidirectional else [""]

    def reset_parameters(self):
        """torch.nn.LSTM's initialisation, which d-bert's student used: every
        weight and bias U(-1/sqrt(H), 1/sqrt(H))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, bidirectional={self.bidirectional}"

    def forward(self, x, lengths):
        """x (B, T, I), right-padded; lengths (B,) the number of real
        positions of each sequence, every one in 1..T.

        Returns outputs (B, T, D*H), zero at padded positions, and final
        (B, D*H): the forward direction's h after each sequence's last real
        token, followed by the backward direction's h after it has read the
        sequence from its real end back to position 0."""
        lengths = self.check_inputs(x, lengths)
        if self.written_out:
            return self.written_out_forward(x, lengths.to(x.device))
        return self.fused_forward(x, lengths)

    def check_inputs(self, x, lengths):
        if x.dim() != 3 or x.shape[2] != self.input_size:
            raise MiniBertError(f"LSTM input of shape {tuple(x.shape)}: expected (batch, length, {self.input_size})")
        B, T, _ = x.shape
        if (not isinstance(lengths, torch.Tensor) or lengths.shape != (B,)
                or lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool):
            raise MiniBertError(f"LSTM lengths {lengths!r}: expected an integer tensor of shape ({B},)")
        lengths = lengths.to("cpu", torch.int64)  # pack_padded_sequence wants them on the CPU
        if B and (lengths.min() < 1 or lengths.max() > T):
            raise MiniBertError(f"LSTM lengths from {lengths.min().item()} to {lengths.max().item()}: expected "
                                f"every length in 1..{T} (each sequence needs a real token; T = {T})")
        return lengths

    def written_out_forward(self, x, lengths):
        outputs, finals = [], []
        for suffix in self.direction_suffixes():
            out, h = run_direction(x, lengths,
                                   getattr(self, f"weight_ih_l0{suffix}"), getattr(self, f"weight_hh_l0{suffix}"),
                                   getattr(self, f"bias_ih_l0{suffix}"), getattr(self, f"bias_hh_l0{suffix}"),
                                   reverse=suffix == "_reverse")
            outputs.append(out)                                      # (B, T, H)
            finals.append(h)                                         # (B, H)
        return torch.cat(outputs, dim=-1), torch.cat(finals, dim=-1)  # (B, T, D*H), (B, D*H)

    def fused_forward(self, x, lengths):
        """The same computation in torch's fused kernel (cuDNN on a GPU).

        pack_padded_sequence keeps only the real positions, so the kernel
        never sees padding: the backward direction starts at each sequence's
        last real token. enforce_sorted=False lets it sort the batch by length
        itself and undo the sort in the results."""
        T = x.shape[1]
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        kernel = kernel_for(self.input_size, self.hidden_size, self.bidirectional)
        packed_outputs, (h_n, _) = torch.func.functional_call(kernel, dict(self.named_parameters()), (packed,))
        outputs, _ = pad_packed_sequence(packed_outputs, batch_first=True, total_length=T)  # zeros at padding
        return outputs, torch.cat(list(h_n), dim=-1)                 # (B, T, D*H); h_n (D, B, H) -> (B, D*H)


# ----------------------------------------------------------------------------
# The classifier ([Tang] Section 3; d-bert's BiRNNModel and SiameseRNNModel)
# ----------------------------------------------------------------------------


class BiLSTMClassifier(nn.Module):
    """Embeddings -> BiLSTM -> sentence vector -> fc1 -> ReLU -> dropout -> fc2.

    For a pair, both sentences go through the same embeddings and BiLSTM
    (siamese), and fc1 reads [h1, h2, h1 * h2, |h1 - h2|] ([Tang] Section 3,
    after the GLUE baselines of Wang et al. 2018; d-bert's code puts |h1 - h2|
    before h1 * h2, which is the same model with fc1's columns permuted)."""

    def __init__(self, config):
        super().__init__()
        if not isinstance(config, StudentConfig):
            raise MiniBertError(f"BiLSTMClassifier: expected a StudentConfig, got {type(config).__name__}")
        check_student_fields(config.to_dict(), "StudentConfig")     # fields may have been changed since
        self.config = config
        H = config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=config.padding_id)
        self.embedding.weight.requires_grad_(config.embeddings_mode != "static")     # "static": never trained
        channels = 1
        if config.embeddings_mode == "multichannel":     # d-bert's second, frozen channel (model/base.py)
            self.static_embedding = nn.Embedding(config.vocab_size, config.embedding_dim,
                                                 padding_idx=config.padding_id).requires_grad_(False)
            channels = 2
        self.lstm = LSTM(channels * config.embedding_dim, H, bidirectional=True)
        features = 8 * H if config.pair else 2 * H
        self.fc1 = nn.Linear(features, config.fc_size)
        self.dropout = nn.Dropout(config.dropout)
        self.fc2 = nn.Linear(config.fc_size, config.num_classes)
        self.reset_embedding()

    def reset_embedding(self):
        """Tang et al.'s "rand" embeddings: every vector U(-0.25, 0.25)
        (d-bert, model/base.py). The padding vector is then set to zero: it is
        never read (padding is packed away), and zero says so."""
        with torch.no_grad():
            nn.init.uniform_(self.embedding.weight, -0.25, 0.25)
            self.embedding.weight[self.config.padding_id].zero_()
        self.copy_static_channel()

    @torch.no_grad()
    def copy_static_channel(self):
        """multichannel: both channels start from the same vectors; only the
        trained one moves. (Call it again after filling the trained table.)"""
        if self.config.embeddings_mode == "multichannel":
            self.static_embedding.weight.copy_(self.embedding.weight)

    def embed(self, input_ids):
        """The word vectors (B, T, E); multichannel: the frozen and the trained
        ones side by side (B, T, 2E)."""
        if self.config.embeddings_mode != "multichannel":
            return self.embedding(input_ids)
        return torch.cat([self.static_embedding(input_ids), self.embedding(input_ids)], dim=-1)

    def encode(self, input_ids, attention_mask):
        """One sentence per row, right-padded -> its vector (B, 2H): the
        BiLSTM's final states, or with pooling "max" the maximum of its
        outputs over the real positions."""
        lengths = lengths_from_mask(input_ids, attention_mask)       # (B,)
        outputs, final = self.lstm(self.embed(input_ids), lengths)   # (B, T, 2H), (B, 2H)
        if self.config.pooling == "final":
            return final
        # Padded outputs are zero, and zero could beat a real output that is
        # negative everywhere in a column: give them -inf so they never win.
        real = attention_mask.bool().unsqueeze(-1)                   # (B, T, 1)
        return outputs.masked_fill(~real, float("-inf")).amax(dim=1)  # (B, 2H)

    def forward(self, input_ids, attention_mask, input_ids_b=None, attention_mask_b=None):
        """Logits (B, K). Sentence pairs (config.pair) pass the second
        sentence as input_ids_b / attention_mask_b."""
        if self.config.pair != (input_ids_b is not None) or (input_ids_b is None) != (attention_mask_b is None):
            expected = ("input_ids_b and attention_mask_b (a pair model)" if self.config.pair
                        else "no input_ids_b or attention_mask_b (a single-sentence model)")
            raise MiniBertError(f"BiLSTMClassifier.forward: expected {expected}")
        h1 = self.encode(input_ids, attention_mask)                  # (B, 2H)
        if self.config.pair:
            h2 = self.encode(input_ids_b, attention_mask_b)          # (B, 2H), same weights (siamese)
            features = torch.cat([h1, h2, h1 * h2, (h1 - h2).abs()], dim=-1)   # (B, 8H)
        else:
            features = h1                                            # (B, 2H)
        hidden = self.dropout(F.relu(self.fc1(features)))            # (B, fc_size)
        return self.fc2(hidden)                                      # (B, K)

    def num_parameters(self):
        """All parameters, the embedding table included (Tang et al.'s
        parameter counts compare whole models)."""
        return sum(p.numel() for p in self.parameters())


def lengths_from_mask(input_ids, attention_mask):
    """The number of real tokens per row, (B,), from a right-padded mask
    (ones, then zeros). A mask with a hole or left padding is an error: the
    LSTM reads the first `length` positions of each row."""
    if attention_mask.shape != input_ids.shape or input_ids.dim() != 2:
        raise MiniBertError(f"attention_mask of shape {tuple(attention_mask.shape)} for input_ids of shape "
                            f"{tuple(input_ids.shape)}: expected both (batch, length)")
    mask = attention_mask.long()
    lengths = mask.sum(dim=1)                                        # (B,)
    positions = torch.arange(mask.shape[1], device=mask.device)
    if not torch.equal(mask, (positions < lengths.unsqueeze(1)).long()):
        raise MiniBertError("attention_mask: expected each row to be ones then zeros (right padding)")
    return lengths
