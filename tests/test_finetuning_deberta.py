"""Fine-tuning a DeBERTa with minibert/finetuning.py, on a tiny v3-shaped
model and the toy SST-2 of tiny_models.py, in seconds: the pooler it gets is
DeBERTa's (GELU, transformers' ContextPooler), the Enhanced Mask Decoder's
absolute position table is dropped with the MLM head (torch.distributed
refuses parameters without a gradient), and the saved folder loads back to
the very model that was trained."""

import copy

import pytest
import torch

from minibert import finetuning
from minibert.commands import finetune as finetune_command
from minibert import heads
from minibert.checkpoints import load_pretrained, save_pretrained
from minibert.checkpoints.safetensors import load_safetensors
from minibert.deberta import DebertaConfig, DebertaModel, DebertaPooler
from minibert.model import Pooler
from minibert.tasks import make_task
from minibert.tasks.classification import ClassificationTask
from helpers import one_and_two_process_weights
from tiny_models import FILLER, NEGATIVE, POSITIVE, sentiment_rows, write_sst2, write_vocab

# deberta-v3-base's switches at a tiny size (test_deberta.py's V3)
V3 = dict(model_type="deberta-v2", relative_attention=True, pos_att_type="p2c|c2p", position_buckets=8,
          share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False)
POSITION_TABLE = "deberta.embeddings.position_embeddings.weight"


def tiny_deberta(vocab_size, **overrides):
    return DebertaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=37, max_position_embeddings=64, **{**V3, **overrides})


def write_base(folder, **overrides):
    """A pretrained-style DeBERTa folder: vocab.txt, the MLM head and the
    EMD's absolute table, no pooler (as every released DeBERTa)."""
    folder.mkdir()
    vocab_size = write_vocab(folder, [" ".join(POSITIVE + NEGATIVE + FILLER)])
    torch.manual_seed(0)
    save_pretrained(DebertaModel(tiny_deberta(vocab_size, **overrides)), folder)
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("finetune_deberta")
    base = write_base(root / "base")
    train = write_sst2(root / "train.tsv", sentiment_rows(320, seed=0))
    dev = write_sst2(root / "dev.tsv", sentiment_rows(64, seed=1))
    return base, train, dev


def test_the_base_folder_has_the_emd_table_and_no_pooler(setup):
    base, _, _ = setup
    encoder = load_pretrained(base)
    assert encoder.uses_emd and encoder.pooler is None
    assert POSITION_TABLE in load_safetensors(base / "model.safetensors")


def test_a_deberta_gets_debertas_pooler_and_drops_the_table_with_the_mlm_head(setup):
    base, _, _ = setup
    encoder = load_pretrained(base)
    heads.add_pooler_if_missing(encoder)
    assert type(encoder.pooler) is DebertaPooler                 # GELU, not BERT's tanh Pooler
    assert ("pooler.dense", "not in the checkpoint: freshly initialised for fine-tuning") in encoder.load_report.skipped
    task = ClassificationTask("sst2")
    model = finetuning.TaskModel(encoder, task.make_head(encoder.config)).train()
    assert encoder.mlm_head is None and encoder.embeddings.position_embeddings is None and not encoder.uses_emd
    # What DistributedDataParallel needs: one backward reaches every parameter.
    input_ids = torch.tensor([[2, 7, 9, 11, 3], [2, 8, 3, 0, 0]])
    attention_mask = (input_ids != 0).long()
    model(input_ids, attention_mask, torch.zeros_like(input_ids)).square().sum().backward()
    without_grad = [name for name, p in model.named_parameters() if p.grad is None]
    assert without_grad == []


def test_a_bert_still_gets_berts_tanh_pooler():
    from minibert.model import BertModel
    from tiny_models import tiny_config
    encoder = BertModel(tiny_config(40), with_pooler=False, with_pair_head=False)
    heads.add_pooler_if_missing(encoder)
    assert type(encoder.pooler) is Pooler


def test_a_position_biased_deberta_keeps_its_table_when_fine_tuned():
    encoder = DebertaModel(tiny_deberta(40, position_biased_input=True))
    finetuning.TaskModel(encoder, ClassificationTask("sst2").make_head(encoder.config))
    assert encoder.embeddings.position_embeddings is not None      # the input reads it


def test_fine_tuned_deberta_learns_and_reloads_to_the_same_logits(setup, tmp_path, monkeypatch):
    base, train, dev = setup
    saved = []                                   # a copy of the model each time fine_tune saves the folder
    original_save = finetune_command.save_task_model

    def save_and_keep_a_copy(model, *args, **kwargs):
        saved.append(copy.deepcopy(model).eval())
        return original_save(model, *args, **kwargs)

    monkeypatch.setattr(finetune_command, "save_task_model", save_and_keep_a_copy)
    task = ClassificationTask("sst2")
    summary = finetune_command.fine_tune(task, base, task.read(train), task.read(dev), tmp_path / "run", epochs=3,
                                   batch_size=16, learning_rate=3e-3, warmup=0.1, seed=0, progress=False,
                                   max_seq_len=32)
    losses = [record["classification_loss"] for record in summary["history"] if "classification_loss" in record]
    assert len(losses) == 6 and losses[-1] < 0.5 * losses[0]
    assert summary["best"]["accuracy"] >= 90.0

    files = load_safetensors(tmp_path / "run" / "model.safetensors")
    assert POSITION_TABLE not in files and "pooler.dense.weight" in files
    reloaded, _, tokenizer, record = finetune_command.load_task_model(tmp_path / "run", make_task)
    assert type(reloaded.base_model.pooler) is DebertaPooler and record["metrics"] == summary["best"]
    batch = finetuning.collate(task.features(task.read(dev), tokenizer, 32), tokenizer.pad_id)
    inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert (batch["attention_mask"] == 0).any()                     # padded rows are compared too
    with torch.no_grad():
        trained, again = saved[-1](*inputs), reloaded(*inputs)
    assert torch.equal(trained, again)
    accuracy = 100.0 * (again.argmax(-1) == batch["labels"]).float().mean().item()
    assert accuracy == pytest.approx(summary["best"]["accuracy"])


def test_two_gloo_processes_fine_tune_a_deberta_like_one_process(setup, tmp_path):
    """The DDP run that failed with unused parameters (the EMD table) now
    runs, and matches one process with the same global batch."""
    _, train, dev = setup
    base = write_base(tmp_path / "base", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    args = ["--task", "sst2", "--model", base, "--train", train, "--eval", dev, "--max-steps", "3",
            "--batch-size", "16", "--max-seq-len", "32", "--lr", "3e-3", "--seed", "2", "--device", "cpu", "--quiet",
            "--keep-checkpoint"]
    a, b = one_and_two_process_weights("finetune.py", args, tmp_path)
    assert a.keys() == b.keys() and "base_model.embeddings.position_embeddings.weight" not in a
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-5, name
