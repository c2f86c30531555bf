"""Device probe (staged in session 35): a product whose weights go to registers, not shared memory. Each [64, 128]
weight tile is stored in wgmma's A-fragment order, loaded 16 bytes a thread at a time, and fed to a swap-AB wgmma with
A in registers; four tiles are in flight per program, the first four requested before the PDL wait. It asks the two
questions of docs/research/megakernel-gluon.md (session 35): does A from registers give the shared-memory form's bits
(the shipped Gluon product's), and how fast does such a product stream. Session 36 ran it
(register_fed_probe_h200_2026-12-02_session36.json): the same bits for all four 4B products at 1, 8 and 16 rows; in a
chain of launches o 6.09 -> 5.56 us, qkv, gate_up and down slower. In the engine (commit 2bf1fb7: the weight stored so
by tiled_weights, the Triton kernel reading such tiles) o register-fed kept the tokens but decoded 2.7% slower
(regfed_o_ab_h200_2026-12-02_session36.json), and was removed.

usage: python scripts/register_fed_probe.py OUT.json        (on the H200)
       python scripts/register_fed_probe.py --compile-only  (any machine: compiles for sm_90, checks the loads)
"""
from __future__ import annotations

import json
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from sparkdec.ops import gluon_gemv as gg
from sweep_gemm import graph_time  # us per launch of fn(i) over weight copies, in one graph

BN, BK, RT = 64, 128, 4  # tile rows, tile K, tiles in flight per program
# the A fragment of wgmma m64nMPk16 (bf16, k_width 2) on a [64, 128] tile, from Gluon 3.6's to_linear_layout of
# DotOperandLayout(0, NVMMA v3 [16, MP, 16], 2): the (row, k) each register, lane and warp bit adds (XOR)
REG_BASES = [(0, 1), (8, 0), (0, 8), (0, 16), (0, 32), (0, 64)]
LANE_BASES = [(0, 2), (0, 4), (1, 0), (2, 0), (4, 0)]
WARP_BASES = [(16, 0), (32, 0)]


def fragment_source() -> torch.Tensor:
    """[8192]: the tile element (row * 128 + k) stored at position (c * 128 + t) * 8 + e, which is register 8c + e of
    thread t (lane t % 32, warp t // 32): a warp's load of chunk c reads 512 contiguous bytes."""
    src = torch.empty(8192, dtype=torch.long)
    for c in range(8):
        for t in range(128):
            for e in range(8):
                row = k = 0
                bits = [(8 * c + e, REG_BASES), (t % 32, LANE_BASES), (t // 32, WARP_BASES)]
                for value, bases in bits:
                    for b, (r, kk) in enumerate(bases):
                        if value >> b & 1:
                            row, k = row ^ r, k ^ kk
                src[(c * 128 + t) * 8 + e] = row * BK + k
    assert torch.equal(src.sort().values, torch.arange(8192)), "the fragment bases must cover the tile once"
    return src


def fragment_order(w: torch.Tensor) -> torch.Tensor:
    """W [N, K] -> its tiles in fragment order, a program's (row tile's) K tiles one after another: [N * K]."""
    n, k = w.shape
    tiles = w.reshape(n // BN, BN, k // BK, BK).permute(0, 2, 1, 3).reshape(n // BN, k // BK, BN * BK)
    return tiles[:, :, fragment_source().to(w.device)].reshape(-1).contiguous()


@gluon.jit
def _frag_tile(w_ptr, tile):
    """Tile `tile` (8192 elements in fragment order) -> the A operand [64, 128] in registers, no data movement."""
    vl: gl.constexpr = gl.BlockedLayout([8, 1, 8], [1, 32, 1], [1, 4, 1], [2, 1, 0])
    c = gl.arange(0, 8, layout=gl.SliceLayout(1, gl.SliceLayout(2, vl)))
    t = gl.arange(0, 128, layout=gl.SliceLayout(0, gl.SliceLayout(2, vl)))
    e = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(1, vl)))
    v = gl.load(w_ptr + tile * 8192 + c[:, None, None] * 1024 + t[None, :, None] * 8 + e[None, None, :])
    # [c, t, e] -> [row, k]: the bit permutation that REG/LANE/WARP_BASES describe (c: k 16-64; t: k 2-4, rows
    # 1-4 and 16-32; e: k 1, row 8, k 8)
    v = gl.reshape(v, [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])  # c2 c1 c0 t6 .. t0 e2 e1 e0
    v = gl.permute(v, [3, 4, 11, 5, 6, 7, 0, 1, 2, 10, 8, 9, 12])  # row5 .. row0, k6 .. k0
    return gl.reshape(v, [64, 128])


@gluon.jit
def _reg_gemv_kernel(w_ptr, x_ptr, out_ptr, ws_ptr, M, N, stride_xm, stride_om, K: gl.constexpr, MP: gl.constexpr,
                     SPLIT_K: gl.constexpr, PDL: gl.constexpr, num_warps: gl.constexpr):
    NK: gl.constexpr = K // SPLIT_K // 128  # this program's tiles (at least four)
    gl.static_assert(NK >= 4)
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                    instr_shape=[16, MP, 16])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_l, k_width=2)
    pid = gl.program_id(0)
    pid_s = gl.program_id(1)
    first = pid * (K // 128) + pid_s * NK  # a row tile's K tiles are stored one after another
    a0 = _frag_tile(w_ptr, first)  # the first four tiles: requested before the wait (they never depend on it)
    a1 = _frag_tile(w_ptr, first + 1)
    a2 = _frag_tile(w_ptr, first + 2)
    a3 = _frag_tile(w_ptr, first + 3)
    if PDL:
        gdc_wait()
        gdc_launch_dependents()
    xs_l: gl.constexpr = gl.NVMMASharedLayout.get_default_for([MP, 128], gl.bfloat16)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [NK, MP, 128], xs_l)
    gg._load_x_slice(x_ptr, x_smem, M, stride_xm, pid_s * (K // SPLIT_K), NK, MP, 128, num_warps)
    acc = gl.zeros([64, MP], gl.float32, layout=acc_l)
    for i in gl.static_range(NK):  # K order, one tile a step (the shipped product's order)
        acc = warpgroup_mma(gl.convert_layout(a0, a_l, assert_trivial=True), x_smem.index(i).permute((1, 0)), acc)
        a0, a1, a2 = a1, a2, a3  # the tiles in flight move up a slot (unrolled: register renaming, no moves)
        if i + 4 < NK:  # the tile four steps ahead
            a3 = _frag_tile(w_ptr, first + i + 4)
    el: gl.constexpr = gl.BlockedLayout([2, 1], [4, 8], [num_warps, 1], [1, 0])
    y = gl.convert_layout(acc, el)  # [64, MP]
    if SPLIT_K == 1:
        gg._epilogue(y, out_ptr, out_ptr, M, N, pid, stride_om, stride_om, False, False, 64, MP, el,
                     x_ptr.dtype.element_ty)
    else:  # the slice's fp32 tile, stored as the shipped product's defer workspace [SPLIT_K, tiles, MP, BN]
        part = (gl.arange(0, 64, layout=gl.SliceLayout(1, el))[:, None]
                + gl.arange(0, MP, layout=gl.SliceLayout(0, el))[None, :] * 64)
        gl.store(ws_ptr + (pid_s * gl.num_programs(0) + pid) * (64 * MP) + part, y)


def reg_gemv(x: torch.Tensor, w_frag: torch.Tensor, out: torch.Tensor, split_k: int = 1, pdl: int = 0) -> torch.Tensor:
    """The register-fed product into out [M, N] (split_k 1), or its slices' fp32 workspace (split_k > 1)."""
    m, k = x.shape
    n = out.shape[1]
    mp = gg.row_pad(m)
    ws = out if split_k == 1 else torch.empty(split_k * (n // BN) * BN * mp, dtype=torch.float32, device=x.device)
    extra = {"launch_pdl": True} if pdl else {}
    _reg_gemv_kernel[(n // BN, split_k)](w_frag, x, out, ws, m, n, x.stride(0), out.stride(0), K=k, MP=mp,
                                         SPLIT_K=split_k, PDL=pdl, num_warps=4, **extra)
    return ws


def compile_only() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    sig = {"w_ptr": "*bf16", "x_ptr": "*bf16", "out_ptr": "*bf16", "ws_ptr": "*fp32", "M": "i32", "N": "i32",
           "stride_xm": "i32", "stride_om": "i32"}
    attrs = {(i, ): [["tt.divisibility", 16]] for i in (0, 1, 2, 3, 6, 7)}
    for k, split in ((4096, 8), (2560, 1)):  # o's shape at its split-K (the defer store), then qkv's
        consts = {"K": k, "MP": 8, "SPLIT_K": split, "PDL": 2, "num_warps": 4}
        kernel = triton.compile(GluonASTSource(_reg_gemv_kernel, {**sig, **{c: "constexpr" for c in consts}}, consts,
                                               attrs), target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
        ptx = kernel.asm["ptx"]
        ops = [line.split()[0] for line in ptx.splitlines() if "ld.global" in line]
        print(f"K {k} split {split}: wgmma", sum("wgmma.mma_async" in line for line in ptx.splitlines()), "loads",
              {op: ops.count(op) for op in sorted(set(ops))})
    # the kernel's reshape and permute, done by torch on one stored tile, must give the tile back
    w = torch.randn(BN, BK)
    v = fragment_order(w).view(2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2).permute(3, 4, 11, 5, 6, 7, 0, 1, 2, 10, 8, 9, 12)
    assert torch.equal(v.reshape(BN, BK), w), "fragment_order and _frag_tile disagree"
    print("fragment order: the kernel's permutation gives the tile back")
    try:  # registers and spills (cuobjdump ships with triton's NVIDIA backend)
        sys.path.insert(0, "tests")
        from cubin_usage import resource_usage
        print("resources", resource_usage(kernel.asm["cubin"]))
    except Exception as exc:  # informative only
        print("resources unknown:", exc)


def main(path: str) -> None:
    """Per 4B product at its shipped split-K: differing elements against the shipped Gluon product (its output, or its
    slices' workspace), and us per launch of both in a graph over about 1 GB of weight copies, one row, PDL mode 2."""
    torch.manual_seed(0)
    res = {"device": torch.cuda.get_device_name(), "products": {}}
    for name, (n, k, split) in {"qkv": (6144, 2560, 1), "o": (2560, 4096, 8), "gate_up": (19456, 2560, 1),
                                "down": (2560, 9728, 4)}.items():
        cfg = gg.CONFIGS[(n, k)]

        def shipped(x, w, out, pdl=0):
            return gg.gemv(x, w, out, x, None, cfg, split, False, False, pdl, defer=split > 1)

        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        wf = fragment_order(w)
        row = {"split_k": split, "shipped_tiles": cfg}
        for m in (1, 8, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = shipped(x, w, torch.empty(m, n, device="cuda", dtype=x.dtype))
            got = reg_gemv(x, wf, torch.empty(m, n, device="cuda", dtype=x.dtype), split)
            row[f"differing_elements_{m}_rows"] = int((got != ref).sum())
        copies = max(2, (1 << 30) // (n * k * 2))
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        wfs = [fragment_order(t) for t in ws]
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(1, n, device="cuda", dtype=x.dtype)
        row["shipped_us"] = graph_time(lambda i: shipped(x, ws[i], out, pdl=2), copies)
        row["register_fed_us"] = graph_time(lambda i: reg_gemv(x, wfs[i], out, split, pdl=2), copies)
        row.update(bytes=n * k * 2, copies=copies)
        res["products"][name] = row
        print(name, row, flush=True)
        del ws, wfs
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    compile_only() if sys.argv[1:] == ["--compile-only"] else main(sys.argv[1])
