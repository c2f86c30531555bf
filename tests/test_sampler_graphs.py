"""engine/sampler_graphs.py's bookkeeping on the CPU, its graphs replaced by eager closures over the same static
buffers (the captured race against the eager one on CUDA: tests/test_gpu.py test_sampler_graphs_replay_the_eager_race)."""
import functools

import pytest
import torch

from sparkdec import sampling
from sparkdec.engine import sampler_graphs
from sparkdec.engine.sampler_graphs import Captured, SamplerGraphs, row_offset
from sparkdec.sampling import SamplingParams
from sparkdec.staging import copy_into


class EagerGraphs(SamplerGraphs):
    """SamplerGraphs on the CPU whose 'graph' races all of whole's rows, keyed on the static keys, by the torch race."""

    @staticmethod
    def replays(whole):
        return True

    def _capture(self, whole, params):
        keys = torch.zeros(whole.shape[0], dtype=torch.int64)
        tokens = torch.zeros_like(keys)

        class Replay:
            def replay(self):
                tokens.copy_(sampling._race_rows(whole, params, keys.tolist()))

        return Captured(Replay(), keys, tokens, None)


def test_forms_are_captured_on_their_second_use_and_replay_each_calls_rows_and_keys():
    graphs, p = EagerGraphs(), SamplingParams(temperature=0.8, top_p=0.9)
    whole = torch.randn(4, 50) * 3  # a graph's static output: rewritten in place each step
    got = []
    for step, (lo, n) in enumerate([(0, 4), (0, 2), (1, 3), (2, 1), (0, 1)]):
        whole.copy_(torch.randn(4, 50) * 3)
        rows, keys = whole[lo:lo + n], [step * 10 + r for r in range(n)]
        drawn = graphs.race(rows, p, keys, whole)
        assert (drawn is None) == (step == 0)  # (the first use is the caller's eager race)
        if drawn is not None:
            got.append((drawn, sampling._race_rows(rows, p, keys)))
    assert graphs.captures == 1  # one form: the whole tensor and the filter, whichever rows are live
    assert all(torch.equal(a, b) for a, b in got)  # (each step's tokens survive the later replays: fresh tensors)


def test_other_tensors_and_filters_are_other_forms_and_captures_stop_at_their_cap(monkeypatch):
    graphs, whole = EagerGraphs(), torch.randn(3, 30)
    other = torch.randn(3, 30)
    monkeypatch.setattr(sampler_graphs, "MAX_CAPTURES", 3)
    for w, p in [(whole, SamplingParams(temperature=0.8)), (other, SamplingParams(temperature=0.8)),
                 (whole, SamplingParams(temperature=0.8, top_k=5)), (whole, SamplingParams(temperature=0.5))]:
        for _ in range(2):
            graphs.race(w[:2], p, [1, 2], w)
    assert graphs.captures == 3 and len(graphs.graphs) == 3
    assert graphs.race(whole[:2], SamplingParams(temperature=0.5), [1, 2], whole) is None  # past the cap: eager


def test_the_least_recently_used_form_goes_past_max_graphs(monkeypatch):
    monkeypatch.setattr(sampler_graphs, "MAX_GRAPHS", 2)
    graphs, x = EagerGraphs(), torch.randn(4, 30)
    forms = [SamplingParams(temperature=t) for t in (0.5, 0.7, 0.9)]
    for p in forms[:2] + forms[:1] + forms[2:]:  # 0.5 used last but one: 0.7 goes
        for _ in range(2):
            graphs.race(x, p, [1, 2, 3, 4], x)
    assert [f.temperature for f in graphs.graphs] == [0.5, 0.9]


@pytest.mark.parametrize("view, offset", [(lambda w: w[2:5], 2), (lambda w: w, 0), (lambda w: w[5:], 5),
                                          (lambda w: w[1:3, :20], None), (lambda w: w[::2], None),
                                          (lambda w: w.clone()[:2], None), (lambda w: w.t(), None)])
def test_row_offset_finds_views_of_whole_rows_only(view, offset):
    whole = torch.randn(6, 24)
    assert row_offset(view(whole), whole) == offset


def test_draw_tokens_takes_the_graph_race_only_for_one_filter_and_gives_the_eager_tokens():
    graphs, whole = EagerGraphs(), torch.randn(4, 40) * 3
    race = functools.partial(graphs.race, whole=whole)
    one = [(SamplingParams(temperature=0.9, top_p=0.8), 5, 7 + r) for r in range(3)]
    mixed = one[:2] + [(SamplingParams(), 0, 0)]
    two = one[:2] + [(SamplingParams(temperature=0.6), 5, 9)]
    for draws in (one, one, mixed, two, one):
        assert torch.equal(sampling.draw_tokens(whole[:3], draws, race), sampling.draw_tokens(whole[:3], draws))
    assert graphs.captures == 1 and not graphs.seen  # only the one-filter batch counted, captured on its second use


def test_copy_into_writes_a_prefix():
    dst = torch.zeros(5, dtype=torch.int64)
    copy_into(dst, [3, 1, 4])
    assert dst.tolist() == [3, 1, 4, 0, 0]
