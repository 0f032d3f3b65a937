"""minibert/pretraining_data.py: what BERT's pretraining data is made of
([BERT] 3.1, A.1): 15% of the real tokens chosen per sequence
(whole words when asked), and of those 80% replaced by [MASK], 10% by a random
token and 10% left as they are.
"""

import pytest
import torch

from minibert.pretraining_data import corrupt_chosen, mask_tokens, normal_ids, split_sentences


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
