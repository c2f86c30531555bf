# NOT YET RUN on a device (written in session 8; docs/research/megakernel-gluon.md, step 0). usage (device tool):
#   cd scripts/gluon_probe && PYTHONPATH=$PWD/../..:$PWD python probe.py   (writes $OUT/gluon_probe.json)
# Gluon probe on the H200: bits of a swap-AB wgmma GEMV vs sparkdec's Triton gemm, row-count independence of gl.sum,
# GEMV timing, PDL launch of a Gluon kernel.
import os, sys, json
sys.path.insert(0, os.getcwd())
import torch, triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from gemv import gemv, gemv_kernel, make_gemv
from sparkdec.ops import triton_gemm as tg

res = {"triton": triton.__version__, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
torch.manual_seed(0)
dev, dt = "cuda", torch.bfloat16

# 1. bits vs the Triton gemm (split-K forced to 1 so both reduce K in one pass of 16-wide steps)
bits = []
for n, k in [(6144, 2560), (19456, 2560), (2560, 4096), (2560, 9728), (509, 256)]:
    w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
    x = torch.randn(8, k, device=dev, dtype=dt)
    saved = dict(tg.CONFIGS)
    tg.CONFIGS[(n, k)] = (32, 128, 1, 4, 4)
    ref = tg.gemm(x, w); ref1 = tg.gemm(x[:1], w)
    tg.CONFIGS.clear(); tg.CONFIGS.update(saved)
    g8 = gemv(x, w); g1 = gemv(x[:1], w)
    bits.append(dict(n=n, k=k, diff_g8_vs_triton=int((g8 != ref).sum()), diff_g1_vs_g8=int((g1 != g8[:1]).sum()),
                     diff_triton1_vs_triton8=int((ref1 != ref[:1]).sum()),
                     maxabs=float((g8.float() - ref.float()).abs().max())))
res["bits"] = bits

# 2. gl.sum over K with a K-only layout: 1 row vs 8 rows
@gluon.jit
def rowsum_kernel(x_ptr, out_ptr, K: gl.constexpr, ROWS: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [1, 4], [1, 0])
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
    c = gl.arange(0, K, layout=gl.SliceLayout(0, L))
    v = gl.load(x_ptr + r[:, None] * K + c[None, :]).to(gl.float32)
    s = gl.sum(v * v, axis=1)
    gl.store(out_ptr + r, s)

xs = torch.randn(8, 2048, device=dev, dtype=dt)
o8 = torch.empty(8, device=dev); o1 = torch.empty(8, device=dev)
rowsum_kernel[(1,)](xs, o8, 2048, 8, num_warps=4)
for i in range(8):
    rowsum_kernel[(1,)](xs[i:i + 1], o1[i:], 2048, 1, num_warps=4)
res["rowsum_1_vs_8_diff"] = int((o1 != o8).sum())
res["rowsum_vs_torch_maxrel"] = float(((o8 - (xs.float() ** 2).sum(1)).abs() / o8.abs()).max())

# 3. timing, one row (CUDA graph replay); bytes = weights
tim = []
for n, k in [(6144, 2560), (19456, 2560), (2560, 4096), (2560, 9728)]:
    w = torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5
    x = torch.randn(1, k, device=dev, dtype=dt)
    row = dict(n=n, k=k, cfg=list(tg.pick_config(n, k)))
    o = torch.empty(1, n, device=dev, dtype=dt)
    for name, fn in [("triton_gemm", lambda: tg.gemm(x, w, out=o)), ("gluon_gemv_s4", make_gemv(x, w, STAGES=4)),
                     ("gluon_gemv_s6_bk64", make_gemv(x, w, BK=64, STAGES=6)),
                     ("gluon_gemv_bn128_s3", make_gemv(x, w, BN=128, STAGES=3))]:
        try:
            fn(); torch.cuda.synchronize()
            us = triton.testing.do_bench_cudagraph(fn, rep=200) * 1e3
            row[name + "_us"] = round(us, 2); row[name + "_TBps"] = round(n * k * 2 / us / 1e6, 2)
        except Exception as e:
            row[name + "_err"] = repr(e)[:300]
    tim.append(row)
res["timing"] = tim

# 4. PDL launch of a Gluon kernel
try:
    from triton.language.extra.cuda import gdc_wait, gdc_launch_dependents
    @gluon.jit
    def pdl_copy(x_ptr, y_ptr, N: gl.constexpr):
        L: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
        o = gl.arange(0, N, layout=L)
        gdc_wait()
        v = gl.load(x_ptr + o)
        gdc_launch_dependents()
        gl.store(y_ptr + o, v + 1)
    a = torch.zeros(128, device=dev); b = torch.empty_like(a)
    pdl_copy[(1,)](a, b, 128, num_warps=4, launch_pdl=True); pdl_copy[(1,)](b, a, 128, num_warps=4, launch_pdl=True)
    torch.cuda.synchronize(); res["pdl_ok"] = bool((a == 2).all())
except Exception as e:
    res["pdl_err"] = repr(e)[:300]

print(json.dumps(res, indent=1))
out = os.environ.get("OUT")
if out:
    open(os.path.join(out, "gluon_probe.json"), "w").write(json.dumps(res, indent=1))
