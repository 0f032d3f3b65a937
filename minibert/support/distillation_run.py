"""Support for minibert/distillation.py: the bookkeeping of a distillation
run. What student.json records about the run, what --resume checks before it
continues a killed run, the line printed at the start, and the parameter
counts the summary reports."""

import dataclasses
import hashlib
from collections import namedtuple
from pathlib import Path

# A finetune.py classifier as distillation.load_teacher returns it: the model, its task object, its
# tokenizer, task.json, and its folder.
Teacher = namedtuple("Teacher", "model task tokenizer record folder")


def run_record(settings, teacher_folder, distilled, train_file, eval_file, embeddings_start, n_examples, n_transfer):
    """What student.json records about the run (and the summary repeats)."""
    return {"teacher": str(teacher_folder) if teacher_folder is not None else None, "distilled": distilled,
            "train_file": str(train_file), "evaluated_on": str(eval_file) if eval_file else None,
            "embeddings_start": embeddings_start, "train_examples": n_examples, "transfer_examples": n_transfer,
            "settings": dataclasses.asdict(settings)}


def vocabulary_fingerprint(tokenizer):
    """A SHA-256 of the student's vocabulary, in id order."""
    if tokenizer.kind == "words":
        words = tokenizer.words
    else:
        words = tokenizer.tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))
    return hashlib.sha256("\n".join(words).encode()).hexdigest()


# Settings that do not change what is trained: how fast, where the cache is.
NOT_COMPARED = ("cache_dir", "teacher_batch_size", "eval_batch_size", "max_minutes")


def resume_config(task, settings, total_steps, model, tokenizer, record=None):
    """training.train's run_config: what --resume checks is unchanged (the
    student's config and vocabulary, the steps, the batches, the seed, and
    under "settings", by flag name, every setting that shapes the run: the
    learning rate, alpha, the optimizer, the teacher, the training file, ...)."""
    from minibert.support.outputs import file_identity
    flags = {"--task": task.name}
    for key, value in dataclasses.asdict(settings).items():
        if key == "augment":
            flags["--no-augment"] = not value
        elif key == "freeze_embeddings":
            continue            # resolved from --embeddings-mode (static), which names the change rightly
        elif key not in NOT_COMPARED:
            flags[f"--{key.replace('_', '-')}"] = value
    if record is not None:
        teacher = record["teacher"]
        weights = Path(teacher) / "model.safetensors" if teacher is not None else None
        flags["--teacher"] = file_identity(weights) if weights is not None and weights.is_file() else teacher
        flags["--no-teacher"] = not record["distilled"]
        flags["--train"] = file_identity(record["train_file"])
    model_config = model.config.to_dict()
    if model_config.get("embeddings_mode") != "multichannel":    # one table, as before the field: older
        model_config.pop("embeddings_mode", None)                # checkpoints still resume (the flag tells the mode)
    return {"task": task.name, "total_steps": total_steps, "batch_size": settings.batch_size, "seed": settings.seed,
            "grad_accum_steps": 1, "model_config": model_config,
            "vocabulary_fingerprint": vocabulary_fingerprint(tokenizer), "settings": flags}


# Tang et al.'s SST-2 student without its embeddings, "0.96M" (Table 3; --paper-config sst2): a BiLSTM on 600-d
# input (multichannel), 150 per direction, 2 x 4 x (150 x (600 + 150) + 2 x 150) = 902,400 (torch's two biases),
# fc1 300 x 200 + 200 = 60,200, fc2 200 x 2 + 2 = 402.
PAPER_SST2 = 963_002


def parameter_counts(student, teacher=None):
    """The student's parameters, all and without the embedding tables (Tang et
    al.'s 0.96M, Table 3, is the second kind), and the teacher's."""
    total = student.num_parameters()
    tables = sum(p.numel() for name, p in student.named_parameters() if "embedding" in name)   # multichannel: 2
    return {"parameters": total, "parameters_without_embeddings": total - tables, "paper_parameters": PAPER_SST2,
            "teacher_parameters": sum(p.numel() for p in teacher.model.parameters()) if teacher else None}


def describe_run(task, record, steps_per_epoch, total_steps, counts):
    """The line printed when training starts."""
    return (f"{task.name}: {record['train_examples']:,} training examples, {record['transfer_examples']:,} in the "
            f"transfer set, {steps_per_epoch:,} batches of {record['settings']['batch_size']} per epoch, "
            f"{total_steps:,} steps; student: {counts['parameters']:,} parameters "
            f"({counts['parameters_without_embeddings']:,} without the embeddings; Tang et al.'s SST-2 student: "
            f"{PAPER_SST2:,}, 0.96M), "
            f"embeddings from {record['embeddings_start']}")
