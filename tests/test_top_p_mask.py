"""Top-p's drop mask without a scan or a scatter (sampling.after_first_past) against its reference (suffix_drop)."""
import torch

from sparkdec.sampling import _top_p_drop, after_first_past, suffix_drop


def _masks(probs: torch.Tensor, past_sorted: torch.Tensor):
    sorted_p, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    return after_first_past(past_sorted, sorted_p, idx, probs), suffix_drop(past_sorted, idx)


def test_mask_equals_the_scan_and_scatter_reference_with_ties_and_rows_without_a_cut():
    gen = torch.Generator().manual_seed(0)
    # few distinct values: long runs of ties in the sort, cut inside a run; one row never reaches top_p
    probs = torch.randint(1, 5, (6, 300), generator=gen).float()
    probs = probs / probs.sum(-1, keepdim=True)
    for top_p in (0.3, 0.5, 0.77, 0.99):
        sorted_p = torch.sort(probs, dim=-1, descending=True, stable=True).values
        past = ((torch.cumsum(sorted_p, -1) - sorted_p) >= top_p).to(torch.uint8)
        past[0] = 0  # a row with nothing past top_p: nothing dropped
        fast, ref = _masks(probs, past)
        assert torch.equal(fast, ref), top_p
        assert not fast[0].any() and fast[1:].any()


def test_top_p_drop_keeps_the_most_probable_prefix_on_cpu():
    gen = torch.Generator().manual_seed(1)
    probs = torch.softmax(torch.randn(4, 1000, generator=gen) * 3, -1)
    drop = _top_p_drop(probs, 0.9)
    for r in range(4):
        kept = probs[r][~drop[r]]
        assert kept.sum() >= 0.9 - 1e-6 and kept.sum() - kept.min() < 0.9
        assert kept.min() >= probs[r][drop[r]].max()
