"""Support code: what makes the lessons safe and practical, and what a student may skip.

The lesson modules (one level up) call these in one line each. The checkpoint
formats live beside them in minibert/checkpoints/.

Shared by every lesson and script:

    errors.py                  MiniBertError, the one exception raised for bad input
    fileio.py                  atomic writes (temporary name, then rename), JSON files
    folders.py                 a model folder written as one unit (and what it holds); a JSON record in it
    cli.py                     the scripts' flag checks and one-line `error: ...` exits
    inputs.py                  input files that are pipes, read once; the message for a path that is no file
    reports.py                 metrics as a small table on screen, results ready for JSON
    outputs.py                 safe_run, the one call that makes a run safe (lock, checks, pipes, resume)
    plots.py                   the scripts' --plot figures (matplotlib, optional)
    fingerprints.py            a tokenizer's fingerprint, so a replaced vocab.txt is refused
    devices.py                 `--device` -> torch.device; moving batches to it
    seeds.py                   seeds mixed from (seed, step, ...), so runs resume bit for bit
    hub.py                     a name -> a folder: the bundled model, a path, a hub id (huggingface_hub)
    google_archives.py         Google's TF release archives: download, check (CRCs, paths, sizes), unpack
    protobuf.py                the protobuf wire format (TF index entries, SentencePiece models)

For one lesson, or one group of lessons, each:

    config_checks.py           model.py, deberta.py: the type and range of every config field
    layer_orders.py            duplication.py: layer indices, the depth limit, a pretrained source
    fast_tokenizers.py         tokenization.py: the `tokenizers` pipelines (WordPiece, unigram, BPE) and loading
    tokenizer_files.py         tokenization.py: finding, reading and writing a folder's tokenizer files
    sentencepiece_model.py     tokenization.py: the pieces and settings of a SentencePiece `.model` file
    token_cache.py             pretraining_data.py: the corpus read, split into sentences and tokenized once
    metric_inputs.py           metrics.py: the checks on what the official metrics are given
    task_files.py              minibert/tasks/: what every task's file reader shares (numbered lines, one-line
                               errors, the format of a first line, TSV rows, JSON fields) and the held-out split
    distillation/              lstm.py, augment.py, distillation.py: the student's config, inputs, word vectors,
                               transfer cache and run settings (its __init__.py maps them)
"""
