"""Seeds mixed from several numbers, so every random draw can be named.

Training re-seeds dropout from (seed, "dropout", step, rank) and pretraining
data draws each batch from (seed, "batch", epoch, index): a resumed or
distributed run then makes exactly the draws an uninterrupted single-process
run would have made, with no random state stored anywhere.
"""

import hashlib

import torch


def seed_from(*numbers):
    """One 63-bit seed from several integers or strings: the first 8 bytes of
    the SHA-256 of their repr (a hash, so nearby inputs give unrelated seeds)."""
    digest = hashlib.sha256(repr(numbers).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def generator_for(*numbers):
    """A torch.Generator seeded with seed_from(*numbers)."""
    return torch.Generator().manual_seed(seed_from(*numbers))
