"""The pretraining run that train_mlm.py starts: the corpus and its token
cache, the output folder, resume, and the model folder written at the end,
around the lesson's objective (minibert/pretraining.py) and the loop
(runs.training.train).

One loop pretrains three architectures, told apart by the config's family
(checkpoints/families.py):
  * BERT and ALBERT (BertConfig -> BertModel): MLM, optionally with NSP or SOP.
  * DeBERTa (DebertaConfig -> DebertaModel, minibert/deberta.py): MLM only.
    The official pre-training code (mlm_task.py, docs/deberta.md 2) has no
    sentence-pair task, so neither has this one; DeBERTaV3's own objective,
    ELECTRA's replaced-token detection, is not this one either.

The output folder: while a run goes on it holds checkpoint.pt (with the
vocabulary inside, so --resume needs nothing else) and the token cache; the
model and its tokenizer files (config.json, model.safetensors, vocab.txt,
tokenizer.json, ...) are written only when the run has finished, as one unit
(support/outputs.write_folder). A run that fails therefore never pairs the
weights already in a folder with a new vocabulary.
"""

import shutil
from pathlib import Path

import torch
from tqdm.auto import tqdm

from minibert.checkpoints import read_config, save_pretrained
from minibert.checkpoints.families import family_of
from minibert.pretraining import MaskedLMObjective, evaluate_mlm
from minibert.pretraining_data import SENTENCE_END, PretrainingBatches, pack_blocks, split_sentences
from minibert.support.caches import TokenCache, build_token_cache, check_token_cache, is_token_cache
from minibert.support.errors import MiniBertError
from minibert.support.files import as_given, not_a_file, tokenizer_fingerprint, vocabulary
from minibert.support.outputs import CHECKPOINT, MODEL_FOLDER_FILES, file_identity, write_folder
from minibert.tokenization import Tokenizer, wordpiece_tokenizer
from minibert.runs.training import Prefetched, TrainingConfig, load_checkpoint, setup_context, train

# [CLS] A [SEP] B [SEP]: sequences are packed with max_seq_len - 3 tokens of text (pack_blocks).
MIN_SEQ_LEN = 4


def corpus_batches(files, tokenizer, cache_dir, max_seq_len, batch_size, seed, pair_objective, mask_prob,
                   whole_word, progress=True):
    if len(files) == 1 and is_token_cache(files[0]):
        cache = TokenCache(check_token_cache(files[0], tokenizer))
    elif any(is_token_cache(f) for f in files):
        raise MiniBertError("a prepared token cache must be the only --corpus (or --heldout-corpus) entry")
    else:
        cache = TokenCache(build_token_cache(files, tokenizer, cache_dir, split_sentences, SENTENCE_END.pattern,
                                             progress=progress))
    blocks = pack_blocks(cache, max_seq_len - 3)
    return PretrainingBatches(cache, blocks, tokenizer, max_seq_len, batch_size, seed, pair_objective,
                              mask_prob, whole_word)


def text_files(paths, what):
    """Expand folders into their *.txt files (sorted); keep files as given."""
    files = []
    for path in map(Path, paths):
        if is_token_cache(path):
            files.append(path)  # a corpus tokenized earlier (see build_token_cache)
        elif path.is_dir():
            found = sorted(path.glob("*.txt"))
            if not found:
                raise MiniBertError(f"{what} {path}: folder has no *.txt files")
            files += found
        elif path.is_file():
            files.append(path)
        else:                            # missing, or a pipe or device (support/files.py copies those once)
            raise MiniBertError(not_a_file(path, what, folders=True))
    return files


def split_heldout(files, heldout_names):
    """Hold out the corpus files whose names contain one of `heldout_names`."""
    heldout = [f for f in files if any(name in f.name for name in heldout_names)]
    missing = [n for n in heldout_names if not any(n in f.name for f in files)]
    if missing:
        raise MiniBertError(f"--heldout {missing[0]!r}: no corpus file name contains it")
    return [f for f in files if f not in heldout], heldout


# ----------------------------------------------------------------------------
# The output folder
# ----------------------------------------------------------------------------


def resume_tokenizer(output, do_lower_case, vocab_file=None):
    """The tokenizer to --resume with: the vocabulary stored in the checkpoint,
    so that resuming never depends on a vocab.txt that may have changed since.
    A --vocab given as well must be that same vocabulary."""
    path = Path(output) / CHECKPOINT
    stored = load_checkpoint(path).get("run_config", {}).get("vocabulary")
    if not isinstance(stored, dict) or stored.get("kind") != "wordpiece":
        raise MiniBertError(f"--resume: {path} holds no WordPiece vocabulary, so train_mlm.py did not write it; "
                            f"start a new run in another folder")
    if stored["do_lower_case"] != do_lower_case:
        flag = "without --cased" if stored["do_lower_case"] else "with --cased"
        raise MiniBertError(f"--resume: {path} was made {flag}; resume it {flag}")
    tokenizer = Tokenizer.from_vocab({token: i for i, token in enumerate(stored["tokens"])}, do_lower_case,
                                     source=f"the vocabulary stored in {path}")
    if vocab_file is not None:
        given = wordpiece_tokenizer(vocab_file, do_lower_case)
        if tokenizer_fingerprint(given) != tokenizer_fingerprint(tokenizer):
            raise MiniBertError(f"--resume: --vocab {vocab_file} is not the vocabulary {path} was trained with")
    return tokenizer


def make_folder(folder, flag="--output"):
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise MiniBertError(f"{flag} {folder}: cannot make this folder ({e.strerror})") from None


def save_model_folder(model, tokenizer, output):
    """config.json, model.safetensors and the tokenizer files, written as one
    unit (support/outputs.write_folder): into a hidden sibling of `output`,
    which then replaces it, with the run's checkpoint.pt, its token cache and
    a user's own files carried over. A kill leaves the old folder or the new
    one, never new weights beside an old vocabulary."""
    write_folder(output, lambda staging: save_pretrained(model, staging, tokenizer=tokenizer),
                 leave_behind=MODEL_FOLDER_FILES)     # --force over another model: none of its files stays


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------


def read_model_config(config_file):
    """A BertConfig (bert, albert) or a DebertaConfig (deberta, deberta-v2)
    from a config file, told apart by its model_type: the loader's own
    reader (minibert.checkpoints.read_config), which knows every kind."""
    return read_config(config_file, with_deberta=True)


def check_pair_objective(model_config, pair_objective):
    family = family_of(model_config)
    if not family.with_pair_head and pair_objective != "none":
        raise MiniBertError(f"--pair-objective {pair_objective}: {family.name} pretrains with MLM only (no NSP or "
                            f"SOP); use --pair-objective none")


def build_model(model_config, pair_objective):
    """A freshly initialised model for pretraining, of the config's family
    (checkpoints/families.py): BERT/ALBERT with the MLM head (plus the pooler
    and the pair head for NSP/SOP), or DeBERTa with the MLM head it reads
    through the Enhanced Mask Decoder. (pretrain has checked pair_objective
    against the config.)"""
    family = family_of(model_config)
    with_pair = pair_objective != "none"
    heads = dict(with_pooler=with_pair, with_mlm_head=True)
    if family.with_pair_head:
        heads["with_pair_head"] = with_pair
    return family.model_class(model_config, **heads)


def check_max_seq_len(max_seq_len, model_config):
    if max_seq_len < MIN_SEQ_LEN:
        raise MiniBertError(f"--max-seq-len {max_seq_len}: too short to hold [CLS], a token and [SEP] (with room "
                            f"for a second [SEP]); expected at least {MIN_SEQ_LEN}")
    if max_seq_len > model_config.max_position_embeddings:
        raise MiniBertError(f"--max-seq-len {max_seq_len}: longer than the model's max_position_embeddings "
                            f"({model_config.max_position_embeddings}); expected at most that")


def pretrain(corpus, output, model_config, tokenizer, *, heldout=(), max_seq_len=128, batch_size=128,
             grad_accum_steps=1, steps=10000, learning_rate=5e-4, warmup_steps=1000, weight_decay=0.01,
             max_grad_norm=1.0, seed=0, pair_objective="none", mask_prob=0.15, whole_word=False,
             eval_every=1000, eval_batches=20, checkpoint_every=1000, max_minutes=None, resume=False,
             device="auto", num_workers=0, cache_dir=None, progress=True, bf16=False, keep_checkpoint=False,
             optimizer="adamw", schedule="linear", budget_minutes=None, warmup_fraction=0.0, clock=None,
             resume_flags=None):
    """Pretrain a model from scratch and save it in Hugging Face layout in
    `output`. Returns the training summary. `model_config` says which: a
    BertConfig pretrains BERT or ALBERT with MLM (+ NSP/SOP), a DebertaConfig
    a DeBERTa with MLM through the Enhanced Mask Decoder (pair_objective
    must be "none").

    resume=True continues from output/checkpoint.pt (train_mlm.py's safe_run
    has said whether there is one: support/outputs.py). checkpoint.pt (three times the
    model's size: the weights and Adam's two moments) is removed once the
    run has reached `steps` and the model is saved, unless keep_checkpoint;
    a run stopped early (max_minutes) keeps it to be resumed. The token
    cache goes with it when it is the default, output/cache, and `steps` is
    not 0 (a run of 0 steps only prepares, and its cache is what it is for),
    so the model folder holds only the model. bf16: train
    under bfloat16 autocast (any device; weights stay float32), as
    finetune.py --bf16; without it, float32 throughout. optimizer: "adamw"
    (torch's) or "bert-adam" (Google's, without bias correction: training.BertAdam).

    schedule: the learning rate's shape (training.SCHEDULES), over `steps`
    ("linear": warm-up over `warmup_steps`, BERT's). budget_minutes (with
    steps=None): the shape runs over wall-clock progress instead, p = time
    trained / budget ("linear": warm-up over `warmup_fraction` of it), and
    the run ends when the budget does, its rate at 0. The budget counts the
    training loop (steps, evaluations, checkpoints), not the preparation
    (vocabulary, token cache) nor the model saved at the end; a resumed run
    goes on from the budget its checkpoint recorded (runs/training.py).
    clock() -> seconds: what the budget is read on (tests give a fake one).
    resume_flags: more {flag: value} that shape the run (train_mlm.py: the
    flags that make the model config), which --resume must find unchanged."""
    if (steps is None) == (budget_minutes is None):
        raise MiniBertError(f"steps {steps!r}, budget_minutes {budget_minutes!r}: give one of the two, the "
                            f"number of steps or the time budget that ends the run")
    context = setup_context(device)
    output = Path(output)
    if model_config.vocab_size != tokenizer.vocab_size:
        raise MiniBertError(f"model config vocab_size {model_config.vocab_size} != the vocabulary's "
                            f"{tokenizer.vocab_size} tokens")
    check_max_seq_len(max_seq_len, model_config)
    check_pair_objective(model_config, pair_objective)
    make_folder(output)
    own_cache = not cache_dir                               # output/cache: removed with checkpoint.pt
    cache_dir = Path(cache_dir) if cache_dir else output / "cache"
    global_batch = batch_size  # rows per micro-batch, all processes together
    if global_batch % context.world_size:
        raise MiniBertError(f"--batch-size {batch_size} must divide evenly over {context.world_size} processes")

    # Rank 0 tokenizes first and the others wait, so the cache is built once.
    if context.distributed and not context.is_main:
        torch.distributed.barrier()
    train_batches = corpus_batches(corpus, tokenizer, cache_dir, max_seq_len, global_batch, seed,
                                   pair_objective, mask_prob, whole_word, progress and context.is_main)
    heldout_batches = (corpus_batches(heldout, tokenizer, cache_dir, max_seq_len, 64, seed + 1, pair_objective,
                                      mask_prob, whole_word, progress and context.is_main) if heldout else None)
    if context.distributed and context.is_main:
        torch.distributed.barrier()

    torch.manual_seed(seed)
    model = build_model(model_config, pair_objective)
    run_config = {"model_config": model_config.to_dict(), "total_steps": steps, "batch_size": batch_size,
                  "seed": seed, "grad_accum_steps": grad_accum_steps, "max_seq_len": max_seq_len,
                  "pair_objective": pair_objective, "mask_prob": mask_prob, "whole_word": whole_word,
                  "learning_rate": learning_rate, "warmup_steps": warmup_steps,
                  "corpus": [as_given(str(f)) for f in corpus], "heldout": [as_given(str(f)) for f in heldout],
                  "vocabulary_fingerprint": tokenizer_fingerprint(tokenizer),   # --resume compares it
                  "vocabulary": {"kind": tokenizer.kind, "do_lower_case": tokenizer.do_lower_case,
                                 "tokens": vocabulary(tokenizer)},           # --resume rebuilds the tokenizer
                  # --resume refuses a run where any of these differs (check_same_run), naming the flag:
                  # each shapes the model a run ends with, and a resumed run must end as one run would.
                  "flags": {"--corpus": [file_identity(f) for f in corpus],
                            "--heldout-corpus": [file_identity(f) for f in heldout],
                            "--max-seq-len": max_seq_len, "--pair-objective": pair_objective,
                            "--mask-prob": mask_prob, "--whole-word-masking": whole_word, "--steps": steps,
                            "--batch-size": batch_size, "--grad-accum": grad_accum_steps, "--lr": learning_rate,
                            "--warmup": warmup_steps, "--weight-decay": weight_decay,
                            "--optimizer": optimizer, "--max-grad-norm": max_grad_norm, "--seed": seed,
                            "--schedule": schedule, "--budget-minutes": budget_minutes,
                            "--warmup-fraction": warmup_fraction, "--bf16": bf16, **(resume_flags or {})}}
    config = TrainingConfig(total_steps=steps, learning_rate=learning_rate, weight_decay=weight_decay,
                            warmup_steps=warmup_steps or 0, max_grad_norm=max_grad_norm,
                            grad_accum_steps=grad_accum_steps, seed=seed, eval_every=eval_every,
                            checkpoint_every=checkpoint_every, max_minutes=max_minutes, bf16=bf16,
                            optimizer=optimizer, schedule=schedule, budget_minutes=budget_minutes,
                            warmup_fraction=warmup_fraction)
    checkpoint_path = output / CHECKPOINT
    start = load_checkpoint(checkpoint_path)["step"] if resume else 0
    batches = train_batches
    if num_workers > 0:
        batches = Prefetched(train_batches, start * grad_accum_steps, steps and steps * grad_accum_steps, num_workers)
    evaluate = None
    if heldout_batches is not None:
        evaluate = lambda m: evaluate_mlm(m, heldout_batches, eval_batches, context.device, progress=progress)
    if context.is_main:
        length = (f"{steps:,} steps = {steps * grad_accum_steps / len(train_batches):.2f} epochs" if steps is not None
                  else f"steps until the budget of {budget_minutes:g} minutes is spent ({schedule} schedule)")
        tqdm.write(f"{model.num_parameters():,} parameters; {len(train_batches.blocks):,} training sequences, "
                   f"{len(train_batches):,} batches per epoch; {length}")
    summary = train(model, batches, MaskedLMObjective(pair_objective), config, context, checkpoint_path,
                    run_config=run_config, evaluate=evaluate, resume=resume, progress=progress, clock=clock)
    if context.is_main:
        save_model_folder(model.to("cpu"), tokenizer, output)
        if summary["finished"] and not keep_checkpoint:   # nothing left to resume
            # The cache first: a kill between the two leaves the checkpoint, which --resume finishes
            # (rebuilding the cache), never a finished folder with the cache left in it.
            if own_cache and steps != 0:     # a run of 0 steps only prepares: its cache is what it is for
                shutil.rmtree(cache_dir, ignore_errors=True)
            checkpoint_path.unlink(missing_ok=True)
    summary["parameters"] = model.num_parameters()
    summary["run_config"] = {k: v for k, v in run_config.items() if k != "vocabulary"}  # the file has it
    return summary
