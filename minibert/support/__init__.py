"""Support code: what makes the lessons safe and practical, and what a student may skip.

The lesson modules (one level up) call these in one line each. The checkpoint
formats live beside them in minibert/checkpoints/.

This __init__ holds the exceptions. `MiniBertError` is the one exception
raised for bad input: every reader, loader and check raises it with a message
that names the file, field or argument and says what was expected, and the
scripts print that message on one line and exit with status 1, so a user
never sees a bare traceback for a mistake in their input. A lesson raises
`ParameterError`, which names its parameter; `Terminated` is SIGTERM.

One module per concern:

Files and folders, written safely:

    files.py            atomic writes (temporary name, then rename), JSON files; fingerprints (the one hash of
                        a record, of a file, of a tokenizer); input files that are pipes, read once
    outputs.py          safe_run, the one call that makes a run safe (lock, checks, pipes, resume); a model
                        folder written as one unit (and what it holds), a JSON record in it
    caches.py           slow work done once, keyed by a hash of its inputs: the pretraining corpus tokenized
                        (pretraining.py), a distillation's transfer set and teacher logits (distillation.py)

File formats:

    tokenizer_files.py  tokenization.py: finding, reading and writing a folder's tokenizer files; the
                        `tokenizers` pipelines (WordPiece, unigram, BPE) assembled and loaded
    protobuf.py         the protobuf wire format (TF index entries); SentencePiece `.model` files
    task_files.py       minibert/tasks/: what every task's file reader shares (numbered lines, one-line
                        errors, the format of a first line, TSV rows, JSON fields) and the held-out split
    student_files.py    distillation.py: the POS-tagged file, word vectors, the student's
                        vocab.txt and padded batches, a distillation run's settings and files

Downloads:

    hub.py              a name -> a folder: the bundled model, a path, a hub id (huggingface_hub), or
                        Google's TF release archives (download, check CRCs, paths and sizes, unpack)

Command line and runtime:

    cli.py              the scripts' flag checks and one-line `error: ...` exits; metrics as a small table
    plots.py            the scripts' --plot figures (matplotlib, optional)
    runtime.py          `--device` -> torch.device, moving batches, bfloat16 autocast; seeds mixed from
                        (seed, step, ...), so runs resume bit for bit

Checks of values where they enter:

    checks.py           the type and range of every config field (model.py, deberta.py, lstm.py), a
                        duplicated model's layer order (duplication.py), what the official metrics are given
                        (metrics.py); imports only this __init__, so the model files stay free of file formats
"""

import re


class MiniBertError(Exception):
    """Bad input: a wrong file, field or argument. The message says which and why."""


class ParameterError(MiniBertError):
    """A value a lesson's own arithmetic cannot use. The message starts with
    the parameter's name ("k 0: expected a positive integer"); a script's
    error names the flag that gave the value instead (support/cli.FLAGS)."""

    @property
    def parameter(self):
        return re.match(r"\w*", str(self)).group()


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill PID`) while a run holds its --output: raised where
    Ctrl-C raises KeyboardInterrupt, so a folder being replaced is put back
    the same way (outputs.write_folder); the script exits with 143."""
