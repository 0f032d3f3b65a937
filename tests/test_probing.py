"""probe.py / minibert.probing: the MLM head applied to every layer (Kao et al. 2020).

The per-layer numbers are checked against an independent computation with
transformers: its `output_hidden_states` and its own MLM head module, applied
by hand to each hidden state of the folder minibert wrote."""

import json
import math
import time

import pytest
import torch
import torch.nn.functional as F

from minibert import probing
from minibert.checkpoints import load_pretrained
from minibert.support import MiniBertError
from minibert.model import BertModel, MaskedLMHead
from minibert.commands.probe import read_sentences
from minibert.tokenization import load_tokenizer
from helpers import error_line, run_script, run_script_in_process
from tiny_models import SENTENCES, save_tiny_model, tiny_config, write_vocab


def reference_scores(transformers, folder, batch, cls_id, sep_id, model_type):
    """Top-1, top-5 and mean cross-entropy per layer, computed with transformers
    from one padded batch (the tokenizer has tests of its own)."""
    if model_type == "albert":
        hf = transformers.AlbertForMaskedLM.from_pretrained(folder).eval()
        head = hf.predictions
    else:
        hf = transformers.BertForMaskedLM.from_pretrained(folder).eval()
        head = hf.cls.predictions
    with torch.no_grad():
        states = hf(**batch, output_hidden_states=True).hidden_states
    ids = batch["input_ids"]
    real = batch["attention_mask"].bool() & (ids != cls_id) & (ids != sep_id)
    targets = ids[real]
    scores = []
    for h in states:
        with torch.no_grad():
            logits = head(h)[real]
        top5 = logits.topk(5, dim=-1).indices
        scores.append(dict(top1=(top5[:, 0] == targets).sum().item() / len(targets),
                           top5=(top5 == targets[:, None]).any(-1).sum().item() / len(targets),
                           cross_entropy=F.cross_entropy(logits, targets).item(), tokens=len(targets)))
    return scores


@pytest.mark.parametrize("model_type,overrides", [("bert", {}), ("albert", dict(num_hidden_layers=4))])
def test_every_layer_scores_equal_an_independent_transformers_computation(tmp_path, model_type, overrides,
                                                                          transformers):
    ours_model = save_tiny_model(tmp_path, model_type=model_type, **overrides)
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    result = probing.probe_model(model, tokenizer, SENTENCES, batch_size=5)   # batches of 5, 5, 2: padding varies
    batch = tokenizer.batch_encode(SENTENCES)                                # one batch, padded to the longest
    expected = reference_scores(transformers, tmp_path, batch, tokenizer.cls_id, tokenizer.sep_id, model_type)

    assert len(result.layers) == len(expected) == ours_model.config.num_hidden_layers + 1
    for ours, theirs in zip(result.layers, expected):
        assert ours.tokens == theirs["tokens"]
        assert ours.top1 == pytest.approx(theirs["top1"], abs=1e-9), f"layer {ours.layer} top-1"
        assert ours.top5 == pytest.approx(theirs["top5"], abs=1e-9), f"layer {ours.layer} top-5"
        assert ours.cross_entropy == pytest.approx(theirs["cross_entropy"], rel=1e-4, abs=1e-5)
    # Non-trivial numbers: the tiny model is built so the input is recoverable early and lost later.
    top1 = [r.top1 for r in result.layers]
    assert max(top1) > 0.5 and min(top1) < max(top1) - 0.2
    assert result.layers[0].description.startswith("embeddings")


def test_specials_and_padding_are_excluded_and_batching_does_not_matter(tmp_path):
    save_tiny_model(tmp_path)
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    one = probing.probe_model(model, tokenizer, SENTENCES, batch_size=1)
    many = probing.probe_model(model, tokenizer, SENTENCES, batch_size=7)
    words = sum(len(tokenizer.tokenize(s)) for s in SENTENCES)
    assert one.tokens == many.tokens == words
    for a, b in zip(one.layers, many.layers):
        assert a.top1 == b.top1 and a.top5 == b.top5
        assert a.cross_entropy == pytest.approx(b.cross_entropy, rel=1e-5)


def test_masked_context_scores_masked_positions_and_is_reproducible(tmp_path):
    save_tiny_model(tmp_path)
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    a = probing.probe_model(model, tokenizer, SENTENCES, batch_size=3, mask_prob=0.3, seed=5).masked
    b = probing.probe_model(model, tokenizer, SENTENCES, batch_size=12, mask_prob=0.3, seed=5).masked
    assert a == pytest.approx(b)                       # the draw does not depend on the batch size
    words = sum(len(tokenizer.tokenize(s)) for s in SENTENCES)
    assert 0.1 * words < a["tokens"] < 0.5 * words
    every = probing.probe_model(model, tokenizer, SENTENCES, mask_prob=1.0).masked
    assert every["tokens"] == words


def test_duplicated_and_tied_models_get_one_row_per_executed_layer(tmp_path):
    from minibert.duplication import deepen
    model = save_tiny_model(tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    tied = deepen(model, [0, 0, 1, 2, 2], tied=True)
    result = probing.probe_model(tied, tokenizer, SENTENCES)
    assert [r.description for r in result.layers] == [
        "embeddings", "layer 0", "layer 0 (copy)", "layer 1", "layer 2", "layer 2 (copy)"]
    original = probing.probe_model(model, tokenizer, SENTENCES)
    assert result.layers[1].top1 == original.layers[1].top1   # same prefix, same numbers


def test_a_model_without_mlm_head_needs_fit_head(tmp_path):
    save_tiny_model(tmp_path, with_mlm_head=False, with_pair_head=False)
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    assert model.mlm_head is None
    with pytest.raises(MiniBertError, match="no MLM head.*fit_mlm_head") as raised:
        probing.probe_model(model, tokenizer, SENTENCES)
    assert "--" not in str(raised.value)                        # the lesson names its parameter; probe.py its flag


def test_fitted_head_beats_an_untrained_one_on_the_last_layer(tmp_path):
    save_tiny_model(tmp_path, with_mlm_head=False, with_pair_head=False, layer_scale=0.05)
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    frozen = {name: p.clone() for name, p in model.state_dict().items()}
    head, loss = probing.fit_mlm_head(model, tokenizer, SENTENCES, steps=60, lr=1e-2, batch_size=64, progress=False)
    assert all(torch.equal(frozen[name], p) for name, p in model.state_dict().items()), "the encoder must stay frozen"

    torch.manual_seed(0)
    untrained = MaskedLMHead(model.config)
    untrained.apply(model.init_weights)
    before = probing.probe_model(model, tokenizer, SENTENCES, mlm_head=untrained.eval()).layers[-1].top1
    after = probing.probe_model(model, tokenizer, SENTENCES, mlm_head=head).layers[-1]
    assert after.top1 > before + 0.3, (before, after.top1)
    assert len(probing.probe_model(model, tokenizer, SENTENCES, mlm_head=head).layers) == 4


def test_fitting_the_head_shows_progress_from_its_first_pass_over_the_text(tmp_path, capsys):
    save_tiny_model(tmp_path, with_mlm_head=False, with_pair_head=False)
    model, tokenizer = load_pretrained(tmp_path), load_tokenizer(tmp_path)
    probing.fit_mlm_head(model, tokenizer, SENTENCES, steps=2, batch_size=8)
    shown = capsys.readouterr().err
    # the frozen encoder's run over the text comes first, with its own progress display, then the head's steps
    assert "encoding the fitting text" in shown and "fitting MLM head" in shown
    assert shown.index("encoding the fitting text") < shown.index("fitting MLM head")


def test_a_bundled_size_model_probes_the_shipped_sentences_quickly(tmp_path):
    """Speed budget: 4 layers, H 256, vocab 12k, every shipped sentence, < 30 s on 2 cores."""
    sentences = read_sentences()
    V = write_vocab(tmp_path, sentences, size=12000)
    model = BertModel(tiny_config(V, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                  intermediate_size=1024, max_position_embeddings=512)).eval()
    tokenizer = load_tokenizer(tmp_path)
    start = time.perf_counter()
    result = probing.probe_model(model, tokenizer, sentences)
    elapsed = time.perf_counter() - start
    assert len(result.layers) == 5 and result.sentences == len(sentences)
    assert elapsed < 30, f"probing took {elapsed:.1f} s"


# ----------------------------------------------------------------------------
# The script
# ----------------------------------------------------------------------------


def test_cli_help_and_a_real_run_fitting_a_head(tmp_path):
    help_run = run_script("probe.py", "--help")
    assert help_run.returncode == 0 and "--fit-head" in help_run.stdout and "--mask-prob" in help_run.stdout
    save_tiny_model(tmp_path / "bare", with_mlm_head=False, with_pair_head=False, layer_scale=0.05)
    (tmp_path / "s.txt").write_text("\n".join(SENTENCES) + "\n")
    run = run_script("probe.py", "--model", tmp_path / "bare", "--text", tmp_path / "s.txt", "--max-sentences", 4,
                     "--fit-head", tmp_path / "s.txt", "--fit-steps", 20, "--fit-lr", 0.01, "--fit-batch-size", 32,
                     "--show", 1, "--mask-prob", 0.2, "--json", tmp_path / "out.json")
    assert run.returncode == 0, run.stderr
    assert "MLM head: fitted on" in run.stdout and "4 sentences" in run.stdout and "example 1:" in run.stdout
    assert len(json.loads((tmp_path / "out.json").read_text())["layers"]) == 4


def test_cli_plot_names_a_model_given_as_a_long_path_by_its_folder(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (pip install -e '.[plot]')")
    folder = tmp_path / "a-folder-with-a-long-name" / "experiments" / "seed-0" / "tiny-bert"
    save_tiny_model(folder)
    (tmp_path / "s.txt").write_text("\n".join(SENTENCES) + "\n")
    from minibert.commands import probe as probe_command
    from minibert.support.plots import plot_probe
    drawn = {}
    monkeypatch.setattr(probe_command, "save_plot", lambda results, path: drawn.update(figure=plot_probe(results, path)))
    code, captured = run_script_in_process(capsys, "probe.py", "--model", folder, "--text", tmp_path / "s.txt",
                                           "--max-sentences", 4, "--plot", tmp_path / "probe.png")
    assert code == 0, captured.err
    axes = drawn["figure"].axes[0]
    assert [t.get_text() for t in axes.get_legend().get_texts()] == ["tiny-bert top-1", "tiny-bert top-5"]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["0", "1", "2", "3"]          # 3 layers + embeddings
    assert (tmp_path / "probe.png").read_bytes()[:4] == b"\x89PNG" and str(folder) in captured.out   # text: the path


def test_cli_usage_errors_exit_2_and_run_errors_are_one_line_and_exit_1(tmp_path, capsys):
    save_tiny_model(tmp_path / "bare", with_mlm_head=False, with_pair_head=False)
    run = run_script("probe.py", "--model", tmp_path / "bare")
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: ") and "no MLM head" in run.stderr
    for args, status, expected in [
            (("--model", tmp_path / "bare", "--mask-prob", "1.5"), 2,
             "--mask-prob: expected a probability in (0, 1], got 1.5"),
            (("--model", tmp_path / "bare", "--batch-size", "0"), 2, "--batch-size: expected an integer >= 1, got 0"),
            (("--model", tmp_path / "bare", "--device", "bogus"), 2, "--device: 'bogus': expected auto"),
            (("--model", tmp_path / "bare", "--json", tmp_path), 2, "is a folder"),
            (("--model", tmp_path / "bare", "--fit-lr", "nan"), 2, "--fit-lr: expected a number > 0"),
            (("--model", tmp_path / "bare", "--fit-head", tmp_path / "none.txt"), 1, "none.txt"),
            (("--model", tmp_path / "nowhere"), 1, "nowhere"),
            (("--text", tmp_path / "none.txt"), 1, "none.txt: file not found"),
            (("--no-such-flag",), 2, "unrecognized arguments")]:
        code, captured = run_script_in_process(capsys, "probe.py", *args)
        assert code == status and expected in error_line(code, captured), (args, captured.err)


# ---- coursework exercise: reconstruction-score --------------------------------------------------


def test_exercise_reconstruction_score_counts_top1_top5_and_cross_entropy():
    # Three positions over a vocabulary of 7: the target is the argmax (row 0),
    # the third best (row 1), and the worst (row 2).
    logits = torch.tensor([[0.0, 5.0, 1.0, 2.0, 3.0, 4.0, -1.0],
                           [6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0],
                           [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, -9.0]])
    targets = torch.tensor([1, 2, 6])
    score = probing.Score()
    top1 = score.add(logits, targets)
    assert top1.tolist() == [1, 0, 5]
    assert (score.top1, score.top5, score.tokens) == (1, 2, 3)
    expected = sum(-F.log_softmax(row, -1)[t].item() for row, t in zip(logits, targets))
    assert score.cross_entropy == pytest.approx(expected, rel=1e-6)
    summary = score.summary()
    assert summary["top1"] == pytest.approx(1 / 3) and summary["top5"] == pytest.approx(2 / 3)


def test_exercise_reconstruction_score_accumulates_over_batches_and_small_vocabularies():
    score = probing.Score()
    score.add(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([0]))   # V = 3 < 5: top-5 is every token
    score.add(torch.tensor([[2.0, 1.0, 0.0]]), torch.tensor([2]))
    assert (score.top1, score.top5, score.tokens) == (1, 2, 2)
    log_z = math.log(math.exp(2) + math.exp(1) + 1)
    assert score.cross_entropy == pytest.approx((log_z - 2) + (log_z - 0), rel=1e-6)
