"""minibert/pretraining.py and train_mlm.py: what BERT's pretraining data is
made of ([BERT] 3.1, A.1): 15% of the real tokens chosen per sequence (whole
words when asked), and of those 80% replaced by [MASK], 10% by a random token
and 10% left as they are; the sparse MLM head, loss going down, bit-exact
resume of a whole pretraining run, distributed training equal to one process,
and the run's folders and errors.

The training loop on its own is tested in test_training.py."""

import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minibert.support.caches import build_token_cache, check_token_cache
from minibert.model import BertConfig, BertModel
from minibert.pretraining import (SENTENCE_END, MaskedLMObjective, corrupt_chosen, mask_tokens, masked_lm_loss,
                                  normal_ids, split_sentences)
from minibert.commands.train_mlm import pretrain
from minibert.support import MiniBertError
from minibert.support.files import tokenizer_fingerprint
from minibert.tokenization import Tokenizer, wordpiece_tokenizer
from minibert.commands.trainer import load_checkpoint
from helpers import assert_the_main_process_alone_reports, one_and_two_process_runs, run_script_in_process
from tiny_models import save_tiny_model, write_vocab


# ----------------------------------------------------------------------------
# Masking: which tokens, and what they become
# ----------------------------------------------------------------------------


def test_corrupt_chosen_makes_80_percent_mask_10_random_10_unchanged():
    V, mask_id, first_normal = 1000, 4, 5
    input_ids = torch.randint(first_normal, V, (200, 500), generator=torch.Generator().manual_seed(0))
    chosen = torch.zeros_like(input_ids, dtype=torch.bool)
    chosen[:, ::2] = True
    corrupted = corrupt_chosen(input_ids, chosen, mask_id, first_normal, V, torch.Generator().manual_seed(1))
    n = chosen.sum().item()
    masked = (corrupted == mask_id) & chosen
    unchanged = (corrupted == input_ids) & chosen
    random = chosen & ~masked & ~unchanged
    assert torch.equal(corrupted[~chosen], input_ids[~chosen])          # positions not chosen stay as they are
    assert masked.sum() / n == pytest.approx(0.8, abs=0.01)
    assert unchanged.sum() / n == pytest.approx(0.1 + 0.1 / V, abs=0.01)  # a random draw may hit the same id
    assert random.sum() / n == pytest.approx(0.1, abs=0.01)
    assert corrupted[random].min() >= first_normal                      # never a special token


def test_mask_tokens_chooses_exactly_the_rounded_fraction_of_real_tokens():
    input_ids = torch.randint(5, 50, (4, 30), generator=torch.Generator().manual_seed(0))
    special = torch.zeros(4, 30, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    special[2, 20:] = True                                               # a padded row: 18 real tokens
    _, labels, chosen = mask_tokens(input_ids, special, ~special, (3, 50, 5), torch.Generator().manual_seed(0))
    assert chosen.sum(1).tolist() == [round(0.15 * 28)] * 2 + [round(0.15 * 18)] + [round(0.15 * 28)]
    assert torch.equal(labels[chosen], input_ids[chosen]) and (labels[~chosen] == -100).all()


def test_masking_chooses_15_percent_split_80_10_10_and_never_specials():
    generator = torch.Generator().manual_seed(0)
    B, T, V = 400, 100, 1000
    input_ids = torch.randint(10, V, (B, T), generator=generator)
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True          # [CLS] ... [SEP]
    special[: B // 2, 80:] = True                  # padding in half the rows
    word_starts = torch.ones(B, T, dtype=torch.bool)
    corrupted, labels, chosen = mask_tokens(input_ids, special, word_starts, (3, V, 5), generator)
    real = ~special
    assert not (chosen & special).any()
    per_row = chosen.sum(1).float() / real.sum(1).float()
    assert per_row.sub(0.15).abs().max() < 0.01     # exactly round(15%) per sequence
    n = chosen.sum().item()
    masked = (corrupted == 3) & chosen
    kept = (corrupted == input_ids) & chosen
    assert abs(masked.sum().item() / n - 0.8) < 0.01
    assert abs(kept.sum().item() / n - 0.1) < 0.01  # includes the rare random draw of the same token
    assert torch.equal(labels[chosen], input_ids[chosen]) and (labels[~chosen] == -100).all()


def test_whole_word_masking_takes_every_piece_of_a_word():
    generator = torch.Generator().manual_seed(1)
    B, T = 200, 60
    input_ids = torch.randint(10, 500, (B, T), generator=generator)
    special = torch.zeros(B, T, dtype=torch.bool)
    special[:, 0] = special[:, -1] = True
    word_starts = torch.rand(B, T, generator=generator) < 0.5   # words of 1..n pieces
    word_starts |= special
    word_starts[:, 1] = True
    _, _, chosen = mask_tokens(input_ids, special, word_starts, (3, 500, 5), generator, whole_word=True)
    word_index = word_starts.long().cumsum(1)
    for b in range(B):
        for w in word_index[b][chosen[b]].unique():
            members = (word_index[b] == w) & ~special[b]
            assert chosen[b][members].all(), "a word was masked only in part"
    target = ((~special).sum(1).float() * 0.15).round()
    assert (chosen.sum(1) <= target).all()          # never more than the per-sequence count
    rate = chosen.sum().item() / (~special).sum().item()
    assert 0.12 < rate < 0.16


# ----------------------------------------------------------------------------
# Exercise of assignment 2 (docs/coursework.md)
# ----------------------------------------------------------------------------


def test_exercise_mlm_masking():
    mask_id, first_normal_id, vocab_size = 4, 5, 1005
    input_ids = torch.full((200, 500), 7)
    chosen = torch.zeros(200, 500, dtype=torch.bool)
    chosen[:, ::2] = True                                            # 50 000 chosen positions
    corrupted = corrupt_chosen(input_ids, chosen, mask_id, first_normal_id, vocab_size,
                               torch.Generator().manual_seed(0))
    torch.testing.assert_close(input_ids, torch.full((200, 500), 7))         # the input itself is left alone
    torch.testing.assert_close(corrupted[~chosen], input_ids[~chosen])       # only chosen positions change
    picked = corrupted[chosen]
    masked = (picked == mask_id).float().mean().item()
    kept = (picked == 7).float().mean().item()
    replaced = ((picked != mask_id) & (picked != 7)).float().mean().item()
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1) < 0.01 and abs(replaced - 0.1) < 0.01
    others = picked[(picked != mask_id) & (picked != 7)]
    assert others.min() >= first_normal_id and others.max() < vocab_size   # never a special token
    assert len(set(others.tolist())) > 900                            # drawn over the whole normal vocabulary
    again = corrupt_chosen(input_ids, chosen, mask_id, first_normal_id, vocab_size, torch.Generator().manual_seed(0))
    torch.testing.assert_close(corrupted, again)                             # all randomness from the generator


def test_exercise_mlm_masking_draws_every_normal_id_up_to_the_last():
    # vocabulary 0..7, of which 0..4 special: a random replacement is 5, 6 or 7, each about a third of the time
    input_ids = torch.full((100, 300), 2)
    chosen = torch.ones(100, 300, dtype=torch.bool)
    corrupted = corrupt_chosen(input_ids, chosen, 4, 5, 8, torch.Generator().manual_seed(0))
    replaced = corrupted[(corrupted != 4) & (corrupted != 2)]
    counts = {i: int((replaced == i).sum()) for i in range(8)}
    assert {i for i, n in counts.items() if n} == {5, 6, 7}, f"replacements drawn: {counts}"
    assert all(abs(counts[i] / len(replaced) - 1 / 3) < 0.05 for i in (5, 6, 7)), counts


def test_exercise_mlm_masking_decides_each_fate_with_one_uniform_draw():
    # The docstring's order: first one uniform number per position (torch.rand, the input's shape) from the
    # generator. Its value alone decides: below 0.8 [MASK], from 0.8 to 0.9 a random token, 0.9 and up unchanged.
    input_ids = torch.full((50, 200), 2)
    chosen = torch.rand(50, 200, generator=torch.Generator().manual_seed(7)) < 0.5
    corrupted = corrupt_chosen(input_ids, chosen, 4, 5, 1000, torch.Generator().manual_seed(3))
    roll = torch.rand(50, 200, generator=torch.Generator().manual_seed(3))
    fate = torch.where(roll < 0.8, 0, torch.where(roll < 0.9, 1, 2))
    found = torch.where(corrupted == 4, 0, torch.where(corrupted != 2, 1, 2))
    wrong = chosen & (fate != found)
    assert not wrong.any(), (f"{int(wrong.sum())} of {int(chosen.sum())} chosen positions do not follow the one "
                             f"draw; the first, {wrong.nonzero()[0].tolist()}: draw {roll[wrong][0].item():.3f}")


def test_random_replacements_come_from_the_longest_run_of_normal_ids():
    assert normal_ids({0, 1, 2, 3, 4}, 12000) == (5, 12000)                   # minibert's vocabularies
    assert normal_ids({0, 100, 101, 102, 103}, 30522) == (104, 30522)          # Google's: [unused0..98] below
    assert normal_ids({0, 1, 2, 3, 128000}, 128001) == (4, 128000)             # DeBERTa v3: [MASK] last


def test_sentence_splitter_keeps_abbreviation_free_sentences_apart():
    assert split_sentences('He ran. "Stop!" she cried. Then 3 dogs came?') == ['He ran.', '"Stop!" she cried.', 'Then 3 dogs came?']
    assert split_sentences("  version 2.0 is out. it works.  ") == ["version 2.0 is out. it works."]   # no capital after

REPO = Path(__file__).resolve().parent.parent

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.", "A stitch in time saves nine.",
    "All that glitters is not gold.", "The early bird catches the worm.",
    "Actions speak louder than words.", "Fortune favours the bold and the brave.",
    "Knowledge is power, and power corrupts.", "The pen is mightier than the sword.",
    "Where there is smoke there is fire.", "Beauty is in the eye of the beholder.",
]


def write_corpus(folder, documents=12):
    """A small corpus in the real format: one paragraph per line, blank lines between documents."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for d in range(documents):
        for p in range(4):
            lines.append(" ".join(SENTENCES[(d + p + k) % len(SENTENCES)] for k in range(3)))
        lines.append("")
    (folder / "book_a.txt").write_text("\n".join(lines), encoding="utf-8")
    (folder / "book_b.txt").write_text("\n".join(reversed(lines)), encoding="utf-8")
    return sorted(folder.glob("*.txt"))


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    files = write_corpus(folder)
    return files, Tokenizer.train_wordpiece(files, vocab_size=200, do_lower_case=True)


def tiny_config(vocab_size, dropout=0.0):
    return BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=dropout,
                      attention_probs_dropout_prob=dropout)


def test_sparse_head_gives_the_same_loss_and_gradients_as_the_full_vocabulary_head():
    config = tiny_config(120)
    torch.manual_seed(0)
    model = BertModel(config, with_pooler=False, with_pair_head=False)
    input_ids = torch.randint(5, 120, (4, 16))
    labels = torch.full_like(input_ids, -100)
    labels[:, 3] = input_ids[:, 3]
    labels[1:, 9] = input_ids[1:, 9]
    batch = dict(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                 token_type_ids=torch.zeros_like(input_ids), mlm_labels=labels)
    sparse_loss, _ = MaskedLMObjective().losses(model, batch)["mlm"]
    sparse_loss.backward()
    sparse_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    full_logits = model(input_ids).mlm_logits                     # (B, T, V)
    full_loss = F.cross_entropy(full_logits.view(-1, 120), labels.view(-1), ignore_index=-100, reduction="sum")
    full_loss.backward()
    assert abs(sparse_loss.item() - full_loss.item()) < 1e-4
    for name, p in model.named_parameters():
        assert (p.grad - sparse_grads[name]).abs().max() < 1e-5, name


def run_pretrain(files, tokenizer, output, steps, **kwargs):
    settings = dict(batch_size=8, learning_rate=3e-3, warmup_steps=2, eval_every=0, checkpoint_every=0,
                    max_seq_len=32, seed=3, progress=False, device="cpu", keep_checkpoint=True)
    settings.update(kwargs)
    return pretrain(files, output, tiny_config(tokenizer.vocab_size), tokenizer, steps=steps, **settings)


def test_a_few_steps_lower_the_loss(corpus_and_tokenizer, tmp_path):
    files, tokenizer = corpus_and_tokenizer
    summary = run_pretrain(files, tokenizer, tmp_path / "run", steps=40, pair_objective="nsp")
    history = [h for h in summary["history"] if "mlm_loss" in h]
    assert history[-1]["mlm_loss"] < history[0]["mlm_loss"] - 1.0
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_resumed_run_ends_with_the_same_weights_as_an_uninterrupted_one(corpus_and_tokenizer, tmp_path):
    files, tokenizer = corpus_and_tokenizer
    kwargs = dict(pair_objective="nsp", grad_accum_steps=2)
    from minibert.commands.trainer import load_checkpoint
    run_pretrain(files, tokenizer, tmp_path / "straight", steps=12, **kwargs)
    # The interrupted run: a first process stops after 5 steps (its schedule
    # still planned for 12), a second resumes from the checkpoint.
    run_pretrain(files, tokenizer, tmp_path / "resumed", steps=12, max_minutes=0.0, **kwargs)
    assert load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["step"] == 1
    run_pretrain(files, tokenizer, tmp_path / "resumed", steps=12, resume=True, **kwargs)
    straight = load_checkpoint(tmp_path / "straight" / "checkpoint.pt")["model"]
    resumed = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["model"]
    for name in straight:
        assert torch.equal(straight[name], resumed[name]), name


def two_process_args(files, tmp_path, dropout, steps):
    """train_mlm.py's flags for one_and_two_process_runs: a tiny BERT, a global batch of 8."""
    tokenizer_folder = tmp_path / "tokenizer"
    return ["--corpus", *map(str, files), "--vocab", str(tokenizer_folder / "vocab.txt"), "--layers", "2",
            "--hidden", "32", "--heads", "2", "--intermediate", "64", "--dropout", str(dropout), "--steps",
            str(steps), "--batch-size", "8", "--max-seq-len", "32", "--lr", "3e-3", "--warmup", "2",
            "--pair-objective", "nsp", "--seed", "5", "--device", "cpu", "--quiet", "--eval-every", "0",
            "--checkpoint-every", "0", "--cache-dir", str(tmp_path / "cache"), "--keep-checkpoint"]


def test_two_gloo_processes_match_one_process_with_the_same_global_batch(corpus_and_tokenizer, tmp_path):
    """Without dropout, two processes with half the batch each make one
    process's update; the run acts once: one "saved" line, one --json, from
    the main process, and the tokens and losses it reports are both
    processes' together, so they read as one process's."""
    files, tokenizer = corpus_and_tokenizer
    tokenizer.save(tmp_path / "tokenizer")
    runs = one_and_two_process_runs("train_mlm.py", two_process_args(files, tmp_path, 0, 6), tmp_path)
    one, two = runs["one"], runs["two"]
    for name in one.weights:
        assert (one.weights[name] - two.weights[name]).abs().max() < 1e-6, name
    assert_the_main_process_alone_reports(two, tmp_path / "two.json")
    # Every process counts the real tokens of its own rows (no padding): their sum is what one process counts.
    assert two.summary["tokens_seen"] == one.summary["tokens_seen"] > 0
    assert f"{one.summary['tokens_seen']:,} tokens" in two.stdout
    last_one, last_two = one.summary["history"][-1], two.summary["history"][-1]
    assert last_one.keys() == last_two.keys()
    for key in ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy"):
        assert last_two[key] == pytest.approx(last_one[key], abs=1e-4), key


def test_with_dropout_two_processes_draw_other_masks_but_train_alike(corpus_and_tokenizer, tmp_path):
    """With dropout each process draws the masks of its own rows, from (seed,
    step, rank), so two processes do not make one process's update: the
    weights differ (docs/guide.md 3). The updates are draws of the same
    distribution, and both runs train: the loss falls alike."""
    files, tokenizer = corpus_and_tokenizer
    tokenizer.save(tmp_path / "tokenizer")
    runs = one_and_two_process_runs("train_mlm.py", two_process_args(files, tmp_path, 0.1, 30), tmp_path)
    one, two = runs["one"], runs["two"]
    assert max((one.weights[n] - two.weights[n]).abs().max() for n in one.weights) > 1e-4
    losses = {name: [h["mlm_loss"] for h in run.summary["history"]] for name, run in runs.items()}
    for name, curve in losses.items():
        assert len(curve) == 3 and curve[-1] < curve[0] - 0.5, (name, curve)
    assert losses["two"][-1] == pytest.approx(losses["one"][-1], abs=0.25), losses
    assert two.summary["tokens_seen"] == one.summary["tokens_seen"]
    assert_the_main_process_alone_reports(two, tmp_path / "two.json")


def test_train_mlm_reports_bad_input_in_one_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    cases = [(["--corpus", str(tmp_path / "missing.txt")], "no such file"),
             (["--corpus", str(empty), "--vocab-size", "50"], "empty.txt")]
    for extra, phrase in cases:
        result = subprocess.run([sys.executable, str(REPO / "train_mlm.py"), *extra, "--output", str(tmp_path / "o"),
                                 "--quiet"], capture_output=True, text=True, cwd=REPO)
        assert result.returncode == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and phrase in lines[0], result.stderr


SHARED_CORPUS = REPO.parent / "shared" / "data" / "corpus"


@pytest.mark.shared_data
@pytest.mark.skipif(not SHARED_CORPUS.is_dir(), reason="needs ../shared/data/corpus (the Gutenberg books), absent here")
def test_bundled_model_predicts_masked_tokens_of_a_held_out_book(tmp_path):
    """Alice in Wonderland was held out of the bundled model's training: its
    masked-token accuracy there should be near the model card's 52.6%."""
    from minibert.checkpoints import load_pretrained
    from minibert.pretraining import evaluate_mlm
    from minibert.commands.train_mlm import corpus_batches
    from minibert.tokenization import load_tokenizer
    tokenizer = load_tokenizer()
    batches = corpus_batches([SHARED_CORPUS / "pg11_alice_in_wonderland.txt"], tokenizer, tmp_path, 128, 32,
                             seed=1, pair_objective="none", mask_prob=0.15, whole_word=False, progress=False)
    metrics = evaluate_mlm(load_pretrained(), batches, num_batches=4, device="cpu")
    assert metrics["masked_tokens"] > 500
    assert 40 < metrics["masked_accuracy"] < 70          # percent


def test_vocab_config_mismatch_and_incompatible_resume_are_clear_errors(corpus_and_tokenizer, tmp_path):
    from minibert.support import MiniBertError
    files, tokenizer = corpus_and_tokenizer
    wrong_vocab = tiny_config(tokenizer.vocab_size + 1)
    with pytest.raises(MiniBertError, match="vocab_size"):
        pretrain(files, tmp_path / "a", wrong_vocab, tokenizer, steps=1, progress=False, device="cpu")
    run_pretrain(files, tokenizer, tmp_path / "b", steps=2)
    with pytest.raises(MiniBertError, match="--resume: .*--batch-size 8, this run has --batch-size 4"):
        run_pretrain(files, tokenizer, tmp_path / "b", steps=2, batch_size=4, resume=True)
    with pytest.raises(MiniBertError, match="--resume: .*--optimizer 'adamw', this run has --optimizer 'bert-adam'"):
        run_pretrain(files, tokenizer, tmp_path / "b", steps=2, optimizer="bert-adam", resume=True)


# ----------------------------------------------------------------------------
# Reliability: bad input, killed runs, --resume, output folders
# ----------------------------------------------------------------------------

TINY_RUN = ["--vocab-size", "200", "--layers", "1", "--hidden", "16", "--heads", "2", "--intermediate", "32",
            "--max-seq-len", "32", "--batch-size", "4", "--warmup", "0", "--eval-every", "0", "--device", "cpu",
            "--quiet"]


def train_mlm(capsys, corpus, output, *extra):
    """train_mlm.py with a tiny model, in this process: (exit code, stdout, stderr lines)."""
    code, captured = run_script_in_process(capsys, "train_mlm.py", "--corpus", *corpus, "--output", output,
                                           *TINY_RUN, *extra)
    return code, captured.out, captured.err.strip().splitlines()


def vocabulary_of(tokenizer):
    return tokenizer.convert_ids_to_tokens(list(range(tokenizer.vocab_size)))


def test_train_wordpiece_gives_the_same_vocabulary_every_time(tmp_path):
    """tokenizers' trainer alone numbered the "##x" pieces in hash-map order,
    new in every call, and broke ties between pairs by those numbers."""
    files = write_corpus(tmp_path)
    first = vocabulary_of(Tokenizer.train_wordpiece(files, vocab_size=150))
    for _ in range(3):
        assert vocabulary_of(Tokenizer.train_wordpiece(files, vocab_size=150)) == first


def test_a_corpus_that_is_not_utf8_is_a_one_line_error(tmp_path, capsys):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("Caf\xe9 au lait. Cr\xe8me br\xfbl\xe9e.\n".encode("latin-1") * 20)
    code, _, err = train_mlm(capsys, [latin1], tmp_path / "run")       # training the vocabulary reads it
    assert code == 1 and len(err) == 1 and "latin1.txt: cannot read as UTF-8 text" in err[0], err
    write_vocab(tmp_path)
    code, _, err = train_mlm(capsys, [latin1], tmp_path / "run", "--vocab", tmp_path / "vocab.txt")
    assert code == 1 and len(err) == 1 and "latin1.txt: cannot read corpus file as UTF-8 text" in err[0], err


def test_a_damaged_token_cache_marker_is_rebuilt_or_reported(corpus_and_tokenizer, tmp_path, capsys):
    files, tokenizer = corpus_and_tokenizer
    folder = build_token_cache(files, tokenizer, tmp_path / "cache", split_sentences, SENTENCE_END.pattern,
                               progress=False)
    (folder / "done").write_text('{"files": [', encoding="utf-8")          # a write cut short
    with pytest.raises(MiniBertError, match="damaged token cache marker"):
        check_token_cache(folder, tokenizer)
    assert build_token_cache(files, tokenizer, tmp_path / "cache", split_sentences, SENTENCE_END.pattern,
                               progress=False) == folder   # built again
    assert check_token_cache(folder, tokenizer) == folder
    (folder / "done").write_bytes(b"\xff\xfe not JSON")
    tokenizer.save(tmp_path / "vocab")
    code, _, err = train_mlm(capsys, [folder], tmp_path / "run", "--vocab", tmp_path / "vocab" / "vocab.txt")
    assert code == 1 and len(err) == 1 and "damaged token cache marker" in err[0], err


def test_the_final_save_replaces_the_whole_model_or_nothing(corpus_and_tokenizer, tmp_path, monkeypatch):
    import minibert.checkpoints
    from minibert.commands import train_mlm as train_mlm_command
    files, tokenizer = corpus_and_tokenizer
    run = tmp_path / "run"
    run_pretrain(files, tokenizer, run, steps=2)                       # a model, its checkpoint and its cache
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    model = BertModel(tiny_config(tokenizer.vocab_size), with_pair_head=False)

    def dies_after_the_weights(model, folder, tokenizer=None):     # as a kill or a full disk half-way would
        (folder / "model.safetensors").write_bytes(b"new weights")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(minibert.checkpoints, "save_pretrained", dies_after_the_weights)
    with pytest.raises(MiniBertError, match="run: cannot write it \\(No space left on device.*the previous folder is unchanged"):
        train_mlm_command.save_model_folder(model, tokenizer, run)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before   # the old model, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]                        # no staging folder left
    monkeypatch.undo()
    (run / "task.json").write_text("{}")                 # as if --force had been given a fine-tuned folder
    (run / "metrics.json").write_text("{}")
    train_mlm_command.save_model_folder(model, tokenizer, run)
    assert not (run / "task.json").exists() and not (run / "metrics.json").exists()   # no stale record
    assert (run / "model.safetensors").read_bytes() != before["model.safetensors"]
    assert (run / "checkpoint.pt").read_bytes() == before["checkpoint.pt"] and (run / "cache").is_dir()


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
@pytest.mark.parametrize("limit, steps, what", [
    (2_000, "2", "tokens.npy: cannot write it (File too large)"),
    (60_000, "2", "checkpoint.pt: cannot write it (File too large)"),
    (5_000, "0", "run: cannot write it (File too large, model.safetensors); the previous folder is unchanged")])
def test_a_full_disk_is_one_line_naming_the_file(tmp_path, limit, steps, what):
    # RLIMIT_FSIZE stands in for a full disk: a write past it fails with EFBIG as one past the disk's end
    # fails with ENOSPC; 2 kB stops the token cache, 60 kB the first checkpoint (the cache fits), 5 kB
    # with no step the final save, named by its folder rather than the hidden folder it is staged in.
    files = write_corpus(tmp_path / "corpus")
    program = ("import resource, runpy, signal, sys\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
               "sys.argv = sys.argv[1:]\n"
               "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    done = subprocess.run([sys.executable, "-c", program, str(Path(__file__).parents[1] / "train_mlm.py"),
                           "--corpus", *map(str, files), "--output", str(tmp_path / "run"), *TINY_RUN,
                           "--steps", steps, "--checkpoint-every", "1"], capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and what in lines[0], lines[0]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.")] == []     # no staging folder left


def test_checkpoint_files_left_by_killed_runs_are_removed(corpus_and_tokenizer, tmp_path):
    files, tokenizer = corpus_and_tokenizer
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()                                                        # its PID is no process now
    run = tmp_path / "run"
    run.mkdir()
    stale = run / f".checkpoint.pt.{finished.pid}.0badc0de.tmp"            # killed while writing a checkpoint
    stale.write_bytes(b"half a checkpoint")
    stale_model = run / f".model.{finished.pid}.0badc0de.tmp"              # killed while saving the model
    stale_model.mkdir()
    (stale_model / "config.json").write_text("{")
    live = run / f".checkpoint.pt.{os.getpid()}.0000cafe.tmp"              # a live process may be writing it
    live.write_bytes(b"being written")
    run_pretrain(files, tokenizer, run, steps=2)
    assert sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp")) == [live.name]


def test_resume_without_a_checkpoint_starts_from_step_0_and_says_so(tmp_path, capsys):
    files = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    (run / "cache").mkdir(parents=True)          # all a run killed before its first checkpoint leaves
    code, out, err = train_mlm(capsys, files, run, "--steps", "2", "--resume", "--keep-checkpoint")
    assert code == 0, err
    assert [line for line in out.splitlines() if "no checkpoint" in line] == [
        f"--resume: {run} holds no checkpoint.pt (the run stopped before its first one, or finished and removed it); "
        f"starting from step 0"]
    assert load_checkpoint(run / "checkpoint.pt")["step"] == 2


@pytest.mark.parametrize("flag, old, new", [
    ("--lr", "1e-3", "2e-3"), ("--weight-decay", "0.01", "0.1"), ("--warmup", "1", "2"),
    ("--max-grad-norm", "1.0", "0.5"), ("--mask-prob", "0.15", "0.2"), ("--whole-word-masking", None, None),
    ("--pair-objective", "none", "nsp"), ("--corpus", None, "edited in place"), ("--corpus", None, "another file"),
    ("--bf16", None, None), ("--vocab-size", "200", "150"), ("--layers", "1", "2"), ("--hidden", "16", "32"),
    ("--heads", "2", "4"), ("--intermediate", "32", "48"), ("--dropout", "0.1", "0.2"),
    ("--model-type", "bert", "albert"), ("--arch", "bert", "deberta")])
def test_a_resume_with_a_changed_flag_is_refused_naming_the_flag(tmp_path, capsys, flag, old, new):
    files = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    first = [flag, old] if old else []
    code, _, err = train_mlm(capsys, files, run, "--steps", "4", "--max-minutes", "1e-9", *first)  # stops at step 1
    assert code == 0, err
    if new == "edited in place":
        files[0].write_text(files[0].read_text() + "\nthe end .\n")
        again, changed = files, []
    elif new == "another file":
        other = tmp_path / "other.txt"
        other.write_text(files[0].read_text())
        again, changed = [other, files[1]], []
    else:
        again, changed = files, [flag, new] if new else [flag]
    code, _, err = train_mlm(capsys, again, run, "--steps", "4", "--resume", *changed)
    assert code == 1 and len(err) == 1, err
    assert f"was made with {flag} " in err[0] and f"this run has {flag} " in err[0], err
    assert len(err[0]) < 400 or flag == "--corpus", err      # the flag and its two values, not two configs
    assert load_checkpoint(run / "checkpoint.pt")["step"] == 1                # the checkpoint is kept, unchanged


def test_resume_uses_the_vocabulary_stored_in_the_checkpoint(tmp_path, capsys):
    files = write_corpus(tmp_path / "corpus")
    run = tmp_path / "run"
    code, _, err = train_mlm(capsys, files, run, "--steps", "4", "--max-minutes", "1e-9")   # stops after step 1
    assert code == 0, err
    state = load_checkpoint(run / "checkpoint.pt")
    assert state["step"] == 1
    write_vocab(tmp_path)                                     # another vocabulary
    code, _, err = train_mlm(capsys, files, run, "--steps", "4")
    assert code == 1 and len(err) == 1 and "pass --resume to continue it" in err[0], err
    code, _, err = train_mlm(capsys, files, run, "--steps", "4", "--resume", "--vocab", tmp_path / "vocab.txt")
    assert code == 1 and len(err) == 1 and "is not the vocabulary" in err[0], err
    (run / "vocab.txt").write_bytes((tmp_path / "vocab.txt").read_bytes())   # changed since the checkpoint
    code, _, err = train_mlm(capsys, files, run, "--steps", "4", "--resume", "--keep-checkpoint")
    assert code == 0, err
    state = load_checkpoint(run / "checkpoint.pt")
    assert state["step"] == 4
    saved = wordpiece_tokenizer(run / "vocab.txt")
    assert tokenizer_fingerprint(saved) == state["run_config"]["vocabulary_fingerprint"]
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]


def test_a_failed_run_never_touches_the_model_in_its_output_folder(tmp_path, capsys):
    files = write_corpus(tmp_path / "corpus")
    model = tmp_path / "model"
    save_tiny_model(model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    code, _, err = train_mlm(capsys, files, model, "--steps", "2")
    assert code == 1 and len(err) == 1 and "is not empty" in err[0] and "--force" in err[0], err
    # --force lets it in; this run fails after training its vocabulary and tokenizing the corpus.
    code, _, err = train_mlm(capsys, files, model, "--steps", "2", "--force", "--batch-size", "100000")
    assert code == 1 and len(err) == 1 and "fewer than one batch of 100000" in err[0], err
    assert {p.name: p.read_bytes() for p in model.iterdir() if p.name != "cache"} == before



def test_a_finished_run_removes_its_checkpoint_and_token_cache_and_a_stopped_one_keeps_them(corpus_and_tokenizer,
                                                                                            tmp_path):
    files, tokenizer = corpus_and_tokenizer
    run_pretrain(files, tokenizer, tmp_path / "done", steps=2, keep_checkpoint=False)
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]       # the model alone
    run_pretrain(files, tokenizer, tmp_path / "stopped", steps=4, max_minutes=0.0, keep_checkpoint=False)
    assert load_checkpoint(tmp_path / "stopped" / "checkpoint.pt")["step"] == 1      # kept, to --resume
    assert (tmp_path / "stopped" / "cache").is_dir()
    run_pretrain(files, tokenizer, tmp_path / "kept", steps=2, keep_checkpoint=True)
    assert {"checkpoint.pt", "cache"} <= {p.name for p in (tmp_path / "kept").iterdir()}


def test_a_run_of_0_steps_keeps_its_token_cache_and_a_cache_elsewhere_is_never_removed(corpus_and_tokenizer,
                                                                                       tmp_path):
    files, tokenizer = corpus_and_tokenizer
    run_pretrain(files, tokenizer, tmp_path / "prep", steps=0, keep_checkpoint=False)     # prepares only
    assert [p.name for p in (tmp_path / "prep" / "cache").iterdir()]
    run_pretrain(files, tokenizer, tmp_path / "run", steps=2, keep_checkpoint=False, cache_dir=tmp_path / "tokens")
    assert [p.name for p in (tmp_path / "tokens").iterdir()] and not (tmp_path / "run" / "cache").exists()


def test_held_out_evaluation_reports_percent_and_integer_counts(corpus_and_tokenizer, tmp_path):
    files, tokenizer = corpus_and_tokenizer
    heldout = write_corpus(tmp_path / "heldout", documents=30)          # at least one held-out batch of 64
    summary = run_pretrain(files, tokenizer, tmp_path / "run", steps=20, heldout=heldout, eval_every=10,
                           eval_batches=2)
    heldout = [h for h in summary["history"] if "heldout_masked_accuracy" in h]
    assert [h["step"] for h in heldout] == [10, 20]
    assert isinstance(summary["heldout"]["masked_tokens"], int) and summary["heldout"]["masked_tokens"] > 0
    assert 1.0 < summary["heldout"]["masked_accuracy"] <= 100.0                   # percent, not a fraction
    trained = [h for h in summary["history"] if "mlm_accuracy" in h]
    assert trained[-1]["mlm_accuracy"] > 1.0                                      # percent too


def test_train_mlm_prints_one_vocabulary_line_and_percent_and_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib (pip install -e '.[plot]')")
    files = write_corpus(tmp_path / "corpus")
    write_corpus(tmp_path / "heldout", documents=30)
    code, out, err = train_mlm(capsys, files, tmp_path / "run", "--steps", "2", "--heldout-corpus",
                               tmp_path / "heldout", "--eval-every", "1", "--eval-batches", "1",
                               "--plot", tmp_path / "curves.png")
    assert code == 0, err
    lines = out.splitlines()
    assert "" not in lines[:3]                                 # no blank lines left by the vocabulary trainer
    assert lines[0].startswith("training a ") and lines[1].startswith("vocabulary: ")
    assert any(line.startswith("held-out masked-token accuracy ") and "%" in line for line in lines)
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_train_mlm_without_matplotlib_refuses_plot_before_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # as if it were not installed
    files = write_corpus(tmp_path / "corpus")
    code, out, err = train_mlm(capsys, files, tmp_path / "run", "--plot", tmp_path / "curves.png")
    assert code == 1 and len(err) == 1 and "matplotlib" in err[0] and "pip install" in err[0], err
    assert not (tmp_path / "run").exists() and "vocabulary" not in out   # nothing was trained


# ----------------------------------------------------------------------------
# Exercise of assignment 2 (docs/coursework.md)
# ----------------------------------------------------------------------------


class FixedLogitsModel:
    """Stands in for BertModel: returns fixed MLM logits (all positions, or
    those in `mlm_positions`) and records how it was called."""

    def __init__(self, logits):
        self.logits, self.calls = logits, []

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, mlm_positions=None):
        self.calls.append((input_ids, attention_mask, token_type_ids))
        logits = self.logits if mlm_positions is None else self.logits[mlm_positions]
        return types.SimpleNamespace(selected_mlm_logits=logits)


def test_exercise_mlm_loss():
    # B = 1, T = 3, V = 3; positions 0 and 2 were chosen, position 1 was not (label -100).
    logits = torch.tensor([[[2.0, 0.0, 0.0], [9.0, 9.0, 9.0], [0.0, 1.0, 3.0]]])
    batch = {"input_ids": torch.tensor([[4, 5, 4]]), "attention_mask": torch.ones(1, 3, dtype=torch.long),
             "token_type_ids": torch.zeros(1, 3, dtype=torch.long), "mlm_labels": torch.tensor([[0, -100, 1]])}
    model = FixedLogitsModel(logits)
    (loss, correct), output = masked_lm_loss(model, batch)
    # position 0, label 0: -log(e^2 / (e^2 + 2)); position 2, label 1: -log(e / (1 + e + e^3))
    e = math.e
    expected = -math.log(e ** 2 / (e ** 2 + 2)) - math.log(e / (1 + e + e ** 3))
    assert loss.item() == pytest.approx(expected, rel=1e-6)            # a sum over the chosen positions, not a mean
    assert int(correct) == 1                                          # argmax right at position 0 only
    assert output.selected_mlm_logits is not None and len(model.calls) == 1
    assert torch.equal(model.calls[0][0], batch["input_ids"]) and torch.equal(model.calls[0][1], batch["attention_mask"])


def test_exercise_mlm_loss_is_computed_in_float32_when_the_model_runs_in_bf16():
    # A model under bf16 returns bf16 logits; a bf16 softmax keeps 8 bits of mantissa, so the loss of
    # 64 positions computed in bf16 is off by about 1%. The loss must be float32's, from the same logits.
    logits = torch.randn(1, 64, 50, generator=torch.Generator().manual_seed(0)).mul(4).to(torch.bfloat16)
    labels = torch.randint(0, 50, (1, 64), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": torch.zeros(1, 64, dtype=torch.long), "attention_mask": torch.ones(1, 64, dtype=torch.long),
             "token_type_ids": torch.zeros(1, 64, dtype=torch.long), "mlm_labels": labels}
    (loss, correct), _ = masked_lm_loss(FixedLogitsModel(logits), batch)
    expected = -logits[0].double().log_softmax(-1)[torch.arange(64), labels[0]].sum()
    assert loss.dtype == torch.float32, f"the loss is {loss.dtype}; compute it in float32"
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert int(correct) == int((logits[0].float().argmax(-1) == labels[0]).sum())


def test_a_prepared_token_cache_as_corpus_trains_with_its_vocab_and_without_one_is_one_line(tmp_path, capsys):
    files = write_corpus(tmp_path / "corpus")
    code, _, err = train_mlm(capsys, files, tmp_path / "prep", "--steps", "0")            # prepares only
    assert code == 0, err
    (cache,) = (tmp_path / "prep" / "cache").iterdir()
    (tmp_path / "prep" / "vocab.txt").rename(tmp_path / "vocab.txt")
    code, _, err = train_mlm(capsys, [cache], tmp_path / "run", "--steps", "2", "--max-minutes", "1e-9",
                             "--vocab", tmp_path / "vocab.txt")
    assert code == 0, err
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["step"] == 1 and state["run_config"]["flags"]["--corpus"][0].startswith(f"{cache} (a folder of 4 ")
    code, _, err = train_mlm(capsys, [cache], tmp_path / "run", "--steps", "2", "--resume",
                             "--vocab", tmp_path / "vocab.txt")
    assert code == 0, err
    code, _, err = train_mlm(capsys, [cache], tmp_path / "other", "--steps", "2")
    assert code == 1 and err == [f"error: --corpus {cache}: a prepared token cache holds token ids, not text; "
                                 f"give --vocab, the vocab.txt it was made with"]


def test_a_finished_run_removes_its_token_cache_before_its_checkpoint_so_a_kill_between_stays_resumable(
        corpus_and_tokenizer, tmp_path, monkeypatch):
    from minibert.commands import train_mlm as train_mlm_command
    files, tokenizer = corpus_and_tokenizer

    def killed(*args, **kwargs):                          # the run dies as it starts removing the cache
        raise KeyboardInterrupt
    monkeypatch.setattr(train_mlm_command.shutil, "rmtree", killed)
    with pytest.raises(KeyboardInterrupt):
        run_pretrain(files, tokenizer, tmp_path / "run", steps=2, keep_checkpoint=False)
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == 2     # still there: --resume finishes
    run_pretrain(files, tokenizer, tmp_path / "run", steps=2, keep_checkpoint=False, resume=True)
    assert not (tmp_path / "run" / "checkpoint.pt").exists() and not (tmp_path / "run" / "cache").exists()
