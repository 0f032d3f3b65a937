"""The run probe.py (and duplicate.py --probe) makes around
minibert/probing.py: the sentences read, the model checked against its
tokenizer, the sentences the model's positions cut counted, and the results
printed as tables, written as JSON and drawn as a plot. (The flags' values
are checked when the command line is read: support/cli.py's types.)
"""

import dataclasses
from pathlib import Path

from minibert import probing
from minibert.support.errors import MiniBertError
from minibert.support.files import write_json
from minibert.support.plots import plot_probe

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
    if mlm_head is None and model.mlm_head is None:
        raise MiniBertError(f"{model_name or 'the model'}: has no MLM head (a Hugging Face `BertModel` file?); "
                            f"pass --fit-head TEXTFILE to fit one on its last layer first")
    check_vocabularies(model, tokenizer)
    result = probing.probe_model(model, tokenizer, sentences, mlm_head=mlm_head, batch_size=batch_size,
                                 mask_prob=mask_prob, show=show, model_name=model_name, **options)
    result.truncated = count_too_long(tokenizer, sentences, result.max_length)
    return result


def fit_head(model, tokenizer, sentences, *, steps=300, lr=1e-3, batch_size=256, **options):
    """probing.fit_mlm_head as probe.py --fit-head runs it, its text checked first."""
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
