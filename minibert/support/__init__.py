"""Support code: what makes the lessons safe and practical, and what a student may skip.

    errors.py     MiniBertError, the one exception raised for bad input
    config_checks.py  BertConfig's and DebertaConfig's field checks (type and range of every field)
    fileio.py     atomic writes (temporary name, then rename), JSON files
    cli.py        the scripts' flag checks and one-line `error: ...` exits
    devices.py    `--device` -> torch.device; moving batches to it
    seeds.py      seeds mixed from (seed, step, ...), so runs resume bit for bit
    hub.py        a name -> a folder: the bundled model, a path, or a download into the cache
    protobuf.py   the protobuf wire format (TF index entries, SentencePiece models)

The lesson modules (one level up) call these in one line each. The checkpoint
formats live beside them in minibert/checkpoints/.
"""
