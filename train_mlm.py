r"""Pretrain a BERT, ALBERT or DeBERTa with masked-LM from raw text files.

quick example (about 2 minutes on 2 CPU cores; a tiny BERT on two books, one held out):

    python train_mlm.py --corpus ../shared/data/corpus/pg35_time_machine.txt \
        ../shared/data/corpus/pg46_christmas_carol.txt \
        --heldout-corpus ../shared/data/corpus/pg11_alice_in_wonderland.txt --vocab-size 4000 \
        --layers 2 --hidden 128 --heads 2 --intermediate 512 --batch-size 32 --steps 200 --warmup 20 \
        --lr 1e-3 --eval-every 100 --output runs/quick-mlm --plot runs/quick-mlm.png

A bigger run, the bundled model's shape (its exact recipe: docs/results.md 1):

    python train_mlm.py --corpus ../shared/data/corpus --heldout pg11_ pg84_ pg1661_ \
        --vocab-size 12000 --layers 6 --hidden 256 --heads 4 --intermediate 1024 \
        --batch-size 256 --lr 1e-3 --steps 20000 --output runs/gutenberg

On a time budget, the learning rate keyed to the clock (instead of --steps):

    python train_mlm.py --corpus ../shared/data/corpus --heldout pg11_ pg84_ pg1661_ \
        --vocab-size 12000 --layers 6 --hidden 256 --heads 4 --intermediate 1024 \
        --batch-size 256 --lr 1e-3 --budget-minutes 60 --schedule linear --output runs/hour

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

Distributed over 2 processes (gloo on CPU, NCCL on GPUs):

    torchrun --nproc_per_node 2 train_mlm.py ... (same flags)

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

import os
import sys
import time

from minibert.support.cli import (ArgumentParser, HelpFormatter, add_bf16, add_checkpointing, add_device, add_reports,
                                  int_at_least, make_parent_folder, non_negative_float, non_negative_int, output_folder,
                                  positive_float, positive_int, probability, run, script_main)
from minibert.support.errors import MiniBertError

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
    from minibert.runs.pretraining import resume_tokenizer
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
    from minibert.support.outputs import file_identity
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
    from minibert.runs.pretraining import (check_max_seq_len, check_pair_objective, pretrain, read_model_config,
                                           split_heldout, text_files)

    # Everything that can be checked quickly is checked before the vocabulary is trained.
    from minibert.support.outputs import safe_run
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
    if args.json:
        make_parent_folder(args.json)
        write_json(args.json, summary)
    final = summary.get("heldout")
    if final:
        print(f"held-out masked-token accuracy {final['masked_accuracy']:.2f}% over {final['masked_tokens']:,} "
              f"masked tokens, perplexity {final['perplexity']:.2f}")
    print(f"saved to {args.output} after step {summary['end_step']:,} ({summary['seconds']:.0f} s, "
          f"{summary['tokens_seen']:,} tokens)")
    if args.plot and os.environ.get("RANK", "0") == "0":     # torchrun: one process draws
        from minibert.support.plots import plot_pretraining
        make_parent_folder(args.plot)
        plot_pretraining(summary["history"], args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    run(main)
