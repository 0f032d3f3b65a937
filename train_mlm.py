r"""Pretrain a BERT or ALBERT with masked-LM from raw text files.

    python train_mlm.py --corpus ../shared/data/corpus --heldout pg11_ pg84_ pg1661_ \
        --vocab-size 12000 --layers 6 --hidden 256 --heads 4 --intermediate 1024 \
        --batch-size 256 --lr 1e-3 --steps 20000 --output runs/gutenberg

Distributed over 2 processes (gloo on CPU, NCCL on GPUs):

    torchrun --nproc_per_node 2 train_mlm.py ... (same flags)

The result is a Hugging Face folder (config.json, model.safetensors,
vocab.txt) that minibert.load_pretrained and transformers both read.
"""

from minibert.cli import ArgumentParser, HelpFormatter, run
from minibert.errors import MiniBertError


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    data = p.add_argument_group("data")
    data.add_argument("--corpus", nargs="+", required=True,
                      help="text files or folders of *.txt files: one paragraph per line, documents separated by files "
                           "or blank lines (or one token-cache folder made by an earlier run: OUTPUT/cache/<key>)")
    data.add_argument("--heldout", nargs="*", default=[],
                      help="hold out the corpus files whose names contain these strings, for held-out accuracy and perplexity")
    data.add_argument("--heldout-corpus", nargs="*", default=[],
                      help="separate held-out text files or folders (instead of, or besides, --heldout)")
    data.add_argument("--vocab", help="an existing vocab.txt (WordPiece); without it a vocabulary is trained on the corpus")
    data.add_argument("--vocab-size", type=int, default=12000, help="size of the WordPiece vocabulary to train (default 12000)")
    data.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case and strip accents)")
    data.add_argument("--max-seq-len", type=int, default=128, help="tokens per sequence, [CLS] and [SEP] included (default 128)")
    data.add_argument("--pair-objective", choices=["auto", "none", "nsp", "sop"], default="none",
                      help="sentence-pair task: nsp (BERT's next sentence), sop (ALBERT's sentence order), "
                           "auto (nsp for BERT, sop for ALBERT) or none (default)")
    data.add_argument("--mask-prob", type=float, default=0.15, help="fraction of tokens chosen for MLM (default 0.15)")
    data.add_argument("--whole-word-masking", action="store_true", help="choose whole words rather than word pieces")
    data.add_argument("--cache-dir", help="where the tokenized corpus is cached (default OUTPUT/cache)")
    model = p.add_argument_group("model (flags, or --config)")
    model.add_argument("--config", help="a config.json / bert_config.json / albert_config.json; overrides the flags below")
    model.add_argument("--model-type", choices=["bert", "albert"], default="bert", help="default bert")
    model.add_argument("--layers", type=int, default=4, help="num_hidden_layers (default 4)")
    model.add_argument("--hidden", type=int, default=256, help="hidden_size (default 256)")
    model.add_argument("--heads", type=int, default=4, help="num_attention_heads (default 4)")
    model.add_argument("--intermediate", type=int, default=1024, help="intermediate_size (default 1024)")
    model.add_argument("--embedding-size", type=int, help="ALBERT's embedding_size E (default 128 for ALBERT)")
    model.add_argument("--groups", type=int, default=1, help="ALBERT's num_hidden_groups (default 1)")
    model.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout (default 0.1)")
    train = p.add_argument_group("training")
    train.add_argument("--output", required=True, help="output folder (model, vocab, checkpoint.pt)")
    train.add_argument("--steps", type=int, default=10000, help="optimizer steps (default 10000)")
    train.add_argument("--batch-size", type=int, default=128, help="sequences per micro-batch, all processes together (default 128)")
    train.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    train.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (default 5e-4)")
    train.add_argument("--warmup", type=int, default=1000, help="warm-up steps (default 1000)")
    train.add_argument("--weight-decay", type=float, default=0.01, help="AdamW weight decay, not on LayerNorm/bias (default 0.01)")
    train.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (default 1.0; 0 = off)")
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    train.add_argument("--eval-every", type=int, default=1000, help="held-out evaluation every N steps (default 1000)")
    train.add_argument("--eval-batches", type=int, default=20, help="held-out batches of 64 per evaluation (default 20)")
    train.add_argument("--checkpoint-every", type=int, default=1000, help="write checkpoint.pt every N steps (default 1000)")
    train.add_argument("--max-minutes", type=float, help="stop after this much wall time, with a checkpoint to --resume from")
    train.add_argument("--resume", action="store_true", help="continue from OUTPUT/checkpoint.pt")
    train.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:1 ...")
    train.add_argument("--num-workers", type=int, default=0, help="processes preparing batches ahead (default 0)")
    train.add_argument("--json", help="write a JSON summary (config, history, held-out metrics) to this file")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    from pathlib import Path
    from minibert.checkpoints import read_config
    from minibert.model import ALBERT_DEFAULTS, BertConfig
    from minibert.pretraining import pretrain, split_heldout, text_files
    from minibert.tokenization import train_wordpiece, wordpiece_tokenizer
    from minibert.fileio import write_json

    files = text_files(args.corpus, "--corpus")
    corpus, heldout = split_heldout(files, args.heldout)
    heldout += text_files(args.heldout_corpus, "--heldout-corpus")
    if not corpus:
        raise MiniBertError("--heldout holds out every corpus file: nothing left to train on")
    output = Path(args.output)
    vocab_file = output / "vocab.txt"
    if args.vocab:
        tokenizer = wordpiece_tokenizer(args.vocab, do_lower_case=not args.cased)
    elif args.resume and vocab_file.is_file():
        tokenizer = wordpiece_tokenizer(vocab_file, do_lower_case=not args.cased)
    else:
        tokenizer = train_wordpiece(corpus, args.vocab_size, do_lower_case=not args.cased)
        output.mkdir(parents=True, exist_ok=True)
        tokenizer.save(output)

    if args.config:
        config = read_config(args.config)     # reads each of the three config files as load_pretrained does
    else:
        albert = args.model_type == "albert"
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                            num_attention_heads=args.heads, intermediate_size=args.intermediate,
                            hidden_act=ALBERT_DEFAULTS["hidden_act"] if albert else "gelu", model_type=args.model_type,
                            hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout,
                            max_position_embeddings=max(512, args.max_seq_len),
                            embedding_size=(args.embedding_size or ALBERT_DEFAULTS["embedding_size"]) if albert
                            else args.embedding_size,
                            num_hidden_groups=args.groups if albert else None)
        config.validate()
    pair = args.pair_objective
    if pair == "auto":
        pair = "sop" if config.model_type == "albert" else "nsp"

    summary = pretrain(corpus, output, config, tokenizer, heldout=heldout, max_seq_len=args.max_seq_len,
                       batch_size=args.batch_size, grad_accum_steps=args.grad_accum, steps=args.steps,
                       learning_rate=args.lr, warmup_steps=args.warmup, weight_decay=args.weight_decay,
                       max_grad_norm=args.max_grad_norm, seed=args.seed, pair_objective=pair,
                       mask_prob=args.mask_prob, whole_word=args.whole_word_masking, eval_every=args.eval_every,
                       eval_batches=args.eval_batches, checkpoint_every=args.checkpoint_every,
                       max_minutes=args.max_minutes, resume=args.resume, device=args.device,
                       num_workers=args.num_workers, cache_dir=args.cache_dir, progress=not args.quiet)
    if args.json:
        write_json(args.json, summary)
    final = summary.get("heldout")
    if final:
        print(f"held-out masked-token accuracy {final['masked_accuracy']:.4f}, perplexity {final['perplexity']:.2f}")
    print(f"saved to {output} after step {summary['end_step']} ({summary['seconds']:.0f} s, "
          f"{summary['tokens_seen']:,} tokens)")


if __name__ == "__main__":
    run(main)
