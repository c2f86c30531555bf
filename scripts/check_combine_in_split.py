"""Device check (session 12): a lone row through the split kernel with and without COMBINE_IN_SPLIT: equal bits, repeatable, counters left 0."""
import torch, sys
from sparkdec.engine.context import build_context
import sparkdec.ops.triton_attention as ta
from sparkdec.ops.triton_attention import triton_paged_attention
torch.manual_seed(0)
for (hq, hkv, d), L in [(g, L) for g in ((32, 8, 128), (8, 2, 24)) for L in (5, 64, 300, 1024, 2101, 8192)]:
    ps = 16
    kc = torch.randn(600 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    vc = torch.randn(600 * ps, hkv, d, device="cuda", dtype=torch.bfloat16)
    ctx = build_context([(list(range(0, 600)), [L - 1], False)], ps, "cuda")
    q = torch.randn(1, hq, d, device="cuda", dtype=torch.bfloat16)
    args = (q, kc, vc, ctx.block_tables, ctx.row_seq, ctx.row_kv_len, ps, 8192, d ** -0.5)
    ta.COMBINE_IN_SPLIT = False
    a = triton_paged_attention(*args)
    ta.COMBINE_IN_SPLIT = True
    outs = [triton_paged_attention(*args) for _ in range(20)]
    torch.cuda.synchronize()
    cnt = [int(c.abs().sum()) for c in ta._COUNTERS.values()]
    print((hq, hkv, d), L, "equal", torch.equal(outs[0], a), "maxdiff", (outs[0].float() - a.float()).abs().max().item(),
          "repeat-equal", all(torch.equal(o, outs[0]) for o in outs), "counters", cnt, "heads differing",
          (outs[0] != a).any(-1).sum().item())

# the engine: one prompt (decode rows alone take the fused path), eager and graphed, against the combine kernel
import tempfile, pathlib
sys.path.insert(0, "tests")
from helpers import GEOMETRIES, make_target
from sparkdec import LLM, SamplingParams
tgt = make_target(pathlib.Path(tempfile.mkdtemp()) / "t", **GEOMETRIES["untied_gqa4_odd_vocab"])
prompt = [1, 5, 9, 33, 2, 7, 100, 4]
res = {}
for graphs in (False, True):
    for flag in (False, True):
        ta.COMBINE_IN_SPLIT = flag
        llm = LLM(model=str(tgt), device="cuda", dtype="bfloat16", cuda_graphs=graphs)
        res[(graphs, flag)] = llm.generate([prompt], SamplingParams(max_tokens=64, ignore_eos=True))[0].token_ids
        del llm
ref = res[(False, False)]
for key, toks in res.items():
    first = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), None)
    print("graphs %s combine_in_split %s: first differing token %s" % (key[0], key[1], first))
