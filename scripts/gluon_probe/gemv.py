# Probe: swap-AB GEMV y[M<=8, N] = x[M, K] @ W[N, K]^T, TMA ring + mbarriers + wgmma m64n8k16, warp-specialized loader.
import os, sys
import torch, triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import tma, mbarrier, fence_async_shared, warpgroup_mma, warpgroup_mma_wait, warpgroup_mma_init

@gluon.jit
def _loader(w_desc, x_desc, w_bufs, x_bufs, ready, empty, off_n, K: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr):
    for i in range(K // BK):
        s = i % STAGES
        ph = (i // STAGES) & 1
        mbarrier.wait(empty.index(s), ph ^ 1)
        mbarrier.expect(ready.index(s), w_desc.block_type.nbytes + x_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [off_n, i * BK], ready.index(s), w_bufs.index(s))
        tma.async_copy_global_to_shared(x_desc, [0, i * BK], ready.index(s), x_bufs.index(s))

@gluon.jit
def _consumer(w_bufs, x_bufs, ready, empty, K: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, BN: gl.constexpr, MP: gl.constexpr):
    acc_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, MP, 16])
    acc = gl.zeros([BN, MP], gl.float32, layout=acc_l)
    for i in range(K // BK):
        s = i % STAGES
        ph = (i // STAGES) & 1
        mbarrier.wait(ready.index(s), ph)
        acc = warpgroup_mma(w_bufs.index(s), x_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
        mbarrier.arrive(empty.index(s), count=1)
    return (acc,)

@gluon.jit
def gemv_kernel(w_desc, x_desc, out_ptr, M, N, K: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    BN: gl.constexpr = w_desc.block_type.shape[0]
    BK: gl.constexpr = w_desc.block_type.shape[1]
    MP: gl.constexpr = x_desc.block_type.shape[0]
    off_n = gl.program_id(0) * BN
    w_bufs = gl.allocate_shared_memory(w_desc.dtype, [STAGES, BN, BK], w_desc.layout)
    x_bufs = gl.allocate_shared_memory(x_desc.dtype, [STAGES, MP, BK], x_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    acc, = gl.warp_specialize([
        (_consumer, (w_bufs, x_bufs, ready, empty, K, BK, STAGES, BN, MP)),
        (_loader, (w_desc, x_desc, w_bufs, x_bufs, ready, empty, off_n, K, BK, STAGES)),
    ], [1], [24])
    out_l: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [4, 1], [0, 1])
    y = gl.convert_layout(acc, out_l).to(gl.bfloat16)
    n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(1, out_l))
    m = gl.arange(0, MP, layout=gl.SliceLayout(0, out_l))
    mask = (n[:, None] < N) & (m[None, :] < M)
    gl.store(out_ptr + m[None, :] * N + n[:, None], y, mask=mask)

def make_gemv(x, w, BN=64, BK=128, STAGES=4, MP=8):
    M, K = x.shape
    N = w.shape[0]
    xp = torch.zeros(MP, K, dtype=x.dtype, device=x.device); xp[:M] = x
    wl = gl.NVMMASharedLayout.get_default_for([BN, BK], gl.bfloat16)
    xl = gl.NVMMASharedLayout.get_default_for([MP, BK], gl.bfloat16)
    wd = TensorDescriptor.from_tensor(w, [BN, BK], wl)
    xd = TensorDescriptor.from_tensor(xp, [MP, BK], xl)
    out = torch.empty(M, N, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N, BN),)
    def run():
        gemv_kernel[grid](wd, xd, out, M, N, K, STAGES, num_warps=4)
        return out
    return run

def gemv(x, w, **kw):
    return make_gemv(x, w, **kw)()
