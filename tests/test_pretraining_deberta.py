"""train_mlm.py --arch deberta: a DeBERTa v2/v3 encoder pretrained with MLM
through the Enhanced Mask Decoder, by the same loop as BERT: the loss falls,
--resume ends with the weights of an uninterrupted run, the sparse MLM head
(mlm_positions) gives the dense head's loss and gradients, the flags build
v3-base's switches, and the saved folder loads back."""

import json

import pytest
import torch
import torch.nn.functional as F

from minibert.deberta import DebertaConfig, DebertaModel
from minibert.pretraining import MaskedLMObjective
from minibert.commands.train_mlm import build_model, pretrain
from minibert.commands.trainer import load_checkpoint
from helpers import run_script_in_process
from test_pretraining import write_corpus

# A tiny DeBERTa through train_mlm.py's flags (the model's 512 positions and 256 buckets stay).
TINY_FLAGS = ["--arch", "deberta", "--vocab-size", "200", "--layers", "2", "--hidden", "32", "--heads", "2",
              "--intermediate", "64", "--max-seq-len", "32", "--batch-size", "8", "--lr", "3e-3", "--warmup", "2",
              "--eval-every", "0", "--checkpoint-every", "0", "--seed", "3", "--device", "cpu", "--quiet"]


def tiny_deberta_config(vocab_size, dropout=0.1):
    """v3's switches at a tiny size (64 positions, so 16 buckets)."""
    return DebertaConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=dropout,
                         attention_probs_dropout_prob=dropout, model_type="deberta-v2", relative_attention=True,
                         position_biased_input=False, pos_att_type="c2p|p2c", position_buckets=16,
                         share_att_key=True, norm_rel_ebd="layer_norm")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread; on a shared machine two threads
    waiting for each other made these steps ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def train_mlm(capsys, *args):
    """train_mlm.py in this process: (exit code, stdout, stderr lines)."""
    code, captured = run_script_in_process(capsys, "train_mlm.py", *args)
    return code, captured.out, captured.err.strip().splitlines()


def test_train_mlm_arch_deberta_builds_v3_switches_and_lowers_the_loss(corpus, tmp_path, capsys, monkeypatch):
    summary_file = tmp_path / "summary.json"
    monkeypatch.setattr("minibert.commands.train_mlm.save_model_folder", lambda *args: None)   # the last test saves
    code, _, err = train_mlm(capsys, "--corpus", *corpus, "--output", tmp_path / "run", *TINY_FLAGS,
                             "--steps", "40", "--json", summary_file)
    assert code == 0, err
    summary = json.loads(summary_file.read_text())
    config = summary["run_config"]["model_config"]
    assert {k: config[k] for k in ("model_type", "relative_attention", "position_biased_input", "pos_att_type",
                                    "position_buckets", "share_att_key", "norm_rel_ebd", "max_relative_positions",
                                    "type_vocab_size", "hidden_size", "num_hidden_layers")} == {
        "model_type": "deberta-v2", "relative_attention": True, "position_biased_input": False,
        "pos_att_type": ["c2p", "p2c"], "position_buckets": 256, "share_att_key": True,
        "norm_rel_ebd": "layer_norm", "max_relative_positions": -1, "type_vocab_size": 0, "hidden_size": 32,
        "num_hidden_layers": 2}
    assert summary["run_config"]["pair_objective"] == "none"
    history = [h for h in summary["history"] if "mlm_loss" in h]
    assert history[0]["mlm_loss"] > 4.5                       # about ln(200) = 5.3 at the start
    assert history[-1]["mlm_loss"] < history[0]["mlm_loss"] - 1.0
    assert "nsp_loss" not in history[-1]


def test_resumed_deberta_run_ends_with_the_same_weights_as_an_uninterrupted_one(corpus, tmp_path, monkeypatch):
    from minibert.tokenization import Tokenizer
    tokenizer = Tokenizer.train_wordpiece(corpus, vocab_size=200, do_lower_case=True)
    config = tiny_deberta_config(tokenizer.vocab_size)        # dropout 0.1: its generator is resumed too
    settings = dict(batch_size=8, grad_accum_steps=2, steps=8, learning_rate=3e-3, warmup_steps=2, eval_every=0,
                    checkpoint_every=0, max_seq_len=32, seed=3, progress=False, device="cpu", keep_checkpoint=True)
    monkeypatch.setattr("minibert.commands.train_mlm.save_model_folder", lambda *args: None)   # weights: checkpoint.pt
    pretrain(corpus, tmp_path / "straight", config, tokenizer, **settings)
    # A first process stops after its first step (its schedule still planned for 8), a second resumes.
    pretrain(corpus, tmp_path / "resumed", config, tokenizer, max_minutes=0.0, **settings)
    assert load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["step"] == 1
    pretrain(corpus, tmp_path / "resumed", config, tokenizer, resume=True, **settings)
    straight = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")
    assert straight["step"] == resumed["step"] == 8
    assert "embeddings.position_embeddings.weight" in straight["model"]      # EMD's absolute table is trained
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name


def test_sparse_head_through_emd_gives_the_dense_heads_loss_and_gradients():
    torch.manual_seed(0)
    model = build_model(tiny_deberta_config(120, dropout=0.0), "none")
    assert isinstance(model, DebertaModel) and model.uses_emd
    input_ids = torch.randint(5, 120, (4, 16))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[2, 11:] = 0                                # padded rows: EMD masks keys as the encoder does
    attention_mask[3, 6:] = 0
    labels = torch.full_like(input_ids, -100)
    labels[:, 3] = input_ids[:, 3]
    labels[:2, 9] = input_ids[:2, 9]
    labels[0, 15] = input_ids[0, 15]
    batch = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids),
                 mlm_labels=labels)
    sparse_loss, _ = MaskedLMObjective().losses(model, batch)["mlm"]
    sparse_loss.backward()
    sparse_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    dense_logits = model(input_ids, attention_mask=attention_mask).mlm_logits          # (B, T, V), every position
    dense_loss = F.cross_entropy(dense_logits.view(-1, 120), labels.view(-1), ignore_index=-100, reduction="sum")
    dense_loss.backward()
    assert sparse_loss.item() > 10.0                          # 9 masked tokens, about ln(120) = 4.8 each
    assert abs(sparse_loss.item() - dense_loss.item()) < 1e-4
    for name, p in model.named_parameters():
        assert (p.grad - sparse_grads[name]).abs().max() < 1e-5, name
    assert sparse_grads["embeddings.position_embeddings.weight"].abs().sum() > 0    # EMD reads positions


def test_arch_deberta_refuses_bert_only_flags_in_one_line(corpus, tmp_path, capsys):
    cases = [(["--pair-objective", "nsp"], "DeBERTa pretrains with MLM only"),
             (["--model-type", "albert"], "--arch deberta takes no --model-type"),
             (["--embedding-size", "16"], "--embedding-size: 16 != --hidden 32"),
             (["--position-buckets", "1200"], "--position-buckets: 1200")]
    for extra, phrase in cases:
        code, _, err = train_mlm(capsys, "--corpus", *corpus, "--output", tmp_path / "o", *TINY_FLAGS, *extra)
        assert code == 2 and err[0].startswith("usage: "), err        # a usage error
        assert err[-1].startswith("error: argument") and phrase in err[-1], err
    bert_config = tmp_path / "config.json"
    bert_config.write_text(json.dumps({"model_type": "bert", "vocab_size": 200, "hidden_size": 32,
                                       "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}))
    code, _, err = train_mlm(capsys, "--corpus", *corpus, "--output", tmp_path / "o", *TINY_FLAGS,
                             "--config", bert_config)
    assert code == 1 and err == [f"error: --arch deberta: --config {bert_config} is a bert config"], err


def test_pair_objective_auto_means_mlm_only_for_a_deberta_config_file(corpus, tmp_path, capsys, monkeypatch):
    """A DeBERTa config.json as --config (without --arch) pretrains a DeBERTa, MLM only."""
    config_file = tmp_path / "config.json"
    from minibert.tokenization import Tokenizer
    vocab_size = Tokenizer.train_wordpiece(corpus, vocab_size=200).vocab_size
    config_file.write_text(json.dumps(tiny_deberta_config(vocab_size).to_dict()))
    monkeypatch.setattr("minibert.commands.train_mlm.save_model_folder", lambda *args: None)
    flags = [f for f in TINY_FLAGS if f not in ("--arch", "deberta")]
    code, _, err = train_mlm(capsys, "--corpus", *corpus, "--output", tmp_path / "run", *flags, "--steps", "1",
                             "--config", config_file, "--pair-objective", "auto", "--keep-checkpoint")
    assert code == 0, err
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["run_config"]["pair_objective"] == "none"
    assert state["run_config"]["model_config"] == tiny_deberta_config(vocab_size).to_dict()
    assert "encoder.relative_embeddings.weight" in state["model"]


def test_saved_deberta_folder_loads_back_with_the_trained_weights(corpus, tmp_path, capsys):
    from minibert.checkpoints import load_pretrained
    run = tmp_path / "run"
    code, _, err = train_mlm(capsys, "--corpus", *corpus, "--output", run, *TINY_FLAGS, "--steps", "2",
                             "--keep-checkpoint")
    assert code == 0, err
    model = load_pretrained(run)
    assert isinstance(model, DebertaModel) and model.uses_emd
    trained = load_checkpoint(run / "checkpoint.pt")["model"]
    loaded = model.state_dict()
    assert sorted(loaded) == sorted(trained)
    for name, tensor in trained.items():
        assert torch.equal(loaded[name], tensor), name
