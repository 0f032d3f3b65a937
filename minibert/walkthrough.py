"""Follow one sentence through the model, step by step.

    python -m minibert.walkthrough "the cat sat on the mat"
    python -m minibert.walkthrough "the cat sat on the mat" --layer 3 --head 1 --json walk.json
    python -m minibert.walkthrough "a short sentence" --model DIR --written-out

prints what happens to the sentence: its tokens and ids; the embedding sum
(word + position + segment, then LayerNorm); the shape at every stage of one
layer; one attention head's weights as a table; the norm of the residual
stream after every layer; what the MLM head reads from every layer (Kao et
al.'s probe); the final hidden state. Each step names the file and function
that computes it, so the output is a map of the code: open the file, find
the function, and read the step.

Nothing here computes the model a second time. The model runs once, as it
always does (`model(**batch)`), and forward hooks (PyTorch's
`register_forward_hook`) record what each of its modules received and
returned. Two steps call the model's own pieces again on what was recorded:
the attention weights (the model's fused kernel never forms them) and the
MLM head applied to every layer (the model applies it to the last one only).

Works for BERT and ALBERT (and models made deeper by duplicate.py). DeBERTa's
attention has other pieces: read it in minibert/deberta.py.
"""

import ast
from pathlib import Path

import torch

from minibert.model import ACTIVATIONS, attention, merge_heads, split_heads
from minibert.support.cli import (ArgumentParser, HelpFormatter, add_bf16, make_parent_folder, output_file,
                                  positive_int, run, script_main)
from minibert.support import MiniBertError
from minibert.support.files import write_json
from minibert.support.runtime import autocast

REPOSITORY = Path(__file__).resolve().parent.parent

# Each step -> the code that computes it, as "file: function" (tests check
# that every function named here is defined in that file).
CODE = {
    "tokens": ["minibert/tokenization.py: Tokenizer.encode", "minibert/tokenization.py: written_out_tokenize"],
    "embeddings": ["minibert/model.py: Embeddings.forward"],
    "embedding_layer_norm": ["minibert/model.py: LayerNorm.forward", "minibert/model.py: layer_norm"],
    "padding_mask": ["minibert/model.py: padding_bias"],
    "layer": ["minibert/model.py: TransformerLayer.forward"],
    "projections": ["minibert/model.py: SelfAttention.forward"],
    "split_heads": ["minibert/model.py: split_heads"],
    "attention": ["minibert/model.py: attention"],
    "merge_heads": ["minibert/model.py: merge_heads"],
    "add_attention": ["minibert/model.py: TransformerLayer.add_attention"],
    "feed_forward": ["minibert/model.py: FeedForward.forward"],
    "add_feed_forward": ["minibert/model.py: TransformerLayer.add_feed_forward"],
    "encoder": ["minibert/model.py: Encoder.forward", "minibert/model.py: BertConfig.depth_plan"],
    "mlm_head": ["minibert/model.py: MaskedLMHead.forward", "minibert/probing.py: probe_model"],
    "pooler": ["minibert/model.py: Pooler.forward"],
    "output": ["minibert/model.py: BertModel.forward"],
}

SHOWN = 4          # how many numbers of a vector the text shows (--json has them all)
MAX_COLUMNS = 16   # the widest attention table printed


# ----------------------------------------------------------------------------
# Recording: one run of the model, with hooks on its modules
# ----------------------------------------------------------------------------


class Recorder:
    """Forward hooks that keep what the model's modules compute.

    `embeddings` gets the pieces of the input representation; `layers` one
    dict per executed layer, in the order the encoder runs them (ALBERT runs
    one shared layer L times, so its hooks fire L times: each run opens a
    new dict)."""

    def __init__(self, model):
        self.embeddings, self.layers, self.handles = {}, [], []
        e = model.embeddings
        self.keep(e.word_embeddings, self.embeddings, "word")
        self.keep(e.position_embeddings, self.embeddings, "position")
        self.keep(e.token_type_embeddings, self.embeddings, "segment")
        self.keep(e.layer_norm, self.embeddings, "layer_norm", inputs_as="sum")
        if e.projection is not None:
            self.keep(e.projection, self.embeddings, "projection")
        for index, layer in enumerate(model.encoder.layers):
            self.handles.append(layer.register_forward_pre_hook(self.opener(index)))
            current = _Current(self.layers)
            self.keep(layer, current, "output", inputs_as="input")
            for name in ("query", "key", "value"):
                self.keep(getattr(layer.attention, name), current, name)
            self.keep(layer.attention.output_projection, current, "attended", inputs_as="merged")
            self.keep(layer.attention_layer_norm, current, "after_attention")
            self.keep(layer.feed_forward.w1, current, "w1")
            self.keep(layer.feed_forward.activation, current, "activation")
            self.keep(layer.feed_forward, current, "feed_forward")

    def opener(self, index):
        def open_layer(module, args):
            self.layers.append({"index": index, "bias": args[1]})
        return open_layer

    def keep(self, module, store, name, inputs_as=None):
        def hook(module, args, output):
            store[name] = output
            if inputs_as is not None:
                store[inputs_as] = args[0]
        self.handles.append(module.register_forward_hook(hook))

    def remove(self):
        for handle in self.handles:
            handle.remove()


class _Current:
    """A dict-like view of the layer being run now (the last one opened)."""

    def __init__(self, layers):
        self.layers = layers

    def __setitem__(self, name, value):
        self.layers[-1][name] = value


# ----------------------------------------------------------------------------
# The walk
# ----------------------------------------------------------------------------


def check_model(model):
    """The walk reads BERT's and ALBERT's modules by name."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in ("bert", "albert"):
        raise MiniBertError(f"the walk follows BERT's and ALBERT's modules; this is a {model_type!r} model "
                            f"(DeBERTa: read minibert/deberta.py, DisentangledSelfAttention.forward)")


def choice_error(model, layer, head):
    """What is wrong with the chosen layer and head, or None if both exist."""
    executed = len(model.encoder.depth_plan) * model.encoder.inner_group_num
    heads = model.config.num_attention_heads
    if not 0 <= layer < executed:
        return f"--layer {layer}: the model runs {executed} layers, numbered 0 to {executed - 1}"
    if not 0 <= head < heads:
        return f"--head {head}: the model has {heads} attention heads, numbered 0 to {heads - 1}"
    return None


def sentence_error(tokenizer, text):
    """Why `text` cannot be walked, or None. Text of only control or
    zero-width characters is not empty, but the tokenizer drops all of it
    and the walk would follow [CLS] [SEP] alone."""
    if not text.strip():
        return "the sentence is empty; give one sentence to follow"
    if len(tokenizer.encode(text).ids) <= 2:            # [CLS] and [SEP] only
        return (f"the sentence {text!r} has no tokens: the tokenizer drops control and zero-width characters; "
                f"give one sentence of words to follow")
    return None


def walk(model, tokenizer, text, layer=0, head=0, top_k=5, bf16=False):
    """Run `model` once on `text` (in eval mode: dropout off) and return every
    step as plain numbers (a dict that json.dump writes as it is;
    `format_walk` prints it). `layer` counts executed layers from 0. bf16:
    the run and the steps recomputed from it are under bfloat16 autocast
    (support/runtime.autocast), so the numbers are bfloat16's."""
    check_model(model)
    error = choice_error(model, layer, head)
    if error:
        raise MiniBertError(error)
    error = sentence_error(tokenizer, text)
    if error:
        raise MiniBertError(error)
    encoding = tokenizer.encode(text)
    input_ids = torch.tensor([encoding.ids])
    token_type_ids = torch.tensor([encoding.token_type_ids])
    attention_mask = torch.ones_like(input_ids)
    T, limit = input_ids.shape[1], model.config.max_position_embeddings
    if T > limit:
        raise MiniBertError(f"the sentence is {T} tokens long with [CLS] and [SEP]; this model reads at most {limit}")

    model.eval()
    precision = autocast(input_ids.device, bf16)
    recorder = Recorder(model)
    try:
        with torch.no_grad(), precision:
            output = model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    finally:
        recorder.remove()

    result = {"text": text, "model_type": model.config.model_type, "config": config_summary(model.config),
              "precision": "bfloat16 autocast" if bf16 else "float32",
              "tokens": [{"position": i, "token": t, "id": n, "segment": s}
                         for i, (t, n, s) in enumerate(zip(encoding.tokens, encoding.ids, encoding.token_type_ids))]}
    result["embeddings"] = embedding_step(recorder.embeddings, output.hidden_states[0])
    result["padding_mask"] = {"attention_mask": list(attention_mask.shape),
                              "bias": list(recorder.layers[0]["bias"].shape), "code": CODE["padding_mask"]}
    with torch.no_grad(), precision:
        result["layer"] = layer_step(recorder.layers[layer], layer, head, model.config)
    result["encoder"] = {"depth_plan": list(model.encoder.depth_plan),
                         "layers_run": [record["index"] for record in recorder.layers], "code": CODE["encoder"]}
    result["residual_norms"] = residual_norms(output.hidden_states)
    with torch.no_grad(), precision:
        result["mlm"] = mlm_step(model, tokenizer, output.hidden_states, input_ids[0], top_k)
    result["pooler"] = None if output.pooled_output is None else {
        "pooled_output": list(output.pooled_output.shape),
        "pair_logits": None if output.pair_logits is None else list(output.pair_logits.shape), "code": CODE["pooler"]}
    final = output.hidden_states[-1][0]
    result["final_hidden_state"] = {
        "shape": list(output.hidden_states[-1].shape), "values": final.tolist(),
        # The last layer's hook saw what the model returned: the walk and the model agree.
        "max_abs_diff_from_last_layer": (recorder.layers[-1]["output"][0] - final).abs().max().item(),
        "code": CODE["output"]}
    return result


def config_summary(config):
    return {"layers": config.num_hidden_layers, "hidden_size": config.hidden_size,
            "embedding_size": config.embedding_dim, "heads": config.num_attention_heads,
            "intermediate_size": config.intermediate_size, "vocab_size": config.vocab_size,
            "hidden_act": config.hidden_act, "written_out": config.written_out}


def embedding_step(recorded, hidden_state_0):
    """word, position and segment vectors, their sum, LayerNorm, (ALBERT) E -> H."""
    pieces = ["word", "position", "segment", "sum", "layer_norm"] + (["projection"] if "projection" in recorded else [])
    step = {"code": CODE["embeddings"], "layer_norm_code": CODE["embedding_layer_norm"], "pieces": {}}
    for name in pieces:
        tensor = recorded[name]
        vector = tensor[1] if tensor.dim() == 2 else tensor[0, 1]   # the first word piece (position 1)
        step["pieces"][name] = {"shape": list(tensor.shape), "position_1": vector.tolist(),
                                "mean": vector.mean().item(), "std": vector.std(unbiased=False).item()}
    step["hidden_state_0"] = list(hidden_state_0.shape)
    return step


def attention_weights(record, num_heads):
    """The (B, A, T, T) attention probabilities of one recorded layer.

    The fused kernel the model runs by default never forms them, so they
    come from the written-out `attention` on the recorded Q and K: it returns
    probs @ V, and with V the identity matrix that is the probabilities
    themselves."""
    q, k = split_heads(record["query"], num_heads), split_heads(record["key"], num_heads)
    B, A, T, _ = q.shape
    identity = torch.eye(T, dtype=q.dtype).expand(B, A, T, T)
    return attention(q, k, identity, record["bias"])


def layer_step(record, layer, head, config):
    """The shapes through one layer, one head's weights, and a check that the
    written-out attention gives the context the model computed."""
    A = config.num_attention_heads
    q, v = split_heads(record["query"], A), split_heads(record["value"], A)
    probs = attention_weights(record, A)
    context = attention(q, split_heads(record["key"], A), v, record["bias"])
    shapes = [
        ("input", record["input"], CODE["layer"]),
        ("query, key, value projections (each)", record["query"], CODE["projections"]),
        ("split into heads", q, CODE["split_heads"]),
        ("attention weights softmax(QK^T / sqrt(D) + bias)", probs, CODE["attention"]),
        ("context: weights @ V", context, CODE["attention"]),
        ("heads merged", record["merged"], CODE["merge_heads"]),
        ("output projection W^O", record["attended"], CODE["projections"]),
        ("add & LayerNorm", record["after_attention"], CODE["add_attention"]),
        ("feed-forward W1", record["w1"], CODE["feed_forward"]),
        (f"activation ({config.hidden_act})", record["activation"], activation_code(config.hidden_act)),
        ("feed-forward W2", record["feed_forward"], CODE["feed_forward"]),
        ("add & LayerNorm = the layer's output", record["output"], CODE["add_feed_forward"]),
    ]
    return {"layer": layer, "group": record["index"], "head": head,
            "stages": [{"stage": name, "shape": list(t.shape), "code": code} for name, t, code in shapes],
            "attention_weights": probs[0, head].tolist(),
            "written_out_attention_max_abs_diff": (merge_heads(context) - record["merged"]).abs().max().item()}


def activation_code(hidden_act):
    """Where the written-out form of the config's activation is defined."""
    formula = ACTIVATIONS[hidden_act][1]
    if formula.__module__ == "minibert.model" and formula.__name__ != "<lambda>":
        return [f"minibert/model.py: {formula.__name__}"]
    return ["minibert/model.py: Activation.forward"]


def residual_norms(hidden_states):
    """The L2 norm of every position's vector, per hidden state (0 = embeddings)."""
    rows = []
    for index, h in enumerate(hidden_states):
        norms = h[0].norm(dim=-1)
        rows.append({"hidden_state": index, "mean": norms.mean().item(), "min": norms.min().item(),
                     "max": norms.max().item(), "per_position": norms.tolist()})
    return rows


def mlm_step(model, tokenizer, hidden_states, input_ids, top_k):
    """Kao et al.'s probe on one sentence: the MLM head, trained on the last
    layer only, applied to every hidden state; top-k predictions per position."""
    if model.mlm_head is None:
        return None
    word_embeddings = model.embeddings.word_embeddings.weight
    positions = [i for i, n in enumerate(input_ids.tolist()) if n not in (tokenizer.cls_id, tokenizer.sep_id)]
    rows = []
    for index, h in enumerate(hidden_states):
        probabilities = model.mlm_head(h[0, positions], word_embeddings).float().softmax(dim=-1)   # (N, V)
        top = probabilities.topk(min(top_k, probabilities.shape[-1]), dim=-1)
        predictions = [[{"token": tokenizer.convert_ids_to_tokens(int(n)), "id": int(n), "probability": p.item()}
                        for n, p in zip(ids, probs)] for ids, probs in zip(top.indices, top.values)]
        correct = sum(p[0]["id"] == input_ids[i].item() for p, i in zip(predictions, positions))
        rows.append({"hidden_state": index, "predictions": predictions, "top1_correct": correct})
    return {"positions": positions, "layers": rows, "code": CODE["mlm_head"]}


# ----------------------------------------------------------------------------
# Printing
# ----------------------------------------------------------------------------


def numbers(values):
    return "[" + " ".join(f"{x:+.4f}" for x in values[:SHOWN]) + " ...]"


def short(token, width):
    return token if len(token) <= width else token[:width - 1] + "~"


def heading(number, title, code):
    return ["", f"{number}. {title}", *(f"   code: {c}" for c in code)]


def format_walk(result):
    c = result["config"]
    lines = [f'The walk of "{result["text"]}" through a {result["model_type"].upper()} model: {c["layers"]} layers, '
             f'hidden size {c["hidden_size"]}, {c["heads"]} heads, vocabulary {c["vocab_size"]}, '
             f'{"written-out formulas" if c["written_out"] else "fused kernels"}'
             f'{", under bfloat16 autocast" if result.get("precision", "float32") != "float32" else ""}.',
             "Shapes: (batch, positions, width); B = 1 sentence, T positions, H hidden, A heads, D = H / A."]
    lines += format_tokens(result)
    lines += format_embeddings(result["embeddings"], c)
    lines += heading(3, "The padding mask: 1 for a real token, 0 for padding, made additive", result["padding_mask"]["code"])
    lines.append(f"   attention_mask {tuple(result['padding_mask']['attention_mask'])} -> bias "
                 f"{tuple(result['padding_mask']['bias'])}: 0 where a key is real, -10000 where it is padding "
                 f"(one sentence: no padding)")
    lines += format_layer(result)
    lines += format_encoder(result)
    lines += format_mlm(result)
    lines += format_output(result)
    return "\n".join(lines)


def format_tokens(result):
    lines = heading(1, "Tokens and ids: [CLS] sentence [SEP], then each word piece's row in the vocabulary",
                    CODE["tokens"])
    lines.append(f"   {'position':>8}  {'token':<14} {'id':>6}  segment")
    lines += [f"   {t['position']:>8}  {t['token']:<14} {t['id']:>6}  {t['segment']}" for t in result["tokens"]]
    return lines


def format_embeddings(step, config):
    p = step["pieces"]
    lines = heading(2, "Embeddings: word + position + segment, then LayerNorm (BERT section 3, Figure 2)",
                    step["code"])
    rows = [("word_embeddings[input_ids]", "word"), ("position_embeddings[0..T-1]", "position"),
            ("token_type_embeddings[segments]", "segment"), ("sum", "sum"), ("LayerNorm(sum)", "layer_norm")]
    if "projection" in p:
        rows.append((f"projection E={config['embedding_size']} -> H={config['hidden_size']} (ALBERT)", "projection"))
    lines.append(f"   {'':<40}{'shape':<16}position 1 (the first word piece)")
    for label, name in rows:
        lines.append(f"   {label:<40}{str(tuple(p[name]['shape'])):<16}{numbers(p[name]['position_1'])}")
    lines.append(f"   LayerNorm brings each vector to mean 0 and std 1, then scales it by gamma and shifts it by beta: "
                 f"position 1 goes from mean {p['sum']['mean']:+.4f}, std {p['sum']['std']:.4f} "
                 f"to mean {p['layer_norm']['mean']:+.4f}, std {p['layer_norm']['std']:.4f}")
    lines += [f"   code: {code}" for code in step["layer_norm_code"]]
    lines.append(f"   dropout: off (the model is in eval mode); hidden state 0 {tuple(step['hidden_state_0'])}")
    return lines


def format_layer(result):
    step, tokens = result["layer"], [t["token"] for t in result["tokens"]]
    lines = heading(4, f"Inside layer {step['layer']} (weights of layer {step['group']}): "
                       f"attention, then feed-forward, each in a residual sum with LayerNorm", [])
    for stage in step["stages"]:
        lines.append(f"   {stage['stage']:<50}{str(tuple(stage['shape'])):<15}code: {stage['code'][0]}")
    shown = min(len(tokens), MAX_COLUMNS)
    lines.append("")
    lines.append(f"   attention weights of head {step['head']} in layer {step['layer']}: row = query, "
                 f"column = key, each row sums to 1" + ("" if shown == len(tokens) else
                                                      f" (first {shown} positions; --json has all)"))
    lines.append("   " + " " * 10 + "".join(f"{short(t, 6):>7}" for t in tokens[:shown]))
    for token, row in zip(tokens[:shown], step["attention_weights"]):
        lines.append(f"   {short(token, 9):<10}" + "".join(f"{w:7.2f}" for w in row[:shown]))
    lines.append(f"   the written-out attention gives the context the model computed: max |difference| "
                 f"{step['written_out_attention_max_abs_diff']:.1e}")
    return lines


def format_encoder(result):
    step = result["encoder"]
    lines = heading(5, "The encoder: the layers in the order of the depth plan; the residual stream's norm",
                    step["code"])
    lines.append(f"   depth plan (group run at each depth): {step['depth_plan']}")
    lines.append(f"   {'hidden state':<24}{'mean norm':>10}{'min':>10}{'max':>10}")
    for row in result["residual_norms"]:
        name = "0 (embeddings)" if row["hidden_state"] == 0 else f"{row['hidden_state']} (after layer {row['hidden_state'] - 1})"
        lines.append(f"   {name:<24}{row['mean']:>10.3f}{row['min']:>10.3f}{row['max']:>10.3f}")
    return lines


def format_mlm(result):
    mlm = result["mlm"]
    if mlm is None:
        return heading(6, "The MLM head on every layer (Kao et al. 2020, section 3)", CODE["mlm_head"]) + [
            "   this model has no MLM head (a Hugging Face BertModel file, e.g.); probe.py --fit-head fits one"]
    lines = heading(6, "The MLM head on every layer (Kao et al. 2020, section 3): the top prediction at each "
                       "position, read from each hidden state", mlm["code"])
    layers = mlm["layers"]
    lines.append(f"   {'input':<12}" + "".join(f"{'h' + str(r['hidden_state']):>10}" for r in layers))
    for row, position in enumerate(mlm["positions"]):
        token = result["tokens"][position]["token"]
        lines.append(f"   {short(token, 11):<12}" + "".join(
            f"{short(r['predictions'][row][0]['token'], 9):>10}" for r in layers))
    lines.append(f"   {'correct':<12}" + "".join(f"{str(r['top1_correct']) + '/' + str(len(mlm['positions'])):>10}"
                                                 for r in layers))
    return lines


def format_output(result):
    final = result["final_hidden_state"]
    lines = heading(7, "The output: the last hidden state, what fine-tuning and the heads read", final["code"])
    if result["pooler"] is not None:
        lines.append(f"   pooled output tanh(W h_[CLS]) {tuple(result['pooler']['pooled_output'])}: "
                     f"{result['pooler']['code'][0]}")
    lines.append(f"   model(...).hidden_states[-1] {tuple(final['shape'])}, the first {SHOWN} numbers per position "
                 f"(equal to the last layer's output above: max |difference| {final['max_abs_diff_from_last_layer']:.1e})")
    for token, values in zip(result["tokens"], final["values"]):
        lines.append(f"   {short(token['token'], 12):<14}{numbers(values)}")
    return lines


# ----------------------------------------------------------------------------
# The pointers are real: every "file: function" names a definition
# ----------------------------------------------------------------------------


def defined_names(path):
    """'f' and 'Class.method' for every function and method defined in a Python file."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{item.name}" for item in node.body if isinstance(item, ast.FunctionDef)}
    return names


def missing_code(pointers, root=REPOSITORY):
    """The pointers ("file: function") whose function is not defined in that file."""
    missing = []
    for pointer in pointers:
        file, function = pointer.split(": ")
        path = Path(root) / file
        if not path.is_file() or function not in defined_names(path):
            missing.append(pointer)
    return missing


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------


parser = ArgumentParser(prog="python -m minibert.walkthrough", description=__doc__, formatter_class=HelpFormatter)
parser.add_argument("sentence", help="the sentence to follow (quote it)")
parser.add_argument("--model", default=None,
                    help="model folder, file inside one, hub id (owner/name[@revision]) or known name "
                         "(default: the bundled model)")
parser.add_argument("--layer", type=int, default=0, metavar="N",
                    help="which executed layer to open, 0 = the first (default: 0)")
parser.add_argument("--head", type=int, default=0, metavar="N", help="which attention head to show (default: 0)")
parser.add_argument("--top", type=positive_int, default=5, metavar="K", help="MLM predictions kept per position in --json")
parser.add_argument("--written-out", action="store_true",
                    help="run the written-out formulas (attention, GELU, LayerNorm) instead of the fused kernels")
parser.add_argument("--json", type=output_file, default=None, metavar="FILE", help="write every number as JSON")
add_bf16(parser, "the model's run and the steps recomputed from it")


@script_main
def main(argv=None):
    args = parser.parse_args(argv)
    if not args.sentence.strip():
        parser.error("the sentence is empty; give one sentence to follow")
    from minibert.support.outputs import safe_run
    safe_run(inputs={"--model": args.model}, files={"--json": args.json})
    from minibert.checkpoints import load_with_tokenizer

    model, tokenizer = load_with_tokenizer(args.model)       # one snapshot of the folder
    check_model(model)
    error = choice_error(model, args.layer, args.head) or sentence_error(tokenizer, args.sentence)
    if error:
        parser.error(error)
    if args.written_out:
        model.use_written_out()
    try:
        result = walk(model, tokenizer, args.sentence, layer=args.layer, head=args.head, top_k=args.top,
                      bf16=args.bf16)
    except NotImplementedError as e:   # a student copy with an exercise still blank
        raise MiniBertError(f"the model reached an exercise not yet written ({e})") from None
    print(format_walk(result))
    if args.json:
        make_parent_folder(args.json)
        write_json(args.json, result)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    run(main)
