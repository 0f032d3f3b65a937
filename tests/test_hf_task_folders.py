"""A fine-tuned folder is a complete Hugging Face model folder
(minibert/checkpoints/name_maps.py, its task heads' table): transformers'
Auto classes load it with nothing missing or unexpected and give minibert's
logits, its pipeline names minibert's labels with minibert's probabilities,
and a folder without its head is a one-line error."""

import json

import pytest
import torch

from minibert import finetuning
from minibert.commands import finetune as finetune_command
from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.deberta import DebertaConfig, DebertaModel
from minibert.heads import add_pooler_if_missing
from minibert.model import BertModel
from minibert.support import MiniBertError
from minibert.tasks import make_task
from minibert.tokenization import load_tokenizer
from tiny_models import random_batch, tiny_config, write_sst2, write_vocab

transformers = pytest.importorskip("transformers")

NER_LABELS = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER"]
AUTO = {"sentence": "AutoModelForSequenceClassification", "token": "AutoModelForTokenClassification",
        "span": "AutoModelForQuestionAnswering"}
# deberta-v3's switches and v1's, at a tiny size (test_deberta.py)
DEBERTA_V3 = dict(model_type="deberta-v2", relative_attention=True, pos_att_type="p2c|c2p", position_buckets=8,
                  share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False)
DEBERTA_V1 = dict(model_type="deberta", relative_attention=True, pos_att_type="c2p|p2c", position_biased_input=False)


def base_model(family, vocab_size):
    """A tiny random pretrained model of the family, with dropout off."""
    torch.manual_seed(0)
    if family in ("bert", "albert"):
        return BertModel(tiny_config(vocab_size, family, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
                         with_pooler=False, with_pair_head=False)
    switches = DEBERTA_V3 if family == "deberta-v3" else DEBERTA_V1
    return DebertaModel(DebertaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=37, max_position_embeddings=64,
                                      **switches))


def fine_tuned_folder(root, family, task_name):
    """A fine-tuned folder as finetune.py writes it, with random weights
    (the head's bias too, so a misplaced bias shows). Returns (folder, model)."""
    base = root / f"{family}-base"
    if not base.exists():
        base.mkdir()
        save_pretrained(base_model(family, write_vocab(base)), base)
    task = make_task(task_name, labels=NER_LABELS if task_name == "conll2003" else None)
    model = load_pretrained(base)
    torch.manual_seed(1)
    if task.uses_pooler:
        add_pooler_if_missing(model)
    tuned = finetuning.TaskModel(model, task.make_head(model.config), task.uses_pooler).eval()
    with torch.no_grad():
        for parameter in tuned.head.parameters():
            parameter.normal_(0, 0.5)
    folder = root / f"{family}-{task_name}"
    finetune_command.save_task_model(tuned, task, load_tokenizer(base), folder, {"max_seq_len": 32, "base_model": str(base)})
    return folder, tuned


def minibert_logits(model, inputs):
    """A TaskModel's logits: (B, K), (B, T, K), or (B, T, 2) start and end."""
    input_ids, attention_mask, token_type_ids = inputs
    with torch.no_grad():
        return model(input_ids, attention_mask, token_type_ids)


def transformers_logits(model, inputs):
    """The same from transformers' model (its start and end logits stacked as minibert's)."""
    input_ids, attention_mask, token_type_ids = inputs
    with torch.no_grad():
        output = model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    if hasattr(output, "start_logits"):
        return torch.stack([output.start_logits, output.end_logits], dim=-1)
    return output.logits


CASES = [("bert", "sst2", "sentence", "BertForSequenceClassification"),
         ("bert", "mnli", "sentence", "BertForSequenceClassification"),
         ("bert", "conll2003", "token", "BertForTokenClassification"),
         ("bert", "squad", "span", "BertForQuestionAnswering"),
         ("albert", "sst2", "sentence", "AlbertForSequenceClassification"),
         ("albert", "conll2003", "token", "AlbertForTokenClassification"),
         ("albert", "squad", "span", "AlbertForQuestionAnswering"),
         ("deberta-v3", "mnli", "sentence", "DebertaV2ForSequenceClassification"),
         ("deberta-v3", "squad", "span", "DebertaV2ForQuestionAnswering"),
         ("deberta-v1", "sst2", "sentence", "DebertaForSequenceClassification"),
         ("deberta-v1", "conll2003", "token", "DebertaForTokenClassification")]


@pytest.mark.parametrize("family, task_name, kind, architecture", CASES,
                         ids=[f"{family}-{task}" for family, task, _, _ in CASES])
def test_transformers_auto_class_loads_the_folder_with_minibert_logits(tmp_path, family, task_name, kind,
                                                                       architecture):
    folder, tuned = fine_tuned_folder(tmp_path, family, task_name)
    config = json.loads((folder / "config.json").read_text())
    labels = {"sst2": ["0", "1"], "mnli": ["entailment", "neutral", "contradiction"], "conll2003": NER_LABELS,
              "squad": ["start", "end"]}[task_name]
    assert config["architectures"] == [architecture] and config["num_labels"] == len(labels)
    assert config["id2label"] == {str(i): label for i, label in enumerate(labels)}
    assert config["label2id"] == {label: i for i, label in enumerate(labels)}
    assert not (folder / "head.safetensors").exists()

    auto = getattr(transformers, AUTO[kind])
    theirs, info = auto.from_pretrained(folder, output_loading_info=True)
    assert type(theirs).__name__ == architecture
    assert not any(info[key] for key in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    theirs.eval()
    inputs = random_batch(tuned.base_model.config.vocab_size, batch=3, length=11, seed=2)
    ours, expected = minibert_logits(tuned, inputs), transformers_logits(theirs, inputs)
    real = inputs[1].bool() if kind != "sentence" else slice(None)   # padding's outputs are read by no task
    assert torch.allclose(expected[real], ours[real], atol=1e-5)

    loaded, task, _, record = finetune_command.load_task_model(folder, make_task)       # and minibert reads it back
    assert task.name == task_name and record["max_seq_len"] == 32
    assert torch.equal(minibert_logits(loaded, inputs), ours)


def test_the_text_classification_pipeline_gives_minibert_labels_and_probabilities(tmp_path):
    folder, _ = fine_tuned_folder(tmp_path, "bert", "mnli")
    sentences = ["the cat sat on the mat .", "a dog ran in the park with a red ball ."]
    data = tmp_path / "dev.tsv"       # MNLI's columns: the two sentences at 8 and 9, the label last
    header = ["index", "promptID", "pairID", "genre", "s1bp", "s2bp", "s1p", "s2p", "sentence1", "sentence2",
              "label1", "gold_label"]
    rows = [[str(i), "0", "0", "g", "-", "-", "-", "-", a, b, "neutral", "neutral"]
            for i, (a, b) in enumerate([(sentences[0], sentences[1]), (sentences[1], sentences[0])])]
    data.write_text("\n".join("\t".join(row) for row in [header] + rows) + "\n", encoding="utf-8")
    task, examples, predictions = finetune_command.predict([folder], data, make_task, progress=False)

    classify = transformers.pipeline("text-classification", model=str(folder), device="cpu")
    for example, (label, probabilities) in zip(examples, predictions):
        scores = classify({"text": example.text_a, "text_pair": example.text_b}, top_k=None)
        assert max(scores, key=lambda s: s["score"])["label"] == label
        by_label = {s["label"]: s["score"] for s in scores}
        assert sorted(by_label) == sorted(task.labels)
        for name, p in zip(task.labels, probabilities):
            assert by_label[name] == pytest.approx(float(p), abs=1e-5)


def test_the_pipeline_names_a_single_sentence_with_minibert_label(tmp_path):
    folder, _ = fine_tuned_folder(tmp_path, "bert", "sst2")
    data = write_sst2(tmp_path / "dev.tsv", [("the sun is warm and the sky is blue .", "1"),
                                             ("he found a key under the green door .", "0")])
    task, examples, predictions = finetune_command.predict([folder], data, make_task, progress=False)
    classify = transformers.pipeline("text-classification", model=str(folder), device="cpu")
    for example, (label, probabilities) in zip(examples, predictions):
        answer = classify(example.text_a)[0]
        assert answer["label"] == label
        assert answer["score"] == pytest.approx(float(max(probabilities)), abs=1e-5)


def test_load_pretrained_gives_the_encoder_of_a_fine_tuned_folder_and_says_what_it_left(tmp_path):
    folder, tuned = fine_tuned_folder(tmp_path, "bert", "sst2")
    encoder = load_pretrained(folder)
    assert ("classifier.weight", "a task head: load_task_model (minibert/finetuning.py) reads it with its task") \
        in encoder.load_report.skipped
    assert torch.equal(encoder.pooler.dense.weight, tuned.base_model.pooler.dense.weight)


def test_a_save_over_the_folder_keeps_the_runs_checkpoint(tmp_path):
    folder, tuned = fine_tuned_folder(tmp_path, "bert", "sst2")
    (folder / "checkpoint.pt").write_bytes(b"the run's checkpoint")
    finetune_command.save_task_model(tuned, make_task("sst2"), load_tokenizer(folder), folder, {"max_seq_len": 32})
    assert (folder / "checkpoint.pt").read_bytes() == b"the run's checkpoint"
    assert sorted(p.name for p in folder.parent.iterdir() if p.name.startswith(".")) == []   # nothing left beside it


def test_a_folder_whose_model_safetensors_holds_no_head_is_a_one_line_error(tmp_path):
    from minibert.checkpoints.safetensors import load_safetensors, save_safetensors
    folder, _ = fine_tuned_folder(tmp_path, "bert", "sst2")
    tensors = load_safetensors(folder / "model.safetensors")
    save_safetensors({name: t for name, t in tensors.items() if not name.startswith("classifier.")},
                     folder / "model.safetensors")
    with pytest.raises(MiniBertError, match=r"model.safetensors: tensor 'classifier.weight' of the sst2 head with 2 "
                                        r"labels is missing$"):
        finetune_command.load_task_model(folder, make_task)


def test_a_head_stored_as_integers_is_a_one_line_error(tmp_path):
    from minibert.checkpoints.safetensors import load_safetensors, save_safetensors
    folder, _ = fine_tuned_folder(tmp_path, "bert", "sst2")
    tensors = load_safetensors(folder / "model.safetensors")
    tensors["classifier.weight"] = tensors["classifier.weight"].to(torch.int64)
    save_safetensors(tensors, folder / "model.safetensors")
    with pytest.raises(MiniBertError, match=r"model.safetensors: tensor 'classifier.weight' has dtype int64; "
                                        r"expected a floating-point weight$"):
        finetune_command.load_task_model(folder, make_task)


def test_the_task_head_table_prints_one_row_per_tensor():
    import io
    from minibert.checkpoints.name_maps import print_task_heads
    out = io.StringIO()
    print_task_heads(out)
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert ["span", "head.span.weight", "qa_outputs.weight", "<Family>ForQuestionAnswering"] in rows
    assert len(rows) == 6


# ----------------------------------------------------------------------------
# A folder trained with transformers (no task.json): read with --task and --label-map
# (minibert/checkpoints/task_folders.py)
# ----------------------------------------------------------------------------

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
TRANSFORMERS_CLASSES = {  # (family, kind) -> (config class, model class, config's extra fields)
    ("bert", "sentence"): ("BertConfig", "BertForSequenceClassification", {}),
    ("bert", "token"): ("BertConfig", "BertForTokenClassification", {}),
    ("bert", "span"): ("BertConfig", "BertForQuestionAnswering", {}),
    ("albert", "sentence"): ("AlbertConfig", "AlbertForSequenceClassification",
                             dict(embedding_size=16, num_hidden_groups=1, hidden_act="gelu_new")),
    ("deberta-v2", "sentence"): ("DebertaV2Config", "DebertaV2ForSequenceClassification",
                                 dict(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8,
                                      share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False)),
}


def transformers_folder(folder, family, kind, id2label=None, vocabulary=None, seed=0):
    """A tiny random task model of transformers, saved by its save_pretrained (model.safetensors, config.json
    with `architectures`, id2label/label2id unless they are transformers' default LABEL_0, LABEL_1), with a
    tiny vocab.txt (BERT: transformers' own tokenizer files too). Returns (folder, transformers' model)."""
    folder.mkdir(parents=True)
    vocab_size = write_vocab(folder, *([vocabulary] if vocabulary else []))
    config_name, model_name, extra = TRANSFORMERS_CLASSES[family, kind]
    labels = {} if id2label is None else dict(id2label=dict(enumerate(id2label)),
                                              label2id={label: i for i, label in enumerate(id2label)})
    config = getattr(transformers, config_name)(vocab_size=vocab_size, **TINY, **extra, **labels)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():                     # a bias far from zero, so that a misplaced or reordered row shows
        for name, parameter in model.named_parameters():
            if name.startswith(("classifier.", "qa_outputs.")):
                parameter.normal_(0, 0.5)
    model.save_pretrained(folder, safe_serialization=True)
    if family == "bert":
        transformers.BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    assert not (folder / "task.json").exists()
    return folder, model


MNLI_SHUFFLED = ["contradiction", "entailment", "neutral"]      # the model's order, not minibert's
TRANSFORMERS_CASES = [   # family, kind, the model's id2label (None: transformers' default), task, label map
    ("bert", "sentence", None, "sst2", {"LABEL_0": "0", "LABEL_1": "1"}),
    ("bert", "sentence", ["negative", "positive"], "sst2", {"negative": "0", "positive": "1"}),
    ("bert", "token", NER_LABELS[:5], "conll2003", None),
    ("bert", "span", None, "squad", None),
    ("albert", "sentence", MNLI_SHUFFLED, "mnli", None),
    ("deberta-v2", "sentence", ["1", "0"], "mrpc", None),
]


@pytest.mark.parametrize("family, kind, id2label, task_name, label_map", TRANSFORMERS_CASES,
                         ids=[f"{c[0]}-{c[3]}-{'mapped' if c[4] else 'named'}" for c in TRANSFORMERS_CASES])
def test_a_folder_trained_with_transformers_gives_its_logits_in_the_tasks_label_order(tmp_path, family, kind,
                                                                                     id2label, task_name, label_map):
    folder, theirs = transformers_folder(tmp_path / "model", family, kind, id2label)
    model, task, _, record = finetune_command.load_task_model(folder, make_task, task_name=task_name,
                                                           label_map=label_map)
    assert task.name == task_name and record["architecture"] == type(theirs).__name__
    inputs = random_batch(theirs.config.vocab_size, batch=3, length=11, seed=2)
    ours, expected = minibert_logits(model, inputs), transformers_logits(theirs, inputs)
    real = inputs[1].bool() if kind != "sentence" else slice(None)    # padding's outputs are read by no task
    if kind == "span":
        assert task.labels is None
    else:                                    # output i of ours is task.labels[i]; theirs is named by id2label
        names = id2label or [f"LABEL_{i}" for i in range(2)]
        names = [(label_map or {}).get(name, name) for name in names]
        assert sorted(task.labels) == sorted(names)
        expected = expected[..., [names.index(label) for label in task.labels]]
    assert torch.allclose(expected[real], ours[real], atol=1e-5)


def test_a_folder_saved_as_pytorch_model_bin_gives_the_same_logits(tmp_path):
    """transformers before version 5 (save_pretrained(safe_serialization=False))
    wrote the state dict to pytorch_model.bin and no model.safetensors: the
    encoder and the head are both read from it."""
    folder, theirs = transformers_folder(tmp_path / "model", "bert", "sentence", ["negative", "positive"])
    (folder / "model.safetensors").unlink()
    torch.save(theirs.state_dict(), folder / "pytorch_model.bin")
    assert (folder / "pytorch_model.bin").is_file() and not (folder / "model.safetensors").exists()
    model, task, _, _ = finetune_command.load_task_model(folder, make_task, task_name="sst2",
                                                      label_map={"negative": "0", "positive": "1"})
    inputs = random_batch(theirs.config.vocab_size, batch=3, length=11, seed=2)
    assert task.labels == ["0", "1"]
    assert torch.allclose(transformers_logits(theirs, inputs), minibert_logits(model, inputs), atol=1e-5)


def test_mnli_labels_are_put_in_minibert_order(tmp_path):
    folder, _ = transformers_folder(tmp_path / "model", "bert", "sentence", MNLI_SHUFFLED)
    _, task, _, _ = finetune_command.load_task_model(folder, make_task, task_name="mnli")
    assert task.labels == ["entailment", "neutral", "contradiction"]


@pytest.mark.parametrize("task_name, label_map, message", [
    ("sst2", None, r"config.json: the model's label 'LABEL_0' is not one of sst2's labels \(0, 1\): give "
                   r"--label-map LABEL_0=...,LABEL_1=..."),
    ("sst2", {"LABEL_0": "0"}, r"the model's label 'LABEL_1' is not one of sst2's labels"),
    ("sst2", {"LABEL_0": "0", "LABEL_1": "2"}, r"^label_map: LABEL_1=2: '2' is not one of sst2's labels \(0, 1\)$"),
    ("sst2", {"LABEL_7": "0"}, r"^label_map: 'LABEL_7' is not one of the model's labels \(LABEL_0, LABEL_1;"),
    ("sst2", {"LABEL_0": "1", "LABEL_1": "1"}, r"^label_map: two of the model's labels are named '1'"),
    ("mnli", {"LABEL_0": "neutral", "LABEL_1": "entailment"},
     r"mnli's label 'contradiction' is none of the model's labels \(neutral, entailment\)"),
    ("conll2003", None, r"config.json holds a BertForSequenceClassification, which is not a conll2003 model"),
    ("squad", None, r"^task_name squad: .* not a squad model \(expected a \.\.\.ForQuestionAnswering\)"),
])
def test_a_label_or_head_that_does_not_fit_the_task_is_a_one_line_error(tmp_path, task_name, label_map, message):
    folder, _ = transformers_folder(tmp_path / "model", "bert", "sentence")
    with pytest.raises(MiniBertError, match=message) as error:
        finetune_command.load_task_model(folder, make_task, task_name=task_name, label_map=label_map)
    assert "\n" not in str(error.value)


def test_a_token_classifier_with_generic_labels_needs_a_label_map(tmp_path):
    folder, _ = transformers_folder(tmp_path / "model", "bert", "token")
    with pytest.raises(MiniBertError, match=r"the model's label 'LABEL_0' names none of conll2003's labels"):
        finetune_command.load_task_model(folder, make_task, task_name="conll2003")
    _, task, _, _ = finetune_command.load_task_model(folder, make_task, task_name="conll2003",
                                                   label_map={"LABEL_0": "O", "LABEL_1": "B-PER"})
    assert task.labels == ["O", "B-PER"]


def test_task_is_checked_against_a_minibert_folders_task_json(tmp_path):
    folder, _ = fine_tuned_folder(tmp_path, "bert", "sst2")
    finetune_command.load_task_model(folder, make_task, task_name="sst2")
    with pytest.raises(MiniBertError, match=r"^task_name mrpc: .* was fine-tuned for sst2 \(its task.json\)$"):
        finetune_command.load_task_model(folder, make_task, task_name="mrpc")


def test_a_folder_whose_architecture_is_no_task_model_is_a_one_line_error(tmp_path):
    folder, _ = transformers_folder(tmp_path / "model", "bert", "sentence")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    with pytest.raises(MiniBertError, match=r"config.json: BertForMaskedLM has no task head minibert reads"):
        finetune_command.load_task_model(folder, make_task, task_name="sst2")


# ---- the scripts ----------------------------------------------------------------------------------------------


def run_main(capsys, script, *args):
    from helpers import run_script_in_process
    return run_script_in_process(capsys, script, *args)


@pytest.fixture(scope="module")
def sst2_folders(tmp_path_factory):
    """Two transformers SST-2 classifiers with generic labels, and a dev file in their vocabulary."""
    root = tmp_path_factory.mktemp("transformers-sst2")
    a, _ = transformers_folder(root / "a", "bert", "sentence", seed=0)
    b, _ = transformers_folder(root / "b", "bert", "sentence", seed=1)
    dev = write_sst2(root / "dev.tsv", [("the sun is warm and the sky is blue .", "1"),
                                        ("he found a key under the green door .", "0"),
                                        ("the cat sat on the mat .", "1")])
    return root, a, b, dev


def test_finetune_evaluates_and_predicts_with_a_transformers_folder(sst2_folders, tmp_path, capsys):
    root, folder, _, dev = sst2_folders
    label_map = ["--task", "sst2", "--label-map", "LABEL_0=0,LABEL_1=1"]
    code, captured = run_main(capsys, "finetune.py", "--model", folder, *label_map, "--eval", dev,
                              "--json", tmp_path / "m.json", "--quiet")
    assert code == 0, captured.err
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["task"] == "sst2" and 0 <= metrics["accuracy"] <= 100

    code, captured = run_main(capsys, "finetune.py", "--model", folder, *label_map, "--predict", dev,
                              "--output", tmp_path / "preds.jsonl", "--quiet")
    assert code == 0, captured.err
    lines = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    _, examples, predictions = finetune_command.predict([folder], dev, make_task, progress=False, task_name="sst2",
                                                      label_map={"LABEL_0": "0", "LABEL_1": "1"})
    assert [line["label"] for line in lines] == [label for label, _ in predictions]
    assert metrics["accuracy"] == pytest.approx(100 * sum(line["label"] == e.label
                                                          for line, e in zip(lines, examples)) / len(lines))


def test_finetune_ensembles_transformers_folders_with_task(sst2_folders, tmp_path, capsys):
    root, a, b, dev = sst2_folders
    code, captured = run_main(capsys, "finetune.py", "--ensemble", a, b, "--task", "sst2", "--label-map",
                              "LABEL_0=0,LABEL_1=1", "--eval", dev, "--quiet")
    assert code == 0, captured.err
    assert "ensemble of 2" in captured.out


def test_finetune_label_map_errors_are_one_line(sst2_folders, capsys):
    from helpers import error_line
    root, folder, _, dev = sst2_folders
    cases = [  # (arguments, exit code, what the error line says)
        (["--model", folder, "--task", "sst2", "--eval", dev], 1,
         "the model's label 'LABEL_0' is not one of sst2's labels (0, 1): give --label-map LABEL_0=...,LABEL_1=..."),
        (["--model", folder, "--task", "sst2", "--label-map", "LABEL_0=0,LABEL_5=1", "--eval", dev], 1,
         "error: --label-map: 'LABEL_5' is not one of the model's labels"),
        (["--model", folder, "--task", "mnli", "--label-map", "LABEL_0=neutral,LABEL_1=entailment", "--eval", dev],
         1, "mnli's label 'contradiction' is none of the model's labels"),
        (["--model", folder, "--task", "conll2003", "--eval", dev], 1,
         "error: --task conll2003: "),
        (["--model", folder, "--eval", dev], 1, "a folder trained with transformers needs --task"),
        (["--model", folder, "--task", "sst2", "--label-map", "LABEL_0", "--eval", dev], 2,
         "argument --label-map: expected NAME=LABEL pairs separated by commas"),
        (["--model", folder, "--task", "sst2", "--label-map", "A=0,A=1", "--eval", dev], 2, "'A' is mapped twice"),
        (["--model", folder, "--label-map", "LABEL_0=0,LABEL_1=1", "--eval", dev], 2,
         "--label-map renames the labels of folders trained with transformers"),
    ]
    for args, code, fragment in cases:
        got, captured = run_main(capsys, "finetune.py", *args, "--quiet")
        line = error_line(got, captured)
        assert got == code and fragment in line, (args, line)


def test_distill_takes_a_transformers_teacher(tmp_path, capsys):
    from distill_helpers import POS_LINES, TINY_STUDENT
    from minibert.commands.distill import load_student
    from tiny_models import FILLER, NEGATIVE, POSITIVE, sentiment_rows
    teacher, _ = transformers_folder(tmp_path / "teacher", "bert", "sentence", ["neg", "pos"],
                                     vocabulary=[" ".join(POSITIVE + NEGATIVE + FILLER)])
    train = write_sst2(tmp_path / "train.tsv", sentiment_rows(16, seed=0))
    dev = write_sst2(tmp_path / "dev.tsv", sentiment_rows(8, seed=1))
    (tmp_path / "pos.txt").write_text("\n".join(POS_LINES) + "\n", encoding="utf-8")
    args = ["--teacher", teacher, "--task", "sst2", "--train", train, "--eval", dev, "--output", tmp_path / "s",
            "--n-iter", "1", "--epochs", "1", "--pos-file", tmp_path / "pos.txt", "--cache-dir", tmp_path / "cache",
            *TINY_STUDENT, "--quiet"]
    code, captured = run_main(capsys, "distill.py", *args)
    assert code == 1 and "the model's label 'neg' is not one of sst2's labels" in captured.err
    code, captured = run_main(capsys, "distill.py", *args, "--label-map", "neg=0,pos=1", "--json", tmp_path / "r.json")
    assert code == 0, captured.err
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["task"] == "sst2" and "teacher_accuracy" in results
    _, _, task = load_student(tmp_path / "s")
    assert task.name == "sst2" and task.labels == ["0", "1"]
    for label_map, reused in (("neg=0,pos=1", True), ("neg=1,pos=0", False)):   # the map orders the cached logits
        output = tmp_path / f"again-{label_map}"
        code, captured = run_main(capsys, "distill.py", *args, "--label-map", label_map, "--output", output,
                                  "--json", output.with_suffix(".json"))
        assert code == 0, captured.err
        assert json.loads(output.with_suffix(".json").read_text())["cache_hit"] is reused
    code, captured = run_main(capsys, "distill.py", "--teacher", teacher, "--train", train, "--output",
                              tmp_path / "t", "--quiet")
    assert code == 1 and "a classifier trained with transformers needs --task" in captured.err


CONLL = """-DOCSTART- -X- -X- O

the DT B-NP O
cat NN I-NP B-PER
sat VBD B-VP O
on IN B-PP O
the DT B-NP O
mat NN I-NP B-LOC
. . O O

my PRP$ B-NP O
sister NN I-NP B-PER
reads VBZ B-VP O
a DT B-NP O
book NN I-NP B-MISC
. . O O
"""

SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
    {"context": "the cat sat on the mat . the dog ran in the park .",
     "qas": [{"id": "q1", "question": "where did the cat sit ?", "answers": [{"text": "the mat", "answer_start": 15}]},
             {"id": "q2", "question": "who ran ?", "answers": [{"text": "the dog", "answer_start": 24}]}]}]}]}


@pytest.mark.parametrize("kind, task_name, id2label", [("token", "conll2003", NER_LABELS), ("span", "squad", None)])
def test_finetune_predicts_and_evaluates_ner_and_squad_with_transformers_folders(tmp_path, capsys, kind, task_name,
                                                                               id2label):
    folder, _ = transformers_folder(tmp_path / "model", "bert", kind, id2label)
    if task_name == "conll2003":
        data = tmp_path / "dev.conll"
        data.write_text(CONLL, encoding="utf-8")
    else:
        data = tmp_path / "dev.json"
        data.write_text(json.dumps(SQUAD), encoding="utf-8")
    code, captured = run_main(capsys, "finetune.py", "--model", folder, "--task", task_name, "--eval", data,
                              "--json", tmp_path / "m.json", "--quiet")
    assert code == 0, captured.err
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["task"] == task_name and ("f1" in metrics)
    code, captured = run_main(capsys, "finetune.py", "--model", folder, "--task", task_name, "--predict", data,
                              "--output", tmp_path / "preds", "--quiet")
    assert code == 0, captured.err
    assert (tmp_path / "preds").is_file()
