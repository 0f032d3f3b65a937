"""The guided walk (minibert/walkthrough.py): every step printed, every pointer
to the code real, the numbers those of the model's own forward."""

import contextlib
import io
import json
import math
import re

import pytest
import torch

from minibert import walkthrough
from minibert.checkpoints import load_pretrained
from minibert.deberta import DebertaConfig, DebertaModel
from minibert.model import ACTIVATIONS, BertModel
from minibert.support.cli import UsageError, run
from minibert.support import MiniBertError
from minibert.tokenization import load_tokenizer
from tiny_models import SENTENCES, save_tiny_model, tiny_config, write_vocab

SENTENCE = "the cat sat on the mat"
POINTER = re.compile(r"code: (minibert/[\w/]+\.py: [A-Za-z_][\w.]*)")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """The bundled model, its tokenizer, the walk's printed text, its JSON, and the model's own output."""
    model = load_pretrained()
    tokenizer = load_tokenizer(model.source_dir)
    path = tmp_path_factory.mktemp("walk") / "walk.json"
    text = _printed([SENTENCE, "--layer", "1", "--head", "2", "--json", str(path)])
    output, _ = _model_output(model, tokenizer, SENTENCE)
    return model, tokenizer, text, json.loads(path.read_text()), output


def _printed(argv):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert walkthrough.main(argv) == 0
    return buffer.getvalue()


def _model_output(model, tokenizer, text):
    batch = tokenizer.batch_encode([text])
    with torch.no_grad():
        return model(**batch), batch


def test_walk_prints_every_step_in_order(bundled):
    _, _, text, _, _ = bundled
    titles = ["1. Tokens and ids", "2. Embeddings: word + position + segment", "3. The padding mask",
              "4. Inside layer 1", "5. The encoder", "6. The MLM head on every layer", "7. The output"]
    places = [text.index(title) for title in titles]
    assert places == sorted(places)
    assert "attention weights of head 2 in layer 1" in text
    assert "(1, 4, 8, 64)" in text and "(1, 8, 1024)" in text     # split heads (B, A, T, D); W1 (B, T, I)
    assert "wrote " in text


def test_every_printed_pointer_names_a_function_defined_in_its_file(bundled):
    _, _, text, _, _ = bundled
    printed = set(POINTER.findall(text))
    assert "minibert/model.py: Embeddings.forward" in printed and "minibert/model.py: attention" in printed
    assert len(printed) >= 15
    assert walkthrough.missing_code(printed) == []


def test_every_pointer_the_walk_can_print_exists():
    pointers = {p for code in walkthrough.CODE.values() for p in code}
    pointers |= {p for name in ACTIVATIONS for p in walkthrough.activation_code(name)}
    assert walkthrough.missing_code(pointers) == []


def test_a_pointer_to_a_missing_function_is_caught():
    assert walkthrough.missing_code(["minibert/model.py: Embeddings.backward", "minibert/model.py: gelu",
                                     "minibert/nowhere.py: gelu"]) == [
        "minibert/model.py: Embeddings.backward", "minibert/nowhere.py: gelu"]


def test_json_tokens_and_embedding_sum_are_the_models(bundled):
    model, tokenizer, _, result, _ = bundled
    encoding = tokenizer.encode(SENTENCE)
    assert [t["token"] for t in result["tokens"]] == ["[CLS]", "the", "cat", "sat", "on", "the", "mat", "[SEP]"]
    assert [t["id"] for t in result["tokens"]] == encoding.ids
    pieces = result["embeddings"]["pieces"]
    e = model.embeddings
    first = encoding.ids[1]
    expected_sum = e.word_embeddings.weight[first] + e.position_embeddings.weight[1] + e.token_type_embeddings.weight[0]
    assert torch.allclose(torch.tensor(pieces["word"]["position_1"]), e.word_embeddings.weight[first])
    assert torch.allclose(torch.tensor(pieces["sum"]["position_1"]), expected_sum, atol=1e-6)
    assert pieces["sum"]["shape"] == [1, 8, 256] and pieces["position"]["shape"] == [8, 256]


def test_json_attention_weights_are_the_softmax_of_the_layers_scores(bundled):
    model, _, _, result, output = bundled
    attention = model.encoder.layers[1].attention
    x = output.hidden_states[1][0]                                   # the input of layer 1
    q = attention.query(x)[:, 2 * 64:3 * 64]                         # head 2's columns
    k = attention.key(x)[:, 2 * 64:3 * 64]
    expected = torch.softmax(q @ k.T / math.sqrt(64), dim=-1)
    weights = torch.tensor(result["layer"]["attention_weights"])
    assert weights.shape == (8, 8)
    assert torch.allclose(weights, expected, atol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(8), atol=1e-5)
    assert result["layer"]["written_out_attention_max_abs_diff"] < 1e-5


def test_json_residual_norms_and_mlm_predictions_are_the_models(bundled):
    model, _, _, result, output = bundled
    norms = [row["mean"] for row in result["residual_norms"]]
    assert len(norms) == 7
    assert norms == pytest.approx([h[0].norm(dim=-1).mean().item() for h in output.hidden_states], rel=1e-5)
    mlm = result["mlm"]
    assert mlm["positions"] == [1, 2, 3, 4, 5, 6]
    last = mlm["layers"][-1]
    assert [p[0]["id"] for p in last["predictions"]] == output.mlm_logits[0, 1:7].argmax(-1).tolist()
    assert last["top1_correct"] == 6                 # the bundled model reads "the cat sat on the mat" back
    assert len(last["predictions"][0]) == 5


def test_final_hidden_state_equals_the_models_own_output(bundled):
    _, _, text, result, output = bundled
    final = torch.tensor(result["final_hidden_state"]["values"])
    assert torch.allclose(final, output.last_hidden_state[0], atol=1e-6)
    printed = text[text.index("7. The output"):].splitlines()
    mat = next(line for line in printed if line.strip().startswith("mat "))
    shown = [float(x) for x in re.findall(r"[+-]\d+\.\d{4}", mat)]
    assert shown == pytest.approx(output.last_hidden_state[0, 6, :4].tolist(), abs=6e-5)


def test_layer_out_of_range_is_a_one_line_usage_error(capsys):
    with pytest.raises(SystemExit) as exit:
        run(walkthrough.main, [SENTENCE, "--layer", "6"])
    assert exit.value.code == 2
    error = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "--layer 6: the model runs 6 layers, numbered 0 to 5" in error[0]


def test_each_layer_and_head_out_of_range_is_named(bundled):
    model = bundled[0]
    assert walkthrough.choice_error(model, 5, 3) is None
    assert walkthrough.choice_error(model, -1, 0) == "--layer -1: the model runs 6 layers, numbered 0 to 5"
    assert walkthrough.choice_error(model, 0, 4) == "--head 4: the model has 4 attention heads, numbered 0 to 3"
    with pytest.raises(MiniBertError, match="--head -1: the model has 4 attention heads"):
        walkthrough.walk(model, bundled[1], SENTENCE, head=-1)


def test_an_empty_sentence_is_a_usage_error():
    with pytest.raises(UsageError, match="the sentence is empty"):
        walkthrough.main(["   "])


def test_a_sentence_of_only_control_or_zero_width_characters_is_a_usage_error_saying_it_has_no_tokens(bundled):
    for text in ("\u200b\u200d", "\x01\x02", "\ufeff\x7f"):
        with pytest.raises(UsageError, match="has no tokens: the tokenizer drops control and zero-width characters"):
            walkthrough.main([text])
        with pytest.raises(MiniBertError, match="has no tokens"):
            walkthrough.walk(bundled[0], bundled[1], text)
    assert walkthrough.sentence_error(bundled[1], "a\u200b word") is None


def test_albert_walk_shows_the_projection_and_the_shared_layer(tmp_path):
    model = save_tiny_model(tmp_path, model_type="albert")
    tokenizer = load_tokenizer(tmp_path)
    result = walkthrough.walk(model, tokenizer, SENTENCES[0], layer=2, head=3)
    assert result["embeddings"]["pieces"]["projection"]["shape"] == [1, 9, 32]
    assert result["embeddings"]["pieces"]["sum"]["shape"] == [1, 9, 16]
    assert result["encoder"]["layers_run"] == [0, 0, 0]
    assert result["layer"]["group"] == 0
    assert any(stage["code"] == ["minibert/model.py: gelu_tanh"] for stage in result["layer"]["stages"])
    output, _ = _model_output(model, tokenizer, SENTENCES[0])
    assert torch.allclose(torch.tensor(result["final_hidden_state"]["values"]), output.last_hidden_state[0], atol=1e-6)
    assert "(ALBERT)" in walkthrough.format_walk(result)


def test_written_out_walk_agrees_with_the_fused_one(tmp_path):
    model = save_tiny_model(tmp_path)
    tokenizer = load_tokenizer(tmp_path)
    fused = walkthrough.walk(model, tokenizer, SENTENCES[1])
    written = walkthrough.walk(model.use_written_out(), tokenizer, SENTENCES[1])
    assert torch.allclose(torch.tensor(written["final_hidden_state"]["values"]),
                          torch.tensor(fused["final_hidden_state"]["values"]), atol=1e-5)
    assert written["config"]["written_out"] and not fused["config"]["written_out"]


def test_a_model_without_an_mlm_head_says_so(tmp_path):
    model = save_tiny_model(tmp_path, with_mlm_head=False, with_pair_head=False)
    result = walkthrough.walk(model, load_tokenizer(tmp_path), SENTENCES[0])
    assert result["mlm"] is None
    assert "this model has no MLM head" in walkthrough.format_walk(result)


def test_deberta_is_refused_in_one_line(tmp_path):
    V = write_vocab(tmp_path)
    config = DebertaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=37, max_position_embeddings=64, model_type="deberta-v2",
                           relative_attention=True, pos_att_type="p2c|c2p", position_buckets=8,
                           position_biased_input=False)
    with pytest.raises(MiniBertError, match="follows BERT's and ALBERT's modules; this is a 'deberta-v2' model"):
        walkthrough.walk(DebertaModel(config).eval(), load_tokenizer(tmp_path), SENTENCES[0])


def test_the_walk_leaves_no_hooks_on_the_model(tmp_path):
    model = BertModel(tiny_config(write_vocab(tmp_path))).eval()
    walkthrough.walk(model, load_tokenizer(tmp_path), SENTENCES[0])
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


# ----------------------------------------------------------------------------
# docs/coursework.md, the text the walk and every blanked exercise point to
# ----------------------------------------------------------------------------


def _coursework_sections():
    """{heading: text} of docs/coursework.md's `### ` sections (up to the next heading or rule)."""
    text = (walkthrough.REPOSITORY / "docs" / "coursework.md").read_text(encoding="utf-8")
    sections = {}
    for block in re.split(r"\n(?=### |## |---)", text):
        if block.startswith("### "):
            heading, _, body = block.partition("\n")
            assert heading[4:] not in sections, f"two sections named {heading[4:]}"
            sections[heading[4:]] = body
    return sections


def test_coursework_text_has_a_section_per_exercise_whose_anchor_is_its_name():
    from minibert.coursework.exercises import EXERCISE_NAMES
    sections = _coursework_sections()
    assert sorted(sections) == sorted(EXERCISE_NAMES)
    for name in EXERCISE_NAMES:   # GitHub's anchor: lower case, no punctuation but "-", so the heading is the name
        assert re.fullmatch(r"[a-z0-9-]+", name)


def test_coursework_text_names_each_exercises_file_function_and_tests():
    from minibert.coursework.exercises import exercise_tests, find_regions
    sections = _coursework_sections()
    regions, _ = find_regions(walkthrough.REPOSITORY)
    tests, _ = exercise_tests(walkthrough.REPOSITORY)
    assert len(regions) == len(sections)
    for region in regions:
        body = sections[region.name]
        for part in ("**Where:**", "**Paper:**", "**Test:**", "**Hints.**", "**A correct solution gives:**"):
            assert part in body, f"{region.name}: no {part}"
        assert f"`{region.path}`" in body and f"`{region.function.split('.')[-1]}`" in body.replace(
            f"`{region.function}`", f"`{region.function.split('.')[-1]}`"), region.name
        listed = set(re.findall(r"`(test_exercise_\w+)`", body))
        assert listed == {function for _, function in tests[region.name]}, region.name
        assert "```" not in body, f"{region.name}: code in the text (no solutions)"
