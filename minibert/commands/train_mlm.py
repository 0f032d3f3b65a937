r"""Pretrain a BERT, ALBERT or DeBERTa with masked-LM from raw text files.

quick example (44 s on 2 idle CPU cores; a tiny BERT on two books, one held out):

    python train_mlm.py --corpus ../shared/data/corpus/pg35_time_machine.txt \
        ../shared/data/corpus/pg46_christmas_carol.txt \
        --heldout-corpus ../shared/data/corpus/pg11_alice_in_wonderland.txt --vocab-size 4000 \
        --layers 2 --hidden 128 --heads 2 --intermediate 512 --batch-size 32 --steps 200 --warmup 20 \
        --lr 1e-3 --eval-every 100 --output runs/quick-mlm --plot runs/quick-mlm.png

A bigger run, the bundled model's shape (its exact recipe: docs/results.md 1):

    python train_mlm.py --corpus ../shared/data/corpus --heldout pg11_ pg84_ pg1661_ \
        --vocab-size 12000 --layers 6 --hidden 256 --heads 4 --intermediate 1024 \
        --batch-size 256 --lr 1e-3 --steps 20000 --output runs/gutenberg

On a time budget, the learning rate keyed to the clock (instead of --steps): one hour
on 2 CPU cores, the best recipe measured so far (41.82% held-out masked-token accuracy,
perplexity 24.31, over three seeds; docs/results.md 11):

    python train_mlm.py --corpus ../shared/data/corpus --heldout pg11_ pg84_ pg1661_ \
        --vocab minibert/pretrained/minibert-gutenberg/vocab.txt --layers 4 --hidden 128 --heads 2 \
        --intermediate 512 --batch-size 32 --lr 2e-3 --dropout 0 --budget-minutes 60 \
        --eval-every 2000 --eval-batches 40 --output runs/cpu-hour

--budget-minutes M runs the schedule over progress p = time trained / M
rather than over steps (Izsak et al. 2021; Geiping & Goldstein 2022), so
the learning rate reaches 0 exactly when the budget ends, and the run ends
there. --schedule linear warms up over --warmup-fraction of the budget (0.06
by default, Izsak et al.'s) then decays linearly; one-cycle rises to the peak
at half-time and falls; triangle (Cramming's) starts at a quarter of the
peak, peaks at 3/4 of the budget and falls. The budget counts the training
loop (steps, evaluations, checkpoints), not the preparation. It is counted
across --resume: checkpoint.pt records the time spent, and a resumed run
continues the schedule from that progress. --max-minutes, by contrast, only
stops this one invocation (--resume continues, the schedule unchanged).

Data-parallel over 2 processes (gloo on CPU, NCCL on GPUs; --batch-size is
the global batch, split over them):

    torchrun --standalone --nproc_per_node 2 train_mlm.py ... (same flags)

The run acts once: the first process alone prints and writes (the folder,
--json, --plot), and the tokens it reports are every process's. With
--dropout 0 the weights equal one process's with the same --batch-size;
with dropout each process draws its own masks, so the runs differ as two
draws do, statistically equivalent (docs/guide.md 3).

--arch deberta (the same flags otherwise) pretrains a DeBERTa of the same
size instead: the v2/v3 encoder (model_type deberta-v2: disentangled
attention with c2p and p2c terms, --position-buckets log buckets, keys shared
with the content projections, LayerNorm'd relative table, no absolute
positions at the input, no token types) with MLM predicted through the
Enhanced Mask Decoder (He et al. 2020, 3.2). MLM only: DeBERTa has no NSP or
SOP, and this is v1/v2's objective, not DeBERTaV3's replaced-token detection.
A BERT and a DeBERTa of one shape are one flag apart
(bench/compare_deberta_bert.sh compares them).

The result is a Hugging Face folder (config.json, model.safetensors,
vocab.txt) that minibert.load_pretrained and transformers both read. It is
written when the run ends; until then --output holds checkpoint.pt (the
vocabulary included) and the token cache; both are removed once the run
has finished, so the folder holds only the model (--keep-checkpoint keeps
them; --steps 0, which only prepares, keeps its cache; a --cache-dir
elsewhere is never removed). --output must be new or empty;
--resume continues the run whose checkpoint is there (or starts it again if
it stopped before its first checkpoint) and refuses a changed flag that
shapes the run (the corpus, by path, size and SHA-256, --lr, --warmup,
--mask-prob, ...), naming it; --force writes over anything else.
"""

import shutil
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from minibert.support.cli import (ArgumentParser, HelpFormatter, add_bf16, add_checkpointing, add_device, add_reports,
                                  int_at_least, make_parent_folder, non_negative_float, non_negative_int, output_folder,
                                  positive_float, positive_int, probability, script_main)
from minibert.support import MiniBertError
from minibert.support.files import as_given, not_a_file, tokenizer_fingerprint, vocabulary
from minibert.support.outputs import (CHECKPOINT, MODEL_FOLDER_FILES, file_identity, is_main_process, safe_run,
                                      write_folder)

# Above, only modules that load in milliseconds; torch and the lessons are imported inside the functions
# that use them, so --help and a mistyped flag answer at once.

# A model built from the flags has BERT's 512 positions (--config can say otherwise).
FLAG_MAX_POSITIONS = 512
# DeBERTa v3-base's relative-position buckets (its config.json: position_buckets 256).
DEBERTA_POSITION_BUCKETS = 256
# A run of steps, and a run on a time budget (Izsak et al. 2021 warm up over 6% of theirs).
DEFAULT_STEPS, DEFAULT_WARMUP, DEFAULT_WARMUP_FRACTION = 10000, 1000, 0.06
SCHEDULE_NAMES = ("linear", "one-cycle", "triangle")     # minibert.training.SCHEDULES (a test holds them equal)


def parse_args(argv=None):
    p = ArgumentParser(prog="train_mlm.py", description=__doc__, formatter_class=HelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--corpus", nargs="+", required=True,
                      help="text files or folders of *.txt files: one paragraph per line, documents separated by files "
                           "or blank lines (or one token-cache folder made by an earlier run: OUTPUT/cache/<key>)")
    data.add_argument("--heldout", nargs="*", default=[],
                      help="hold out the corpus files whose names contain these strings, for held-out accuracy and perplexity")
    data.add_argument("--heldout-corpus", nargs="*", default=[],
                      help="separate held-out text files or folders (instead of, or besides, --heldout)")
    data.add_argument("--vocab", help="an existing vocab.txt (WordPiece); without it a vocabulary is trained on the corpus")
    data.add_argument("--vocab-size", type=int_at_least(6, " (the 5 special tokens and one more)"), default=12000,
                      help="size of the WordPiece vocabulary to train (default 12000)")
    data.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case and strip accents)")
    data.add_argument("--max-seq-len", type=int_at_least(4, " (room for [CLS], one token and two [SEP])"), default=128,
                      help=f"tokens per sequence, [CLS] and [SEP] included, at most max_position_embeddings "
                           f"({FLAG_MAX_POSITIONS} unless --config says otherwise) (default 128)")
    data.add_argument("--pair-objective", choices=["auto", "none", "nsp", "sop"], default="none",
                      help="sentence-pair task: nsp (BERT's next sentence), sop (ALBERT's sentence order), "
                           "auto (nsp for BERT, sop for ALBERT, none for DeBERTa) or none (default); "
                           "DeBERTa pretrains with MLM only")
    data.add_argument("--mask-prob", type=probability(), default=0.15,
                      help="fraction of tokens chosen for MLM, in (0, 1] (default 0.15)")
    data.add_argument("--whole-word-masking", action="store_true", help="choose whole words rather than word pieces")
    data.add_argument("--cache-dir", type=output_folder, help="where the tokenized corpus is cached (default OUTPUT/cache, "
                      "removed with the checkpoint when the run has finished)")
    model = p.add_argument_group("model (flags, or --config)")
    model.add_argument("--config", help="a config.json / bert_config.json / albert_config.json, or a DeBERTa "
                       "config.json (model_type deberta or deberta-v2); overrides the flags below")
    model.add_argument("--arch", choices=["bert", "deberta"], default="bert",
                       help="bert (BERT or ALBERT, see --model-type) or deberta: DeBERTa v2/v3's encoder "
                            "(disentangled attention, relative positions only) with MLM through the Enhanced Mask "
                            "Decoder, no NSP/SOP (default bert)")
    model.add_argument("--model-type", choices=["bert", "albert"], default="bert", help="with --arch bert: "
                       "bert or albert (default bert)")
    model.add_argument("--layers", type=positive_int, default=4, help="num_hidden_layers (default 4)")
    model.add_argument("--hidden", type=positive_int, default=256, help="hidden_size (default 256)")
    model.add_argument("--heads", type=positive_int, default=4, help="num_attention_heads (default 4)")
    model.add_argument("--intermediate", type=positive_int, default=1024, help="intermediate_size (default 1024)")
    model.add_argument("--embedding-size", type=positive_int, help="ALBERT's embedding_size E (default 128 for ALBERT)")
    model.add_argument("--groups", type=positive_int, default=1, help="ALBERT's num_hidden_groups (default 1)")
    model.add_argument("--position-buckets", type=int_at_least(2), default=DEBERTA_POSITION_BUCKETS,
                       help=f"DeBERTa's relative-position buckets: distances up to half of it keep their own "
                            f"embedding, longer ones share log-spaced buckets "
                            f"(default {DEBERTA_POSITION_BUCKETS}, as DeBERTa v3)")
    model.add_argument("--dropout", type=probability(include_zero=True, include_one=False), default=0.1,
                       help="hidden and attention dropout, in [0, 1) (default 0.1)")
    train = p.add_argument_group("training")
    train.add_argument("--output", type=output_folder, required=True,
                       help="output folder (model, vocab, checkpoint.pt); new or empty, unless --resume or --force")
    train.add_argument("--force", action="store_true",
                       help="write into --output even if it holds other files or another run's checkpoint "
                            "(that run is started over, not resumed)")
    train.add_argument("--steps", type=non_negative_int,
                       help="optimizer steps; 0 only prepares (vocabulary, token cache, untrained model) "
                            f"(default {DEFAULT_STEPS}; not with --budget-minutes, whose budget ends the run)")
    train.add_argument("--budget-minutes", type=positive_float,
                       help="train for this much time instead of --steps, the schedule keyed to it: warm-up and "
                            "decay run over the fraction of the budget spent, so the learning rate reaches 0 when "
                            "the budget ends, and the run ends there; counted across --resume (the checkpoint "
                            "records the time spent)")
    train.add_argument("--batch-size", type=positive_int, default=128,
                       help="sequences per micro-batch, all processes together (default 128)")
    train.add_argument("--grad-accum", type=positive_int, default=1,
                       help="micro-batches per optimizer step (default 1)")
    train.add_argument("--lr", type=positive_float, default=5e-4, help="peak learning rate (default 5e-4)")
    train.add_argument("--schedule", choices=SCHEDULE_NAMES, default="linear",
                       help="the learning rate's shape over the run (steps, or the --budget-minutes budget): linear "
                            "(warm-up, then linear decay to 0: BERT's), one-cycle (up to the peak at half-time, then "
                            "down to 0), triangle (Cramming's: from 1/4 of the peak up to it at 3/4, then down to 0) "
                            "(default linear)")
    train.add_argument("--warmup", type=non_negative_int,
                       help=f"warm-up steps of --schedule linear (default {DEFAULT_WARMUP}; with --budget-minutes "
                            f"use --warmup-fraction)")
    train.add_argument("--warmup-fraction", type=probability(include_zero=True, include_one=False),
                       help=f"with --budget-minutes and --schedule linear: the fraction of the budget spent warming "
                            f"up, in [0, 1) (default {DEFAULT_WARMUP_FRACTION}, as Izsak et al.)")
    train.add_argument("--weight-decay", type=non_negative_float, default=0.01,
                       help="AdamW weight decay, not on LayerNorm/bias (default 0.01)")
    train.add_argument("--optimizer", choices=("adamw", "bert-adam"), default="adamw",
                       help="adamw: torch's AdamW, with Adam's bias correction (default; the README's pretraining "
                            "and fine-tuning results used it); bert-adam: Google BERT's own AdamWeightDecay, "
                            "without bias correction")
    train.add_argument("--max-grad-norm", type=non_negative_float, default=1.0,
                       help="gradient clipping (default 1.0; 0 = off)")
    train.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    train.add_argument("--eval-every", type=non_negative_int, default=1000,
                       help="held-out evaluation every N steps (default 1000; 0 = never)")
    train.add_argument("--eval-batches", type=positive_int, default=20,
                       help="held-out batches of 64 per evaluation (default 20)")
    train.add_argument("--checkpoint-every", type=non_negative_int, default=1000,
                       help="write checkpoint.pt every N steps (default 1000; 0 = only at the end)")
    add_checkpointing(train, "three times the model's size: the weights and Adam's two moments; OUTPUT/cache, "
                             "the token cache, is kept too",
                      resume_help="continue from OUTPUT/checkpoint.pt (with the vocabulary stored in it), with "
                                  "the same corpus and settings (a changed one is refused, by name); with no "
                                  "checkpoint yet, start from step 0",
                      stopping="the last step's weights are the checkpoint's; each invocation counts its own "
                               "time and leaves the schedule as it is (--budget-minutes keys the schedule to time)")
    add_device(train)
    train.add_argument("--num-workers", type=non_negative_int, default=0,
                       help="processes preparing batches ahead (default 0)")
    add_bf16(train, "the model in training")
    add_reports(train, "a summary (config, history, held-out metrics; accuracies in percent)",
                "the training loss and the masked-token accuracy (training and held out) against the step")
    args = p.parse_args(argv)
    check_schedule_flags(p, args)
    if args.config is None and args.max_seq_len > FLAG_MAX_POSITIONS:
        p.error(f"argument --max-seq-len: {args.max_seq_len} is longer than max_position_embeddings "
                f"({FLAG_MAX_POSITIONS}) of a model built from the flags; expected at most {FLAG_MAX_POSITIONS} "
                f"(or a --config with more positions)")
    if args.arch == "deberta":
        if args.model_type != "bert":
            p.error(f"argument --model-type: {args.model_type} is a BERT variant; --arch deberta takes no --model-type")
        if args.pair_objective in ("nsp", "sop"):
            p.error(f"argument --pair-objective: DeBERTa pretrains with MLM only; expected none or auto with "
                    f"--arch deberta, got {args.pair_objective}")
        if args.embedding_size is not None and args.embedding_size != args.hidden:
            p.error(f"argument --embedding-size: {args.embedding_size} != --hidden {args.hidden}; DeBERTa's "
                    f"Enhanced Mask Decoder adds the embedding-wide positions to hidden states, so they must match")
        if args.groups != 1:
            p.error("argument --groups: ALBERT's layer groups; --arch deberta has one layer per depth")
        if args.position_buckets // 2 >= FLAG_MAX_POSITIONS - 1:
            p.error(f"argument --position-buckets: {args.position_buckets} buckets squeeze nothing for distances "
                    f"up to {FLAG_MAX_POSITIONS}; expected at most {2 * (FLAG_MAX_POSITIONS - 1) - 1}")
    return args


def check_schedule_flags(p, args):
    """--steps and --warmup count steps, --budget-minutes and --warmup-fraction
    time: one clock per run. Fills in the defaults of the clock chosen."""
    if args.budget_minutes is not None:
        if args.steps is not None:
            p.error(f"argument --steps: a --budget-minutes run ends when its budget does; give --steps "
                    f"{args.steps} or --budget-minutes {args.budget_minutes:g}, not both")
        if args.warmup is not None:
            p.error("argument --warmup: counts steps; a --budget-minutes run warms up over --warmup-fraction "
                    "of its budget")
    else:
        if args.warmup_fraction is not None:
            p.error("argument --warmup-fraction: a fraction of --budget-minutes; a run of --steps warms up "
                    "over --warmup steps")
        args.steps = DEFAULT_STEPS if args.steps is None else args.steps
    if args.schedule != "linear":
        given = "--warmup" if args.warmup is not None else "--warmup-fraction" if args.warmup_fraction is not None \
            else None
        if given:
            p.error(f"argument {given}: --schedule {args.schedule} has its own rise; warm-up is for --schedule linear")
    linear = args.schedule == "linear"
    if args.budget_minutes is not None:
        args.warmup_fraction = (DEFAULT_WARMUP_FRACTION if args.warmup_fraction is None else args.warmup_fraction
                                ) if linear else 0.0
    else:
        args.warmup = (DEFAULT_WARMUP if args.warmup is None else args.warmup) if linear else 0
        args.warmup_fraction = 0.0
        if 0 < args.steps <= args.warmup:
            print(f"warning: --warmup {args.warmup} is not below --steps {args.steps}: the learning rate never "
                  f"leaves its warm-up (it peaks at step {args.warmup}, after the run)", file=sys.stderr)


def choose_tokenizer(args, corpus, resume):
    """The checkpoint's own vocabulary when resuming; else --vocab; else one
    trained on the corpus (deterministic: the same corpus gives the same one).
    Nothing is written to --output here: the tokenizer files go there with
    the model, once the run has finished."""
    from minibert.tokenization import Tokenizer, wordpiece_tokenizer
    lower = not args.cased
    if resume:
        return resume_tokenizer(args.output, lower, vocab_file=args.vocab)
    if args.vocab:
        return wordpiece_tokenizer(args.vocab, do_lower_case=lower)
    from minibert.support.caches import is_token_cache
    prepared = next((path for path in corpus if is_token_cache(path)), None)
    if prepared is not None:         # token ids, no text to train a vocabulary on
        raise MiniBertError(f"--corpus {prepared}: a prepared token cache holds token ids, not text; give --vocab, "
                            f"the vocab.txt it was made with")
    # tokenizers' own progress display leaves blank lines behind: one line of ours instead
    started = time.time()
    files = f"{len(corpus):,} file" + ("s" if len(corpus) != 1 else "")
    print(f"training a {args.vocab_size:,}-piece WordPiece vocabulary on {files} ...", flush=True)
    tokenizer = Tokenizer.train_wordpiece(corpus, args.vocab_size, do_lower_case=lower, progress=False)
    print(f"vocabulary: {tokenizer.vocab_size:,} pieces ({time.time() - started:.0f} s)")
    return tokenizer


def flags_family(args):
    """The family (minibert/checkpoints/families.py) a model built from the
    flags belongs to: --arch deberta builds DeBERTa v3's encoder; --arch bert
    the --model-type."""
    from minibert.checkpoints.families import FAMILIES
    return FAMILIES["deberta-v3" if args.arch == "deberta" else args.model_type]


def choose_pair_objective(args, config):
    """--pair-objective, with auto resolved by the model's family: nsp for
    BERT, sop for ALBERT, none for DeBERTa (MLM only). `config` is
    --config's, or None."""
    from minibert.checkpoints.families import family_of
    if args.pair_objective != "auto":
        return args.pair_objective
    return (family_of(config) if config is not None else flags_family(args)).pair_objective


def config_from_flags(args, vocab_size, pad_token_id=0):
    if args.arch == "deberta":
        return deberta_config_from_flags(args, vocab_size, pad_token_id)
    from minibert.model import BertConfig
    family = flags_family(args)
    defaults = family.config_defaults        # ALBERT's: E = 128, one shared group, the tanh GELU; BERT's: none
    config = BertConfig(vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=args.intermediate,
                        hidden_act=defaults.get("hidden_act", "gelu"), model_type=family.model_type,
                        hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
                        max_position_embeddings=FLAG_MAX_POSITIONS,
                        embedding_size=args.embedding_size or defaults.get("embedding_size"),
                        num_hidden_groups=args.groups if "num_hidden_groups" in defaults else None)
    config.validate()
    return config


def deberta_config_from_flags(args, vocab_size, pad_token_id):
    """DeBERTa v3-base's switches (its config.json, docs/deberta.md 4.2) at the
    size the flags give: relative positions only, c2p and p2c, log buckets over
    distances up to 512, keys shared with the content projections, the
    relative table LayerNorm'd. type_vocab_size 0: MLM-only batches carry
    no second segment, and v3 has no token-type embeddings either."""
    from minibert.deberta import DebertaConfig
    return DebertaConfig(vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, intermediate_size=args.intermediate, hidden_act="gelu",
                         hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
                         max_position_embeddings=FLAG_MAX_POSITIONS, type_vocab_size=0, pad_token_id=pad_token_id,
                         model_type="deberta-v2", relative_attention=True, max_relative_positions=-1,
                         position_biased_input=False, pos_att_type="c2p|p2c",
                         position_buckets=args.position_buckets, share_att_key=True, norm_rel_ebd="layer_norm")


def resume_flags(args):
    """The flags that make the model and its vocabulary, under their names:
    --resume refuses a run where one differs, naming it (the model config
    they make is compared too, but only a flag's name says what to change)."""
    flags = {flag: getattr(args, flag[2:].replace("-", "_"))
             for flag in ("--arch", "--model-type", "--layers", "--hidden", "--heads", "--intermediate", "--dropout",
                          "--embedding-size", "--groups", "--position-buckets", "--cased")}
    flags["--config"] = file_identity(args.config)
    if args.vocab is None:               # a vocabulary trained on the corpus, of this size (resumed from the checkpoint)
        flags["--vocab-size"] = args.vocab_size
    return flags


@script_main
def main(argv=None):
    args = parse_args(argv)
    from minibert.support.files import write_json
    from minibert.checkpoints.families import family_of

    # Everything that can be checked quickly is checked before the vocabulary is trained.
    safe = safe_run(inputs={"--vocab": args.vocab, "--config": args.config},
                    # the corpus is read several times: a pipe, copied once
                    data={"--corpus": args.corpus, "--heldout-corpus": args.heldout_corpus},
                    folder=args.output, force=args.force, resume=args.resume, keep=("cache",),   # its token cache
                    caches={"--cache-dir": args.cache_dir}, files={"--json": args.json, "--plot": args.plot})
    if args.plot:
        from minibert.support.plots import require_matplotlib
        require_matplotlib()
    files = text_files(safe.data["--corpus"], "--corpus")
    corpus, heldout = split_heldout(files, args.heldout)
    heldout += text_files(safe.data["--heldout-corpus"], "--heldout-corpus")
    if not corpus:
        raise MiniBertError("--heldout holds out every corpus file: nothing left to train on")
    config = read_model_config(args.config) if args.config else None     # BERT's three config files, or DeBERTa's
    if config is not None:
        check_max_seq_len(args.max_seq_len, config)
        if args.arch == "deberta" and family_of(config).model_class is not flags_family(args).model_class:
            raise MiniBertError(f"--arch deberta: --config {args.config} is a {config.model_type} config")
    pair = choose_pair_objective(args, config)
    if config is not None:
        check_pair_objective(config, pair)
    resume = safe.resume

    tokenizer = choose_tokenizer(args, corpus, resume)
    if config is None:
        config = config_from_flags(args, tokenizer.vocab_size, tokenizer.pad_id)

    summary = pretrain(corpus, args.output, config, tokenizer, heldout=heldout, max_seq_len=args.max_seq_len,
                       batch_size=args.batch_size, grad_accum_steps=args.grad_accum, steps=args.steps,
                       learning_rate=args.lr, warmup_steps=args.warmup, weight_decay=args.weight_decay,
                       max_grad_norm=args.max_grad_norm, seed=args.seed, pair_objective=pair,
                       mask_prob=args.mask_prob, whole_word=args.whole_word_masking, eval_every=args.eval_every,
                       eval_batches=args.eval_batches, checkpoint_every=args.checkpoint_every,
                       max_minutes=args.max_minutes, resume=resume, device=args.device,
                       num_workers=args.num_workers, cache_dir=args.cache_dir, progress=not args.quiet,
                       bf16=args.bf16, keep_checkpoint=args.keep_checkpoint, optimizer=args.optimizer,
                       schedule=args.schedule, budget_minutes=args.budget_minutes,
                       warmup_fraction=args.warmup_fraction, resume_flags=resume_flags(args))
    if not is_main_process():        # torchrun: every process trained; the main one reports and writes, once
        return 0
    if args.json:
        make_parent_folder(args.json)
        write_json(args.json, summary)
    final = summary.get("heldout")
    if final:
        print(f"held-out masked-token accuracy {final['masked_accuracy']:.2f}% over {final['masked_tokens']:,} "
              f"masked tokens, perplexity {final['perplexity']:.2f}")
    print(f"saved to {args.output} after step {summary['end_step']:,} ({summary['seconds']:.0f} s, "
          f"{summary['tokens_seen']:,} tokens)")
    if args.plot:
        from minibert.support.plots import plot_pretraining
        make_parent_folder(args.plot)
        plot_pretraining(summary["history"], args.plot)
        print(f"wrote {args.plot}")


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------

# The pretraining run that train_mlm.py starts: the corpus and its token
# cache, the output folder, resume, and the model folder written at the end,
# around the lesson's objective (minibert/pretraining.py) and the loop
# (trainer.train).
#
# One loop pretrains three architectures, told apart by the config's family
# (checkpoints/families.py):
#   * BERT and ALBERT (BertConfig -> BertModel): MLM, optionally with NSP or SOP.
#   * DeBERTa (DebertaConfig -> DebertaModel, minibert/deberta.py): MLM only.
#     The official pre-training code (mlm_task.py, docs/deberta.md 2) has no
#     sentence-pair task, so neither has this one; DeBERTaV3's own objective,
#     ELECTRA's replaced-token detection, is not this one either.
#
# The output folder: while a run goes on it holds checkpoint.pt (with the
# vocabulary inside, so --resume needs nothing else) and the token cache; the
# model and its tokenizer files (config.json, model.safetensors, vocab.txt,
# tokenizer.json, ...) are written only when the run has finished, as one unit
# (support/outputs.write_folder). A run that fails therefore never pairs the
# weights already in a folder with a new vocabulary.

# [CLS] A [SEP] B [SEP]: sequences are packed with max_seq_len - 3 tokens of text (pack_blocks).
MIN_SEQ_LEN = 4


def corpus_batches(files, tokenizer, cache_dir, max_seq_len, batch_size, seed, pair_objective, mask_prob,
                   whole_word, progress=True):
    from minibert.pretraining import SENTENCE_END, PretrainingBatches, pack_blocks, split_sentences
    from minibert.support.caches import TokenCache, build_token_cache, check_token_cache, is_token_cache
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
    from minibert.support.caches import is_token_cache
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
    from minibert.commands.trainer import load_checkpoint
    from minibert.tokenization import Tokenizer, wordpiece_tokenizer
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
    from minibert.checkpoints import save_pretrained
    write_folder(output, lambda staging: save_pretrained(model, staging, tokenizer=tokenizer),
                 leave_behind=MODEL_FOLDER_FILES)     # --force over another model: none of its files stays


# ----------------------------------------------------------------------------
# The model and the loop
# ----------------------------------------------------------------------------


def read_model_config(config_file):
    """A BertConfig (bert, albert) or a DebertaConfig (deberta, deberta-v2)
    from a config file, told apart by its model_type: the loader's own
    reader (minibert.checkpoints.read_config), which knows every kind."""
    from minibert.checkpoints import read_config
    return read_config(config_file, with_deberta=True)


def check_pair_objective(model_config, pair_objective):
    from minibert.checkpoints.families import family_of
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
    from minibert.checkpoints.families import family_of
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
    goes on from the budget its checkpoint recorded (commands/trainer.py).
    clock() -> seconds: what the budget is read on (tests give a fake one).
    resume_flags: more {flag: value} that shape the run (train_mlm.py: the
    flags that make the model config), which --resume must find unchanged."""
    import torch

    from minibert.commands.trainer import (Prefetched, TrainingConfig, leave_process_group, load_checkpoint,
                                           main_process_first, setup_context, train)
    from minibert.pretraining import MaskedLMObjective, evaluate_mlm
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

    with main_process_first(context):     # the main process tokenizes, so the cache is built once
        train_batches = corpus_batches(corpus, tokenizer, cache_dir, max_seq_len, global_batch, seed,
                                       pair_objective, mask_prob, whole_word, progress and context.is_main)
        heldout_batches = (corpus_batches(heldout, tokenizer, cache_dir, max_seq_len, 64, seed + 1, pair_objective,
                                          mask_prob, whole_word, progress and context.is_main) if heldout else None)

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
    leave_process_group(context)
    summary["parameters"] = model.num_parameters()
    summary["run_config"] = {k: v for k, v in run_config.items() if k != "vocabulary"}  # the file has it
    return summary
