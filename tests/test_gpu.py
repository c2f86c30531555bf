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


def test_fused_kernels_match_reference_ops_in_bf16():
    from sparkdec.ops import triton_fused as tf
    from sparkdec.ops.norms import rms_norm
    from sparkdec.ops.rope import RotaryTable

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    x, r, w = (torch.randn(37, 2560, device=dev, dtype=dt) for _ in range(2)), None, torch.randn(2560, device=dev, dtype=dt)
    x, r = x
    close = lambda a, b: torch.allclose(a.float(), b.float(), rtol=2e-2, atol=2e-2)
    assert close(tf.rms_norm(x, w, 1e-6), rms_norm(x, w, 1e-6))
    out, h = tf.rms_norm(x, w, 1e-6, residual=r)
    assert torch.equal(h, x + r) and close(out, rms_norm(x + r, w, 1e-6))
    rope = RotaryTable(128, 1e6, 4096, dev)
    q, wq, pos = torch.randn(37, 32, 128, device=dev, dtype=dt), torch.randn(128, device=dev, dtype=dt), torch.randint(0, 4096, (37,), device=dev)
    assert close(tf.head_norm_rope(q, wq, 1e-6, rope.cos, rope.sin, pos), rope.apply(rms_norm(q, wq, 1e-6), pos))
    gu = torch.randn(37, 2 * 9728, device=dev, dtype=dt)
    assert close(tf.silu_mul(gu), torch.nn.functional.silu(gu[:, :9728]) * gu[:, 9728:])
