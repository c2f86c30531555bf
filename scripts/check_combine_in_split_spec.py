"""Device check (session 12): speculative greedy with COMBINE_IN_SPLIT against plain greedy, eager and graphed; counts the
split-kernel launches of one row (the fused path) and whether each ran under graph capture."""
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, "tests")
import sparkdec.ops.triton_attention as ta
from helpers import GEOMETRIES, make_bigram_draft, make_target
from sparkdec import LLM, SamplingParams

calls = []
orig = ta._attend


def spy(q, *a, **k):
    if q.shape[0] == 1:
        calls.append(torch.cuda.is_current_stream_capturing())
    return orig(q, *a, **k)


ta._attend = spy
root = pathlib.Path(tempfile.mkdtemp())
tgt = make_target(root / "t", **GEOMETRIES["untied_gqa4_odd_vocab"])
prompts = [[1, 5, 9, 33, 2, 7, 100, 4], [3, 4, 5]]
greedy = SamplingParams(max_tokens=128, ignore_eos=True)
ta.COMBINE_IN_SPLIT = False
ref = [LLM(model=str(tgt), device="cuda", dtype="bfloat16").generate([p], greedy)[0].token_ids for p in prompts]
draft = make_bigram_draft(root / "d", tgt, [p + r for p, r in zip(prompts, ref)])
for graphs in (False, True):
    for flag in (False, True):
        ta.COMBINE_IN_SPLIT = flag
        calls.clear()
        spec = LLM(model=str(tgt), draft=str(draft), device="cuda", dtype="bfloat16", cuda_graphs=graphs)
        outs = [spec.generate([p], greedy)[0].token_ids for p in prompts]
        first = [next((i for i, (a, b) in enumerate(zip(o, r)) if a != b), None) for o, r in zip(outs, ref)]
        print(f"spec graphs {graphs} combine_in_split {flag}: first differing token per prompt {first}; one-row split "
              f"launches {len(calls)} ({sum(calls)} under capture)")
        del spec
