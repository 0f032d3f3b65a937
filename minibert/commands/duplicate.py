"""Make a model deeper by duplicating layers, with no training (Kao et al. 2020).

Kao et al. insert, after some layers, a copy of the same layer: BERT-base with
its first three layers duplicated runs 0,0,1,1,2,2,3,...,11 (15 layers), and
fine-tuned like the base model it scores higher on SQuAD 2.0 and SNLI.

Say which layers run with exactly one of:
  --duplicate 0,1,2      each listed layer is followed by a copy of itself
  --order 0,0,1,1,2,...  any sequence of existing layer indices (0-based,
                         Hugging Face's encoder.layer.i)
  --repeat K             ALBERT: run the shared layer group K more times
                         (num_hidden_layers += K; with G > 1 groups, K and the
                         layer count must be multiples of G: each group then
                         runs K/G more times)

Copies are untied by default (the paper's scheme): each is its own deep copy,
and the result is a plain BERT with more layers. The same works on a DeBERTa
(the relative-position table is shared by all layers already) and on an
ALBERT, whose shared group is then copied into a distinct group at every depth
(num_hidden_groups = the new depth, a layout transformers loads as it is).

--tied (BERT only) keeps one copy of each layer and runs it at several depths
(a cheap ablation; ALBERT's tied form is --repeat). transformers has no tied
layers, so the folder written for a tied model stores every depth as its own
layer -- transformers loads it as an ordinary untied BERT with the same
outputs -- and config.json gets an extra "layer_order" key that transformers
ignores and minibert uses to tie the copies again on load.

The output folder is Hugging Face layout (config.json, model.safetensors,
tokenizer files), plus duplication.json recording the source and the order.
Embeddings and heads are unchanged. The deeper model has at most 1,000 layers
(1,000 untied BERT-base layers are 28 GB). The source is a pretrained model: a
fine-tuned folder (with task.json) is refused, since its task head would be
dropped; duplicate the base model and fine-tune the deeper one.

quick example (8 s on 2 idle CPU cores; the bundled model, 6 -> 9 layers, probed before and after):
  python duplicate.py --duplicate 0,1,2 --output runs/quick-deeper --probe --json runs/quick-deeper.json \\
      --plot runs/quick-deeper.png

examples:
  python duplicate.py --model DIR --duplicate 0,1,2 --output deeper/
  python duplicate.py --model DIR --order 0,0,1,1,2,2,3 --tied --output tied/ --probe
  python duplicate.py --model DIR --duplicate 0,1 --output deeper/ --probe --json probe.json --plot probe.png
  python duplicate.py --model ALBERT_DIR --repeat 4 --output albert16/
  python duplicate.py --model ALBERT_DIR --duplicate 0,1 --output albert-untied/
  python duplicate.py --model DEBERTA_DIR --duplicate 0,1 --output deberta-deeper/
"""

from minibert.support.checks import MAX_DEPTH, parse_indices
from minibert.support.cli import (ArgumentParser, HelpFormatter, add_bf16, add_reports, add_threads, int_between,
                                  make_parent_folder, output_folder, positive_int, script_main)
from minibert.support.files import write_json
from minibert.support.outputs import check_pretrained_source, safe_run

# Above, only modules that load in milliseconds; torch and the lessons are imported inside the functions
# that use them, so --help and a mistyped flag answer at once.

parser = ArgumentParser(prog="duplicate.py", description=__doc__, formatter_class=HelpFormatter)
parser.add_argument("--model", default=None,
                    help="model folder, file inside one, hub id (owner/name[@revision]) or known name "
                         "(default: the bundled model)")
parser.add_argument("--output", type=output_folder, required=True, metavar="DIR",
                    help="folder to write the deeper model to (not the --model folder, nor inside it)")
how = parser.add_mutually_exclusive_group(required=True)
how.add_argument("--duplicate", metavar="I,J,...",
                 help="follow each listed layer by an untied copy of itself (BERT, DeBERTa; ALBERT: untied groups)")
how.add_argument("--order", metavar="I,J,...", help="the layer indices to run, in order (untied copies unless --tied)")
how.add_argument("--repeat", type=int_between(1, MAX_DEPTH), metavar="K",
                 help=f"ALBERT: run the shared group K more times (the deeper model has at most {MAX_DEPTH:,} layers)")
parser.add_argument("--tied", action="store_true",
                    help="BERT: share the copies instead of deep-copying them (saved untied for transformers, "
                         "re-tied by minibert through config.json's layer_order)")
parser.add_argument("--force", action="store_true", help="write into --output even if it is not empty")
parser.add_argument("--probe", action="store_true",
                    help="print probe.py's per-layer table for the original and the deeper model side by side")
parser.add_argument("--text", default=None, metavar="FILE", help="--probe: sentences (default: the bundled ones)")
parser.add_argument("--max-sentences", type=positive_int, default=None, metavar="N",
                    help="--probe: use only the first N sentences")
parser.add_argument("--batch-size", type=positive_int, default=32, metavar="N", help="--probe: sentences per batch")
add_reports(parser, "both probes (--probe), {\"original\": ..., \"deeper\": ...} in probe.py's format (accuracies in "
            "percent),", "both models' accuracy by layer (--probe)")
add_bf16(parser, "--probe's runs of both models (the written model is float32 either way)")
add_threads(parser)


@script_main
def main(argv=None):
    args = parser.parse_args(argv)
    from minibert.checkpoints import load_pretrained
    from minibert.duplication import source_layer_order

    if (args.json or args.plot) and not args.probe:
        parser.error(f"{'--json' if args.json else '--plot'} writes the probe's results: add --probe")
    if args.bf16 and not args.probe:
        parser.error("--bf16 runs the probe under bfloat16 autocast: add --probe")
    if args.tied and args.repeat is not None:
        parser.error("--tied: ALBERT's layers are always shared; --repeat needs no --tied")
    safe_run(inputs={"--model": args.model, "--text": args.text}, folder=args.output, source=args.model,
             force=args.force, files={"--json": args.json, "--plot": args.plot})     # before any slow loading
    if args.plot:
        from minibert.support.plots import require_matplotlib
        require_matplotlib()                        # before any slow work, not after it
    indices = {flag: parse_indices(text, flag)                             # before loading too
               for flag, text in (("--duplicate", args.duplicate), ("--order", args.order)) if text is not None}
    if args.probe:                      # the probe's inputs, read before the deeper model is written
        from minibert.commands import probe as probe_command
        sentences = probe_command.read_sentences(args.text, args.max_sentences)
    model = load_pretrained(args.model)
    check_pretrained_source(model.source_dir)
    L = model.config.num_hidden_layers
    record = {"source": str(model.source_dir), "source_layers": L}
    deeper, layer_order = deeper_model(model, indices.get("--duplicate"), indices.get("--order"), args.repeat,
                                       args.tied)
    if layer_order is None:
        record.update(method="repeat", repeat=args.repeat)
        labels = None                                   # the config says it all: group g, run k
    else:
        labels = source_layer_order(model, layer_order)
        record.update(method="duplicate" if args.duplicate is not None else "order", order=layer_order,
                      layers_run=labels, tied=args.tied)

    write_model(deeper, args.output, source_dir=model.source_dir, record=record, force=args.force)
    depth = deeper.config.num_hidden_layers
    print(f"wrote {args.output}: {depth} layers (from {L})"
          + (f", order {','.join(map(str, record['order']))}" if "order" in record else "")
          + (", tied" if args.tied else ""))

    if args.probe:
        from minibert.tokenization import load_tokenizer
        tokenizer = load_tokenizer(model.source_dir)
        before = probe_command.probe(model, tokenizer, sentences, batch_size=args.batch_size,
                                 model_name=args.model or "the bundled model", bf16=args.bf16)
        descriptions = None if labels is None else deeper.config.depth_labels(labels)
        after = probe_command.probe(deeper, tokenizer, sentences, batch_size=args.batch_size,
                                descriptions=descriptions, model_name=str(args.output), bf16=args.bf16)
        print()
        print(f"MLM head on every layer, {before.sentences} sentences, {before.tokens} real tokens "
              f"(top-1 / top-5 accuracy of reconstructing the input token, cross-entropy in nats"
              f"{'; bfloat16 autocast' if args.bf16 else ''})")
        print(probe_command.format_side_by_side(before, after, "original", f"deeper ({depth} layers)"))
        results = {"original": before, "deeper": after}
        if args.json:
            make_parent_folder(args.json)
            probe_command.save_json(results, args.json)
            print(f"\nwrote {args.json}")
        if args.plot:
            make_parent_folder(args.plot)
            probe_command.save_plot({"original": before, f"deeper ({depth} layers)": after}, args.plot)
            print(f"wrote {args.plot}")
    return 0


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------

# The run duplicate.py makes around minibert/duplication.py: the deeper
# model its flags ask for, and the model folder written with duplication.json
# (which probe.py reads back: probe.recorded_layer_order).

def deeper_model(model, duplicate=None, order=None, repeat=None, tied=False):
    """duplicate.py's model: (the deeper model, the layer order it runs, as
    indices of the source's depths; None for --repeat, whose config says it
    all: group g, run k). The lesson checks each choice; its errors name its
    parameters, which the script shows as the flags (support/cli.FLAGS)."""
    from minibert import duplication
    if repeat is not None:
        return duplication.repeat_albert(model, repeat), None
    layer_order = (duplication.duplicate_order(model.config.num_hidden_layers, duplicate) if duplicate is not None
                   else order)
    return duplication.deepen(model, layer_order, tied=tied), layer_order


def write_model(deeper, output, source_dir=None, record=None, force=False):
    """Hugging Face layout (config.json, model.safetensors, tokenizer files
    from `source_dir`), plus duplication.json saying how it was made,
    written as one unit (support/outputs.write_folder): a kill or a full
    disk leaves the old folder or the new one. Over an old model (--force),
    the new one replaces all its model files (a fine-tuned folder's
    metrics.json, a training run's checkpoint.pt); a user's other files stay."""
    from minibert.checkpoints import save_pretrained
    from minibert.support.outputs import CHECKPOINT, MODEL_FOLDER_FILES, write_folder
    from minibert.support.outputs import check_output_folder
    check_output_folder(output, force, source=source_dir)
    if source_dir is not None:
        deeper.source_dir = source_dir               # save_pretrained copies the tokenizer from here

    def write_into(staging):
        save_pretrained(deeper, staging)
        if record is not None:
            write_json(staging / "duplication.json", record)
    write_folder(output, write_into, leave_behind=MODEL_FOLDER_FILES + (CHECKPOINT,))   # another run's checkpoint too
