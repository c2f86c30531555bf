"""Device-only checks (pytest -m gpu): CUDA graphs equal eager, and bf16 speculative greedy equals plain greedy."""
from __future__ import annotations

import pytest
import torch

from helpers import GEOMETRIES, make_bigram_draft, make_target
from sparkdec import LLM, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
PROMPTS = [[1, 5, 9, 33, 2, 7, 100, 4], [3, 4, 5], [7] * 20, list(range(40, 75))]
GREEDY = SamplingParams(max_tokens=256, ignore_eos=True)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    return make_target(tmp_path_factory.mktemp("gpu") / "t", **GEOMETRIES["untied_gqa4_odd_vocab"])


def test_graph_replay_equals_eager(target):
    graphed = LLM(model=str(target), device="cuda", dtype="bfloat16").generate(PROMPTS, GREEDY)
    eager = LLM(model=str(target), device="cuda", dtype="bfloat16", cuda_graphs=False).generate(PROMPTS, GREEDY)
    assert [o.token_ids for o in graphed] == [o.token_ids for o in eager]


def test_bf16_speculative_greedy_is_bit_identical(target, tmp_path):
    plain = LLM(model=str(target), device="cuda", dtype="bfloat16")
    ref = [plain.generate([p], GREEDY)[0] for p in PROMPTS]
    draft = make_bigram_draft(tmp_path / "d", target, [p + o.token_ids for p, o in zip(PROMPTS, ref)])
    spec = LLM(model=str(target), draft=str(draft), device="cuda", dtype="bfloat16")
    outs = [spec.generate([p], GREEDY)[0] for p in PROMPTS]
    diff = sum(a != b for o, r in zip(outs, ref) for a, b in zip(o.token_ids, r.token_ids))
    assert diff == 0
    assert sum(o.stats["mean_acceptance_length"] for o in outs) / len(outs) >= 2.0
