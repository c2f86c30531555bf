"""engine/sampler_graphs.py's bookkeeping on the CPU, its graphs replaced by eager closures (the captured race against
the eager one on CUDA: tests/test_gpu.py test_sampler_graphs_replay_the_eager_race)."""
import torch

from sparkdec import sampling
from sparkdec.engine import sampler_graphs
from sparkdec.engine.sampler_graphs import SamplerGraphs
from sparkdec.sampling import SamplingParams
from sparkdec.staging import copy_into


class EagerGraphs(SamplerGraphs):
    """SamplerGraphs whose 'graph' replays the torch race over the captured logits and static keys."""

    def _capture(self, logits, params):
        keys = torch.zeros(logits.shape[0], dtype=torch.int64)
        tokens = torch.zeros_like(keys)

        class Replay:
            def replay(self):
                tokens.copy_(sampling._race_rows(logits, params, keys.tolist()))

        self.captures += 1
        return Replay(), keys, tokens, None


def test_forms_are_captured_on_their_second_use_and_replay_with_each_calls_keys(monkeypatch):
    monkeypatch.setattr(sampler_graphs, "kernel_race", sampling._race_rows)
    graphs, p = EagerGraphs(), SamplingParams(temperature=0.8, top_p=0.9)
    x = torch.randn(3, 50) * 3  # a graph's static output: rewritten in place each step
    got = []
    for step in range(4):
        x.copy_(torch.randn(3, 50) * 3)
        keys = [step * 10 + r for r in range(3)]
        got.append((graphs.race(x, p, keys), sampling._race_rows(x, p, keys)))
        assert graphs.captures == (0 if step == 0 else 1)
    assert all(torch.equal(a, b) for a, b in got)  # (each step's tokens survive the later replays: fresh tensors)
    graphs.race(x[:2], p, [1, 2])  # another shape, another filter: other forms
    graphs.race(x, SamplingParams(temperature=0.8, top_k=5), [1, 2, 3])
    assert graphs.captures == 1 and len(graphs.seen) == 2


def test_the_least_recently_used_form_goes_past_max_graphs(monkeypatch):
    monkeypatch.setattr(sampler_graphs, "kernel_race", sampling._race_rows)
    monkeypatch.setattr(sampler_graphs, "MAX_GRAPHS", 2)
    graphs, x = EagerGraphs(), torch.randn(4, 30)
    forms = [SamplingParams(temperature=t) for t in (0.5, 0.7, 0.9)]
    for p in forms[:2] + forms[:1] + forms[2:]:  # 0.5 used last but one: 0.7 goes
        for _ in range(2):
            graphs.race(x, p, [1, 2, 3, 4])
    assert [f[4] for f in graphs.graphs] == [0.5, 0.9]


def test_draw_tokens_races_through_graphs_only_where_they_take_the_logits(monkeypatch):
    """On the CPU takes() is False: draw_tokens' eager race, the same tokens as without graphs."""
    graphs, x = SamplerGraphs(), torch.randn(2, 40)
    draws = [(SamplingParams(temperature=0.9), 5, 7 + r) for r in range(2)]
    assert not graphs.takes(x)
    assert torch.equal(sampling.draw_tokens(x, draws, graphs), sampling.draw_tokens(x, draws))
    assert graphs.captures == 0 and not graphs.seen


def test_copy_into_writes_a_prefix():
    dst = torch.zeros(5, dtype=torch.int64)
    copy_into(dst, [3, 1, 4])
    assert dst.tolist() == [3, 1, 4, 0, 0]
