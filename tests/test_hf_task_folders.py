"""A fine-tuned folder is a complete Hugging Face model folder
(minibert/checkpoints/task_heads.py): transformers' Auto classes load it with
nothing missing or unexpected and give minibert's logits, its pipeline names
minibert's labels with minibert's probabilities, and a folder without its
head is a one-line error."""

import json

import pytest
import torch

from minibert import finetuning
from minibert.commands import finetune as finetune_command
from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.deberta import DebertaConfig, DebertaModel
from minibert.heads import add_pooler_if_missing
from minibert.model import BertModel
from minibert.support.errors import MiniBertError
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
    from minibert.checkpoints.task_heads import print_task_heads
    out = io.StringIO()
    print_task_heads(out)
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert ["span", "head.span.weight", "qa_outputs.weight", "<Family>ForQuestionAnswering"] in rows
    assert len(rows) == 6
