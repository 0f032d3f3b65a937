"""duplicate.py / minibert.duplication: deeper models by duplicating layers (Kao et al. 2020)."""

import importlib.util
import json
import sys

import pytest
import torch

from minibert import duplication
from minibert.checkpoints import load_pretrained
from minibert.commands.duplicate import write_model
from minibert.commands.probe import recorded_layer_order
from minibert.support import MiniBertError
from helpers import error_line, run_script, run_script_in_process
from tiny_models import save_tiny_model


TOLERANCE = 1e-5


def batch(vocab_size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, vocab_size, (3, 10), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    attention_mask[2, 3:] = 0
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, 5:] = 1
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)


def run_model(model, inputs):
    with torch.no_grad():
        return model(inputs["input_ids"], attention_mask=inputs["attention_mask"],
                     token_type_ids=inputs["token_type_ids"])


def attention_bias(attention_mask):
    return (1.0 - attention_mask[:, None, None, :].float()) * -10000.0


def assert_close(a, b, what):
    """1e-5, relative to the largest value when that exceeds 1 (the tiny models'
    unit-scale embeddings give MLM logits up to ~50, where float32 rounding
    alone is ~1e-5)."""
    diff = (a - b).abs().max().item()
    allowed = TOLERANCE * max(1.0, b.abs().max().item())
    assert diff <= allowed, f"{what}: max abs diff {diff:.2e} > {allowed:.2e}"


def assert_same_tensors(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.fixture
def bert(tmp_path):
    save_tiny_model(tmp_path / "bert", num_hidden_layers=4)
    return load_pretrained(tmp_path / "bert")


# ----------------------------------------------------------------------------
# Orders
# ----------------------------------------------------------------------------


def test_duplicate_order_is_the_papers_scheme():
    assert duplication.duplicate_order(12, [0, 1, 2]) == [0, 0, 1, 1, 2, 2] + list(range(3, 12))
    assert duplication.duplicate_order(4, [3, 1]) == [0, 1, 1, 2, 3, 3]
    assert duplication.duplicate_order(3, [1, 1]) == [0, 1, 1, 1, 2]        # listed twice: two copies


# ----------------------------------------------------------------------------
# Untied (the paper's scheme)
# ----------------------------------------------------------------------------


def test_untied_duplication_puts_a_deep_copy_of_the_right_layer_at_each_depth(bert):
    order = [0, 0, 1, 2, 2, 3]
    deeper = duplication.deepen(bert, order)
    assert deeper.config.num_hidden_layers == 6 and deeper.config.layer_order is None
    assert len(deeper.encoder.layers) == 6
    for depth, source in enumerate(order):
        assert_same_tensors(deeper.encoder.layers[depth], bert.encoder.layers[source])
        ours = {p.data_ptr() for p in deeper.encoder.layers[depth].parameters()}
        assert not ours & {p.data_ptr() for p in bert.parameters()}, "copies must own their storage"
    assert deeper.encoder.layers[0].attention.query.weight.data_ptr() != \
        deeper.encoder.layers[1].attention.query.weight.data_ptr()
    for name in ("embeddings", "pooler", "mlm_head", "pair_head"):
        assert_same_tensors(getattr(deeper, name), getattr(bert, name))


def test_the_copy_applies_the_original_layer_again(bert):
    deeper = duplication.deepen(bert, [0, 0, 1, 2, 2, 3])
    inputs = batch(bert.config.vocab_size)
    original, states = run_model(bert, inputs).hidden_states, run_model(deeper, inputs).hidden_states
    real = inputs["attention_mask"].bool()
    bias = attention_bias(inputs["attention_mask"])
    assert len(states) == 7
    assert_close(states[1][real], original[1][real], "after layer 0")
    with torch.no_grad():
        again = bert.encoder.layers[0](states[1], bias)         # layer 0 applied to its own output
        again_2 = bert.encoder.layers[2](states[4], bias)
    assert_close(states[2][real], again[real], "copy of layer 0")
    assert_close(states[5][real], again_2[real], "copy of layer 2")


def test_untied_folder_loads_in_transformers_with_equal_outputs(bert, tmp_path, transformers):
    deeper = duplication.deepen(bert, [0, 0, 1, 1, 2, 3])
    write_model(deeper, tmp_path / "out", source_dir=bert.source_dir)
    assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in (tmp_path / "out").iterdir()}
    compare_with_transformers(tmp_path / "out", deeper, transformers.BertForPreTraining)
    reloaded = load_pretrained(tmp_path / "out")
    assert reloaded.config.num_hidden_layers == 6 and len(reloaded.encoder.layers) == 6


def compare_with_transformers(folder, ours, hf_class):
    hf = hf_class.from_pretrained(folder).eval()
    inputs = batch(ours.config.vocab_size)
    mine = run_model(ours, inputs)
    with torch.no_grad():
        theirs = hf(**inputs, output_hidden_states=True)
    real = inputs["attention_mask"].bool()
    assert len(theirs.hidden_states) == len(mine.hidden_states)
    for depth, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {depth}")
    assert_close(mine.mlm_logits[real], theirs.prediction_logits[real], "MLM logits")
    nsp = theirs.sop_logits if hasattr(theirs, "sop_logits") else theirs.seq_relationship_logits
    assert_close(mine.pair_logits, nsp, "NSP/SOP logits")


# ----------------------------------------------------------------------------
# Tied (ablation)
# ----------------------------------------------------------------------------


def modules_run(model, inputs):
    """The layer modules the encoder actually calls, depth by depth (forward hooks)."""
    ran = []
    hooks = [layer.register_forward_hook(lambda module, args, output: ran.append(module))
             for layer in model.encoder.layers]
    run_model(model, inputs)
    for hook in hooks:
        hook.remove()
    return ran


def test_tied_duplication_shares_modules_and_round_trips(bert, tmp_path, transformers):
    deeper = duplication.deepen(bert, [0, 0, 1, 1, 2, 3], tied=True)
    assert deeper.config.layer_order == [0, 0, 1, 1, 2, 3] and len(deeper.encoder.layers) == 4
    for distinct in range(4):
        assert_same_tensors(deeper.encoder.layers[distinct], bert.encoder.layers[distinct])
    inputs = batch(bert.config.vocab_size)
    ran = modules_run(deeper, inputs)
    assert ran[0] is ran[1] and ran[2] is ran[3] and len({id(m) for m in ran}) == 4
    assert ran[0].attention.query.weight.data_ptr() == deeper.encoder.layers[0].attention.query.weight.data_ptr()
    states = run_model(deeper, inputs).hidden_states
    with torch.no_grad():
        again = deeper.encoder.layers[0](states[1], attention_bias(inputs["attention_mask"]))
    real = inputs["attention_mask"].bool()
    assert_close(states[2][real], again[real], "tied copy of layer 0")

    write_model(deeper, tmp_path / "tied", source_dir=bert.source_dir)
    config = json.loads((tmp_path / "tied" / "config.json").read_text())
    assert config["num_hidden_layers"] == 6 and config["layer_order"] == [0, 0, 1, 1, 2, 3]
    reloaded = load_pretrained(tmp_path / "tied")
    assert reloaded.config.depth_plan() == [0, 0, 1, 1, 2, 3] and len(reloaded.encoder.layers) == 4
    # Still tied after the round trip: the same module object (so the same storage) runs at two depths.
    assert modules_run(reloaded, inputs) == [reloaded.encoder.layers[i] for i in (0, 0, 1, 1, 2, 3)]
    for a, b in zip(run_model(reloaded, inputs).hidden_states, states):
        assert_close(a[real], b[real], "reloaded tied model")
    # transformers has no tied layers: it loads every depth as its own copy, same outputs.
    compare_with_transformers(tmp_path / "tied", deeper, transformers.BertForPreTraining)


def test_tied_order_without_repeats_is_a_plain_bert(bert):
    deeper = duplication.deepen(bert, [2, 0, 3], tied=True)
    assert deeper.config.layer_order is None and deeper.config.num_hidden_layers == 3
    assert_same_tensors(deeper.encoder.layers[0], bert.encoder.layers[2])


def test_duplicating_a_tied_model_uses_its_depths(bert):
    tied = duplication.deepen(bert, [0, 0, 1], tied=True)          # depths run layers 0, 0, 1
    untied = duplication.deepen(tied, [1, 2, 2])                    # depth 1 = layer 0, depth 2 = layer 1
    assert_same_tensors(untied.encoder.layers[0], bert.encoder.layers[0])
    assert_same_tensors(untied.encoder.layers[2], bert.encoder.layers[1])


# ----------------------------------------------------------------------------
# ALBERT: run the shared group more times
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("groups,layers,k", [(1, 3, 2), (2, 4, 2)])
def test_albert_repeat_adds_depth_and_transformers_agrees(tmp_path, groups, layers, k, transformers):
    save_tiny_model(tmp_path / "albert", model_type="albert", num_hidden_layers=layers, num_hidden_groups=groups)
    albert = load_pretrained(tmp_path / "albert")
    deeper = duplication.repeat_albert(albert, k)
    assert deeper.config.num_hidden_layers == layers + k and len(deeper.encoder.layers) == groups
    assert_same_tensors(deeper, albert)
    inputs = batch(albert.config.vocab_size)
    assert len(run_model(deeper, inputs).hidden_states) == layers + k + 1
    write_model(deeper, tmp_path / "out", source_dir=albert.source_dir)
    compare_with_transformers(tmp_path / "out", deeper, transformers.AlbertForPreTraining)


def run_in_order(model, sources):
    """The source model's own layers (groups) run in `sources`, shared, not
    copied: what an untied copy must compute before it is fine-tuned."""
    import copy
    reference = copy.deepcopy(model)
    if hasattr(reference.encoder, "depth_plan"):             # BERT, ALBERT: the plan says which group runs
        reference.encoder.depth_plan = list(sources)
    else:                                                    # DeBERTa: the layers run in list order
        reference.encoder.layers = torch.nn.ModuleList(reference.encoder.layers[i] for i in sources)
    return reference


@pytest.mark.parametrize("groups,layers,inner", [(1, 3, 1), (2, 4, 1), (1, 2, 2)])
def test_albert_duplicate_unties_the_shared_group_and_transformers_agrees(tmp_path, groups, layers, inner,
                                                                          transformers):
    save_tiny_model(tmp_path / "albert", model_type="albert", num_hidden_layers=layers, num_hidden_groups=groups,
                    inner_group_num=inner)
    albert = load_pretrained(tmp_path / "albert")
    order = duplication.duplicate_order(layers, [0, 1])
    deeper = duplication.deepen(albert, order)
    sources = duplication.source_layer_order(albert, order)
    depth = layers + 2
    assert deeper.config.num_hidden_layers == depth and deeper.config.num_hidden_groups == depth
    assert len(deeper.encoder.layers) == depth * inner                    # a distinct group at every depth
    for d, g in enumerate(sources):                                       # each a copy, owning its storage
        for i in range(inner):
            ours, source = deeper.encoder.layers[d * inner + i], albert.encoder.layers[g * inner + i]
            assert_same_tensors(ours, source)
            assert ours.attention.query.weight.data_ptr() != source.attention.query.weight.data_ptr()
    inputs = batch(albert.config.vocab_size)
    expected = run_model(run_in_order(albert, sources), inputs)
    mine = run_model(deeper, inputs)
    for a, b in zip(mine.hidden_states, expected.hidden_states, strict=True):
        assert torch.equal(a, b)
    write_model(deeper, tmp_path / "out", source_dir=albert.source_dir)
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (written["num_hidden_layers"], written["num_hidden_groups"], written["inner_group_num"]) == \
        (depth, depth, inner)
    compare_with_transformers(tmp_path / "out", deeper, transformers.AlbertForPreTraining)
    assert_same_tensors(load_pretrained(tmp_path / "out"), deeper)


# ----------------------------------------------------------------------------
# DeBERTa: the relative table is shared by every layer already
# ----------------------------------------------------------------------------


def tiny_deberta(folder, shape):
    from minibert.checkpoints import save_pretrained
    from minibert.deberta import DebertaConfig, DebertaModel
    from test_deberta import TINY, randomize
    from test_deberta_checkpoints import SHAPES
    model = randomize(DebertaModel(DebertaConfig(**TINY, **SHAPES[shape]), with_mlm_head=True), seed=1)
    save_pretrained(model, folder)
    return load_pretrained(folder)


@pytest.mark.parametrize("shape", ["v3", "v2 conv, own relative projections", "v1"])
def test_deberta_duplicate_writes_a_deeper_model_that_transformers_loads_with_equal_outputs(
        shape, tmp_path, capsys, transformers):
    from minibert.checkpoints import huggingface_state_dict
    deberta = tiny_deberta(tmp_path / "deberta", shape)
    code, captured = run_script_in_process(capsys, "duplicate.py", "--model", tmp_path / "deberta",
                                           "--duplicate", "0,1", "--output", tmp_path / "out")
    assert code == 0, captured.err
    assert "5 layers (from 3), order 0,0,1,1,2" in captured.out
    deeper = load_pretrained(tmp_path / "out")
    assert type(deeper) is type(deberta) and deeper.config.num_hidden_layers == 5
    theirs_named = huggingface_state_dict(deberta)
    for name, tensor in huggingface_state_dict(deeper).items():      # the table P and the EMD's table unchanged
        if ".layer." not in name:
            assert torch.equal(tensor, theirs_named[name]), name

    inputs = batch(deberta.config.vocab_size)
    expected = run_model(run_in_order(deberta, [0, 0, 1, 1, 2]), inputs)
    mine = run_model(deeper, inputs)
    real = inputs["attention_mask"].bool()
    for depth, (a, b) in enumerate(zip(mine.hidden_states, expected.hidden_states, strict=True)):
        assert torch.equal(a, b), f"hidden state {depth}"
    assert torch.equal(mine.mlm_logits, expected.mlm_logits)               # EMD reruns the same last layer

    hf_class = transformers.DebertaModel if deberta.config.is_v1 else transformers.DebertaV2Model
    hf, info = hf_class.from_pretrained(str(tmp_path / "out"), output_loading_info=True)
    assert not info["missing_keys"] and not info["mismatched_keys"], info
    with torch.no_grad():
        theirs = hf.eval()(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                           output_hidden_states=True)
    assert len(theirs.hidden_states) == 6
    for depth, (a, b) in enumerate(zip(mine.hidden_states, theirs.hidden_states)):
        assert_close(a[real], b[real], f"hidden state {depth}")


def test_deberta_tied_and_repeat_are_refused_saying_why(tmp_path):
    deberta = tiny_deberta(tmp_path / "deberta", "v3")
    with pytest.raises(MiniBertError, match="tied: minibert's DeBERTa has no layer_order"):
        duplication.deepen(deberta, [0, 0, 1, 2], tied=True)
    with pytest.raises(MiniBertError, match="k: only an ALBERT's shared layers run more times; this DebertaModel's"):
        duplication.repeat_albert(deberta, 2)


# ----------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------


def test_bad_input_raises(bert, tmp_path):
    save_tiny_model(tmp_path / "albert2", model_type="albert", num_hidden_layers=4, num_hidden_groups=2)
    albert2 = load_pretrained(tmp_path / "albert2")
    cases = [
        (lambda: duplication.duplicate_order(4, [4]), "index 4 is out of range.*0..3"),
        (lambda: duplication.deepen(bert, [0, -1]), "index -1 is out of range"),
        (lambda: duplication.deepen(bert, []), "layer_order: empty"),
        (lambda: duplication.deepen(albert2, [0, 0], tied=True), "tied: ALBERT.*repeat_albert"),
        (lambda: duplication.repeat_albert(bert, 2), "BertModel's layers are distinct: duplicate them instead"),
        (lambda: duplication.repeat_albert(albert2, 0), "k 0: expected a positive integer"),
        (lambda: duplication.repeat_albert(albert2, 1), "multiples of 2"),
    ]
    for call, message in cases:
        with pytest.raises(MiniBertError, match=message) as raised:
            call()
        assert "--" not in str(raised.value), "a lesson's message names its parameters, not a script's flags"


# ----------------------------------------------------------------------------
# The script
# ----------------------------------------------------------------------------


def test_cli_help_a_real_run_and_a_bad_index(tmp_path):
    help_run = run_script("duplicate.py", "--help")
    assert help_run.returncode == 0
    assert all(flag in help_run.stdout for flag in ("--duplicate", "--order", "--repeat", "--tied", "layer_order"))
    save_tiny_model(tmp_path / "bert")
    run_ok = run_script("duplicate.py", "--model", tmp_path / "bert", "--duplicate", "0,2",
                        "--output", tmp_path / "out", "--probe", "--max-sentences", 5)
    assert run_ok.returncode == 0, run_ok.stderr
    assert "5 layers (from 3), order 0,0,1,2,2" in run_ok.stdout
    assert "original" in run_ok.stdout and "layer 0 (copy)" in run_ok.stdout
    assert json.loads((tmp_path / "out" / "config.json").read_text())["num_hidden_layers"] == 5
    assert json.loads((tmp_path / "out" / "duplication.json").read_text())["order"] == [0, 0, 1, 2, 2]
    written = load_pretrained(tmp_path / "out")
    assert recorded_layer_order(tmp_path / "out", written.config) == [0, 0, 1, 2, 2]  # probe.py's labels
    bad = run_script("duplicate.py", "--model", tmp_path / "bert", "--duplicate", "0,7", "--output", tmp_path / "bad")
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: --duplicate: layer index 7 is out of range")
    assert not (tmp_path / "bad").exists()


def test_probe_writes_both_models_as_json_in_percent_and_a_plot(tmp_path, capsys, monkeypatch):
    save_tiny_model(tmp_path / "bert")
    args = ("--model", tmp_path / "bert", "--duplicate", "0", "--max-sentences", 3)
    code, captured = run_script_in_process(capsys, "duplicate.py", *args, "--output", tmp_path / "a",
                                           "--json", tmp_path / "probe.json")
    assert code == 2 and "--json writes the probe's results: add --probe" in error_line(code, captured)
    code, captured = run_script_in_process(capsys, "duplicate.py", *args, "--output", tmp_path / "a", "--probe",
                                           "--json", tmp_path / "probe.json")
    assert code == 0, captured.err
    values = json.loads((tmp_path / "probe.json").read_text())
    assert [len(values[name]["layers"]) for name in ("original", "deeper")] == [4, 5]
    assert [values[name]["model"] for name in ("original", "deeper")] == [str(tmp_path / "bert"), str(tmp_path / "a")]
    top1 = [layer["top1_percent"] for layer in values["deeper"]["layers"]]
    assert top1[0] == pytest.approx(values["original"]["layers"][0]["top1_percent"])   # the same embeddings
    assert max(top1) > 1.0 and all(0.0 <= v <= 100.0 for v in top1)                    # percent, not fractions
    if importlib.util.find_spec("matplotlib") is not None:
        code, captured = run_script_in_process(capsys, "duplicate.py", *args, "--output", tmp_path / "b", "--probe",
                                               "--plot", tmp_path / "probe.png")
        assert code == 0 and (tmp_path / "probe.png").read_bytes()[:4] == b"\x89PNG"
    monkeypatch.setitem(sys.modules, "matplotlib", None)                # as if it were not installed
    code, captured = run_script_in_process(capsys, "duplicate.py", *args, "--output", tmp_path / "c", "--probe",
                                           "--plot", tmp_path / "c.png")
    assert code == 1 and "needs matplotlib" in captured.err and not (tmp_path / "c").exists()   # before the run


def test_cli_bad_arguments_are_usage_errors_or_one_line_errors(tmp_path, capsys):
    save_tiny_model(tmp_path / "bert")
    save_tiny_model(tmp_path / "albert", model_type="albert")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    out = tmp_path / "out"
    for args, status, expected in [     # usage errors exit with 2, errors met while running with 1
        (("--model", tmp_path / "bert", "--duplicate", "0", "--order", "0,0", "--output", out), 2, "not allowed with"),
        (("--model", tmp_path / "bert", "--order", "", "--output", out), 1, "--order: empty"),
        (("--model", tmp_path / "bert", "--order", "0,3", "--output", out), 1, "index 3 is out of range"),
        (("--model", tmp_path / "bert", "--repeat", "2", "--output", out), 1, "--repeat: only an ALBERT's shared layers run more times; this BertModel's layers are distinct"),
        (("--model", tmp_path / "albert", "--duplicate", "0", "--tied", "--output", out), 1,
         "--tied: ALBERT's layers are already shared; its tied form runs the shared group more times"),
        (("--model", tmp_path / "albert", "--repeat", "1", "--tied", "--output", out), 2,
         "--tied: ALBERT's layers are always shared; --repeat needs no --tied"),
        (("--model", tmp_path / "bert", "--duplicate", "0", "--output", tmp_path / "full"), 1, "--force"),
        (("--model", tmp_path / "bert", "--duplicate", "0"), 2, "--output"),
    ]:
        code, captured = run_script_in_process(capsys, "duplicate.py", *args)
        assert code == status and expected in error_line(code, captured), (args, captured.err)
    code, captured = run_script_in_process(capsys, "duplicate.py", "--model", tmp_path / "albert", "--repeat", "2",
                                           "--output", out)
    assert code == 0 and "5 layers (from 3)" in captured.out


def test_output_is_never_the_source_folder_nor_inside_or_around_it_even_with_force(tmp_path, capsys):
    save_tiny_model(tmp_path / "models" / "bert")
    source = tmp_path / "models" / "bert"
    before = {p.name: p.read_bytes() for p in source.iterdir()}
    for output in (source, source / "deeper", tmp_path / "models"):
        code, captured = run_script_in_process(capsys, "duplicate.py", "--model", source, "--duplicate", "0",
                                               "--output", output, "--force")
        lines = captured.err.strip().splitlines()
        assert code == 1 and len(lines) == 1 and "the folder of the model being copied" in lines[0], captured.err
    assert {p.name: p.read_bytes() for p in source.iterdir()} == before
    (tmp_path / "file").write_text("x")
    for args, expected in [(("--repeat", "0"), "--repeat: expected an integer in [1, 1000], got 0"),
                           (("--duplicate", "0", "--batch-size", "-1"), "--batch-size: expected an integer >= 1"),
                           (("--duplicate", "0", "--max-sentences", "0"), "--max-sentences: expected an integer >= 1")]:
        code, captured = run_script_in_process(capsys, "duplicate.py", "--model", source, "--output",
                                               tmp_path / "out", *args)
        assert code == 2 and expected in error_line(code, captured), captured.err
    code, captured = run_script_in_process(capsys, "duplicate.py", "--model", source, "--duplicate", "0",
                                           "--output", tmp_path / "file")
    assert code == 2 and "--output: " + str(tmp_path / "file") + " is a file" in error_line(code, captured)


def test_sizes_beyond_the_depth_limit_are_refused_before_any_copy(tmp_path, capsys):
    save_tiny_model(tmp_path / "bert")
    save_tiny_model(tmp_path / "albert", model_type="albert")       # 3 layers, one shared group
    albert = load_pretrained(tmp_path / "albert")
    duplication.repeat_albert(albert, 997)                          # 1,000 layers: the limit itself is allowed
    with pytest.raises(MiniBertError, match="k 998: would make a model of 1,001 layers; the limit is 1,000"):
        duplication.repeat_albert(albert, 998)
    with pytest.raises(MiniBertError, match="duplicate: would make a model of 1,003 layers"):
        duplication.duplicate_order(3, [0] * 1000)
    out = tmp_path / "out"
    for args, status, expected in [
        (("--model", tmp_path / "albert", "--repeat", "100000000"), 2,
         "argument --repeat: expected an integer in [1, 1000], got 100000000"),
        (("--model", tmp_path / "albert", "--repeat", "998"), 1, "1,001 layers; the limit is 1,000"),
        (("--model", tmp_path / "bert", "--order", ",".join(["0"] * 60000)), 1,
         "--order: would make a model of 60,000 layers; the limit is 1,000"),
    ]:
        code, captured = run_script_in_process(capsys, "duplicate.py", *args, "--output", out)
        assert code == status and expected in error_line(code, captured), captured.err
    assert not out.exists()
    assert "at most 1,000 layers" in run_script("duplicate.py", "--help").stdout


def test_probe_inputs_are_read_before_the_output_is_written(tmp_path, capsys):
    save_tiny_model(tmp_path / "bert")
    (tmp_path / "empty.txt").write_text("\n\n")
    for text, expected in [(tmp_path / "missing.txt", "missing.txt: file not found"),
                           (tmp_path / "empty.txt", "empty.txt: no sentences")]:
        code, captured = run_script_in_process(capsys, "duplicate.py", "--model", tmp_path / "bert", "--duplicate",
                                               "0", "--output", tmp_path / "out", "--probe", "--text", text)
        assert code == 1 and expected in error_line(code, captured)
        assert not (tmp_path / "out").exists()                         # a rerun needs no --force


def test_a_fine_tuned_folder_is_refused_naming_what_would_be_dropped(tmp_path, capsys):
    save_tiny_model(tmp_path / "tuned")
    (tmp_path / "tuned" / "task.json").write_text(json.dumps({"task": "sst2"}))
    code, captured = run_script_in_process(capsys, "duplicate.py", "--model", tmp_path / "tuned", "--duplicate", "0",
                                           "--output", tmp_path / "out")
    line = error_line(code, captured)
    assert code == 1 and "a fine-tuned sst2 model (finetune.py's, task.json)" in line
    assert "Give the pretrained model" in line
    assert not (tmp_path / "out").exists()


# ---- coursework exercises: duplicate-untied, duplicate-tied -------------------------------------


def _small_bert():
    from minibert.model import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=12, max_position_embeddings=16)
    return BertModel(config).eval()


def test_exercise_duplicate_untied_gives_every_depth_its_own_copy():
    model = _small_bert()
    deeper = duplication.copy_layers(model, 5, [0, 0, 1, 1, 2])
    assert deeper.config.num_hidden_layers == 5 and deeper.config.layer_order is None
    assert deeper.config.num_hidden_groups is None and len(deeper.encoder.layers) == 5
    for new_index, source_index in enumerate([0, 0, 1, 1, 2]):
        new, source = deeper.encoder.layers[new_index].state_dict(), model.encoder.layers[source_index].state_dict()
        assert new.keys() == source.keys()
        assert all(torch.equal(new[name], source[name]) for name in source)
    # untied: the two copies of layer 0 own their storage, apart from each other and from the source
    layers = list(deeper.encoder.layers) + [model.encoder.layers[0]]
    assert len({next(layer.parameters()).data_ptr() for layer in layers}) == 6
    with torch.no_grad():
        next(deeper.encoder.layers[0].parameters()).add_(1.0)
    assert not torch.equal(next(deeper.encoder.layers[0].parameters()), next(deeper.encoder.layers[1].parameters()))
    # embeddings and heads: copied unchanged
    torch.testing.assert_close(
        deeper.embeddings.word_embeddings.weight, model.embeddings.word_embeddings.weight, rtol=0, atol=0)
    torch.testing.assert_close(deeper.pooler.dense.weight, model.pooler.dense.weight, rtol=0, atol=0)
    assert not deeper.training


def test_exercise_duplicate_untied_through_deepen_bert():
    model = _small_bert()
    deeper = duplication.deepen(model, [0, 1, 1, 2])
    assert deeper.config.num_hidden_layers == 4 and deeper.config.layer_order is None
    for new_index, source_index in enumerate([0, 1, 1, 2]):
        new, source = deeper.encoder.layers[new_index].state_dict(), model.encoder.layers[source_index].state_dict()
        assert all(torch.equal(new[name], source[name]) for name in source)
    assert deeper.encoder.layers[1] is not deeper.encoder.layers[2]


def test_exercise_duplicate_tied_keeps_each_layer_once():
    assert duplication.tied_layers([0, 0, 1, 1, 2, 2, 3]) == ([0, 1, 2, 3], [0, 0, 1, 1, 2, 2, 3])
    assert duplication.tied_layers([2, 0, 2, 1]) == ([2, 0, 1], [0, 1, 0, 2])
    assert duplication.tied_layers([3, 3, 3]) == ([3], [0, 0, 0])


def test_exercise_duplicate_tied_nothing_repeating_is_an_ordinary_bert():
    assert duplication.tied_layers([0, 1, 2]) == ([0, 1, 2], None)
    assert duplication.tied_layers([2, 0]) == ([2, 0], None)


def test_a_student_folder_is_named_for_what_it_is(tmp_path, capsys):
    (tmp_path / "student").mkdir()
    for name in ("student.json", "student.safetensors", "vocab.txt"):
        (tmp_path / "student" / name).write_text("{}")
    code, captured = run_script_in_process(capsys, "duplicate.py", "--model", tmp_path / "student", "--duplicate",
                                           "0", "--output", tmp_path / "out")
    line = error_line(code, captured)
    assert code == 1 and "a distilled student (distill.py's BiLSTM, student.json), not a BERT-family encoder" in line
    assert not (tmp_path / "out").exists()
