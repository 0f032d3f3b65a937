"""Support code: what makes the lessons safe and practical, and what a student may skip.

The lesson modules (one level up) call these in one line each. The checkpoint
formats live beside them in minibert/checkpoints/. One module per concern:

Files and folders, written safely:

    errors.py           MiniBertError, the one exception raised for bad input
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
                        (metrics.py); imports only errors.py, so the model files stay free of file formats
"""
