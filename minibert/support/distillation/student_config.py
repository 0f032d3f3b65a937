"""Support for minibert/lstm.py: the checks of the fields of the student's
config (lstm.StudentConfig), so that a config that exists is a valid one and a
bad student.json ends in one line naming the file, the field, its value and
what was expected."""

import math

from minibert.support.errors import MiniBertError

REQUIRED = ("vocab_size", "num_classes")
EMBEDDINGS_MODES = ("rand", "static", "nonstatic", "multichannel")    # the authors' names (d-bert model/base.py)
# The widest published word vectors are 300-d (word2vec, GloVe, fastText) and BERT-large's embeddings 1,024-d; a
# width beyond this is a typo or a broken file (a vectors header "1 100000000000" asked for 18.4 TB).
MAX_EMBEDDING_DIM = 10_000


def check_student_fields(values, source):
    """Every field has the type and range the model needs, or a MiniBertError
    names the source, the field, its value and what was expected."""
    def fail(name, expected):
        raise MiniBertError(f"{source}: student config field '{name}' = {values[name]!r}: expected {expected}")

    def is_int(value):
        return isinstance(value, int) and not isinstance(value, bool)

    for name in ("vocab_size", "num_classes", "embedding_dim", "hidden_size", "fc_size"):
        if not is_int(values[name]) or values[name] < 1:
            fail(name, "a positive integer")
    if not isinstance(values["pair"], bool):
        fail("pair", "true or false")
    if values["embeddings_mode"] not in EMBEDDINGS_MODES:
        fail("embeddings_mode", "'rand', 'static', 'nonstatic' or 'multichannel'")
    if values["pooling"] not in ("final", "max"):
        fail("pooling", "'final' or 'max'")
    dropout = values["dropout"]
    if (not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not math.isfinite(dropout)
            or not 0 <= dropout < 1):
        fail("dropout", "a probability in [0, 1)")
    if not is_int(values["padding_id"]) or not 0 <= values["padding_id"] < values["vocab_size"]:
        fail("padding_id", f"an integer in 0..{values['vocab_size'] - 1} (below vocab_size)")


def student_fields_from(values, source, defaults):
    """The fields of a dict read from `source` (a file name, for the messages),
    completed with `defaults` and checked: unknown fields are errors (a typo
    must not silently fall back to a default), and so are missing REQUIRED ones."""
    if not isinstance(values, dict):
        raise MiniBertError(f"{source}: expected an object of student config fields, got {type(values).__name__}")
    names = [*REQUIRED, *defaults]
    unknown = sorted(set(values) - set(names))
    if unknown:
        raise MiniBertError(f"{source}: unknown student config field '{unknown[0]}' (known: {', '.join(names)})")
    for name in REQUIRED:
        if name not in values:
            raise MiniBertError(f"{source}: student config field '{name}' is missing")
    merged = {**defaults, **values}
    check_student_fields(merged, source)
    return merged
