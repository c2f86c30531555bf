"""Qwen3 dense target: packed ragged forward over a paged KV cache, with tapped layer outputs.

Parameter names follow Hugging Face (`model.layers.N.self_attn.q_proj.weight`, ...) so checkpoint keys map
one to one. The model sees tensors and a ForwardContext; it never sees sequences or pages.
"""
from __future__ import annotations

import torch
from torch import nn

from sparkdec.config import TargetConfig
from sparkdec.engine.context import ForwardContext
from sparkdec.ops.attention import paged_attention
from sparkdec.ops.linear import linear
from sparkdec.ops.norms import rms_norm
from sparkdec.ops.partials import Partials, materialised
from sparkdec.ops.rope import RotaryTable


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x) -> torch.Tensor:
        """x: a tensor, or a product's unsummed slices (ops/partials.py) on the CUDA path."""
        if isinstance(x, Partials) or (x.is_cuda and x.dim() == 2):
            from sparkdec.ops import triton_fused

            return triton_fused.norm_of(x, self.weight, self.eps)[0]
        return rms_norm(x, self.weight, self.eps)


def _proj(n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False)


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = _proj(cfg.hidden_size, self.num_heads * self.head_dim)
        self.k_proj = _proj(cfg.hidden_size, self.num_kv_heads * self.head_dim)
        self.v_proj = _proj(cfg.hidden_size, self.num_kv_heads * self.head_dim)
        self.o_proj = _proj(self.num_heads * self.head_dim, cfg.hidden_size)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.qkv_weight: torch.Tensor | None = None  # fused [q; k; v] rows (CUDA path), set by fuse()

    def fuse(self) -> None:
        """Store q/k/v weights in one tensor (the parameters become views of it): one GEMM instead of three.
        The fused norm + RoPE kernel needs a power-of-two head_dim; other geometries keep the reference path."""
        if self.head_dim & (self.head_dim - 1) or self.qkv_weight is not None:  # (fused already)
            return
        fused = torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]).detach()
        nq, nk = self.q_proj.weight.shape[0], self.k_proj.weight.shape[0]
        self.q_proj.weight = nn.Parameter(fused[:nq], requires_grad=False)
        self.k_proj.weight = nn.Parameter(fused[nq:nq + nk], requires_grad=False)
        self.v_proj.weight = nn.Parameter(fused[nq + nk:], requires_grad=False)
        self.qkv_weight = fused

    def write_kv(self, x: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor,
                 kv: tuple[torch.Tensor, torch.Tensor], rope: RotaryTable) -> None:
        """Project x [T, d] to keys/values and store them at slots [T] of kv = (k_cache, v_cache)."""
        if self.qkv_weight is not None and x.is_cuda:
            from sparkdec.ops.tiled_weights import tiles_of
            from sparkdec.ops.triton_fused import qkv_rope_store
            from sparkdec.ops.triton_gemm import gemm

            # (a row slice of a weight stored tile by tile is no matrix of its tiles: gluon_gemv.TILED_SHAPES must
            # not hold a layer's qkv where write_kv runs, the drafter's context write)
            assert tiles_of(self.qkv_weight) is None, "write_kv: the fused qkv weight is stored tile by tile"
            kv_rows = gemm(x, self.qkv_weight[self.num_heads * self.head_dim:])  # [T, 2 * Hkv * D]
            qkv_rope_store(kv_rows, 0, self.num_kv_heads, None, self.k_norm.weight, self.k_norm.eps, rope.cos, rope.sin,
                           positions, slots, kv[0], kv[1])
            return
        t = x.shape[0]
        k = self.k_norm(linear(x, self.k_proj.weight).view(t, self.num_kv_heads, self.head_dim))
        kv[0][slots] = rope.apply(k, positions).to(kv[0].dtype)
        kv[1][slots] = linear(x, self.v_proj.weight).view(t, self.num_kv_heads, self.head_dim).to(kv[1].dtype)

    def forward(self, x: torch.Tensor, ctx: ForwardContext, kv: tuple[torch.Tensor, torch.Tensor],
                rope: RotaryTable) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_norm(linear(x, self.q_proj.weight).view(t, self.num_heads, self.head_dim))
        q = rope.apply(q, ctx.positions)
        self.write_kv(x, ctx.positions, ctx.slot_mapping, kv, rope)
        o = paged_attention(q, kv[0], kv[1], ctx, self.head_dim ** -0.5)
        return linear(o.reshape(t, -1), self.o_proj.weight)


class Qwen3MLP(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.gate_proj = _proj(cfg.hidden_size, cfg.intermediate_size)
        self.up_proj = _proj(cfg.hidden_size, cfg.intermediate_size)
        self.down_proj = _proj(cfg.intermediate_size, cfg.hidden_size)
        self.gate_up_weight: torch.Tensor | None = None

    def fuse(self) -> None:
        from sparkdec.ops.triton_gemm import interleave_gate_up

        if self.gate_up_weight is not None:  # fused already (an engine built before on the same model)
            return
        # rows g0, u0, g1, u1, ...: one weight tile feeds both halves of SiLU(gate) * up (ops/triton_gemm.py)
        fused = interleave_gate_up(self.gate_proj.weight.detach(), self.up_proj.weight.detach())
        self.gate_proj.weight = nn.Parameter(fused[0::2], requires_grad=False)
        self.up_proj.weight = nn.Parameter(fused[1::2], requires_grad=False)
        self.gate_up_weight = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_weight is not None and x.is_cuda:
            from sparkdec.ops.triton_gemm import gemm

            return linear(gemm(x, self.gate_up_weight, silu=True), self.down_proj.weight)
        gate = torch.nn.functional.silu(linear(x, self.gate_proj.weight))
        return linear(gate * linear(x, self.up_proj.weight), self.down_proj.weight)


class Qwen3DecoderLayer(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Qwen3Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = Qwen3MLP(cfg)

    def tileable_weights(self) -> list[torch.Tensor]:
        """The weights only the CUDA path's products read after fuse, which may store them tile by tile
        (ops/tiled_weights.py): o, down, the fused gate_up and qkv (their parameters are views of them; the fused
        qkv's row slice of write_kv refuses a tiled one)."""
        attn, mlp = self.self_attn, self.mlp
        return [attn.o_proj.weight, mlp.down_proj.weight] + [w for w in (mlp.gate_up_weight, attn.qkv_weight)
                                                             if w is not None]

    def fuse(self) -> None:
        self.self_attn.fuse()
        self.mlp.fuse()

    def _fused_forward(self, h: torch.Tensor, ctx: ForwardContext, kv, rope: RotaryTable) -> torch.Tensor:
        """CUDA: eight launches per layer (norm, qkv, q/k norm+RoPE+cache store, attention x2, o+residual, norm,
        gate_up+SiLU, down+residual), each row batch-invariant. Takes and returns h as a tensor or, with
        triton_gemm.SUM_IN_NORM, as a product's unsummed slices that the next norm kernel sums (ops/partials.py).
        Folding the norms into the Triton and Gluon products, and the q/k norm + RoPE into the attention split
        kernel, were measured slower on the H200."""
        from sparkdec.ops import triton_gemm
        from sparkdec.ops.triton_fused import norm_of, qkv_rope_store
        from sparkdec.ops.triton_gemm import gemm
        from sparkdec.ops.triton_gemm import mlp as mlp_block

        attn, mlp, ln1, ln2 = self.self_attn, self.mlp, self.input_layernorm, self.post_attention_layernorm
        t = h.shape[0]
        x, h = norm_of(h, ln1.weight, ln1.eps)  # h: a tensor, or the last product's unsummed slices (ops/partials.py)
        qkv = gemm(x, attn.qkv_weight, partial=triton_gemm.QKV_SLICES_TO_ROPE,
                   pdl_kind="gluon_qkv")  # [T, (Hq + 2 Hkv) * D] or slices
        q = qkv_rope_store(qkv, attn.num_heads, attn.num_kv_heads, attn.q_norm.weight, attn.k_norm.weight,
                           attn.k_norm.eps, rope.cos, rope.sin, ctx.positions, ctx.slot_mapping, kv[0], kv[1])
        o = paged_attention(q, kv[0], kv[1], ctx, attn.head_dim ** -0.5, own_keys=True)  # [T, Hq, D]
        h = gemm(o.view(t, -1), attn.o_proj.weight, residual=h, partial=True, pdl_kind="gluon_o")
        return mlp_block(h, mlp.gate_up_weight, mlp.down_proj.weight, (ln2.weight, ln2.eps))  # RMSNorm, then the MLP

    def forward(self, h: torch.Tensor, ctx: ForwardContext, kv, rope: RotaryTable) -> torch.Tensor:
        if h.is_cuda and self.self_attn.qkv_weight is not None and self.mlp.gate_up_weight is not None:
            return self._fused_forward(h, ctx, kv, rope)
        attn = self.self_attn(self.input_layernorm(h), ctx, kv, rope)
        h = materialised(h)  # a fused layer before this one may hand on slices: the norm above summed them
        if h.is_cuda:
            from sparkdec.ops.triton_fused import rms_norm as fused_norm

            ln = self.post_attention_layernorm
            x, h = fused_norm(attn, ln.weight, ln.eps, residual=h)  # h = h + attn; x = norm(h)
            return h + self.mlp(x)
        h = h + attn
        return h + self.mlp(self.post_attention_layernorm(h))


class Qwen3Model(nn.Module):
    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3ForCausalLM(nn.Module):
    """forward() returns final-normed hidden states [T, d] and the concatenated taps [T, m*d] (or None)."""

    def __init__(self, cfg: TargetConfig):
        super().__init__()
        self.config = cfg
        self.model = Qwen3Model(cfg)
        self.lm_head = _proj(cfg.hidden_size, cfg.vocab_size)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rope: RotaryTable | None = None

    def setup_rope(self, max_positions: int, device) -> None:
        cfg = self.config
        self.rope = RotaryTable(cfg.head_dim, cfg.rope_theta, max_positions, device)

    def forward(self, input_ids: torch.Tensor, ctx: ForwardContext, kv_layers: list,
                tap_layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.model.embed_tokens(input_ids)
        taps = []
        if -1 in tap_layers:
            taps.append(h)
        for i, layer in enumerate(self.model.layers):
            h = layer(h, ctx, kv_layers[i], self.rope)
            if i in tap_layers:  # unsummed slices: their tensor is written by the norm that reads them, before the cat
                taps.append(materialised(h))
        return self.model.norm(h), (torch.cat(taps, dim=-1) if taps else None)

    def row_major_state_dict(self) -> dict[str, torch.Tensor]:
        """state_dict() with every weight's values as rows, where an engine stored some tile by tile
        (ops/tiled_weights.py; the q/k/v and gate/up parameters are then views of a tiled fused weight)."""
        from sparkdec.ops.tiled_weights import row_major, tiles_of

        state = {name: row_major(t) for name, t in self.state_dict().items()}
        for i, layer in enumerate(self.model.layers):
            p, attn, mlp = f"model.layers.{i}.", layer.self_attn, layer.mlp
            if mlp.gate_up_weight is not None and tiles_of(mlp.gate_up_weight) is not None:
                rows = row_major(mlp.gate_up_weight)  # g0, u0, g1, u1, ...
                state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"] = rows[0::2], rows[1::2]
            if attn.qkv_weight is not None and tiles_of(attn.qkv_weight) is not None:
                rows = row_major(attn.qkv_weight)  # [q; k; v]
                nq, nk = attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0]
                for name, part in (("q", rows[:nq]), ("k", rows[nq:nq + nk]), ("v", rows[nq + nk:])):
                    state[p + f"self_attn.{name}_proj.weight"] = part
        return state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [R, d] -> float32 logits [R, V]."""
        return linear(hidden, self.lm_head.weight, torch.float32)
