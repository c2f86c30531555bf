"""DSpark drafter: fused-tap context K/V injection, a non-causal Qwen3 block backbone, Markov and confidence heads.

Names follow the DeepSpec checkpoint (`fc`, `hidden_norm`, `layers.N.*`, `norm`, `markov_head.*`,
`confidence_head.proj`). The embedding and LM head are the target's (aliased, never loaded twice).
"""
from __future__ import annotations

import torch
from torch import nn

from sparkdec.config import DraftConfig
from sparkdec.engine.context import ForwardContext
from sparkdec.models.qwen3 import Qwen3DecoderLayer, RMSNorm
from sparkdec.ops.linear import linear
from sparkdec.ops.rope import RotaryTable


class MarkovHead(nn.Module):
    """Bias B_k on the base logits from the previous block token (spec §9)."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        d, r, v = cfg.layers.hidden_size, cfg.markov_rank, cfg.layers.vocab_size
        self.kind = cfg.markov_head_type
        self.rank = r
        self.markov_w1 = nn.Embedding(v, r)
        self.markov_w2 = nn.Linear(r, v, bias=False)
        if self.kind == "gated":
            self.gate_proj = nn.Linear(d + r, r)
        elif self.kind == "rnn":
            self.joint_proj = nn.Linear(2 * r + d, 3 * r)

    def bias(self, e: torch.Tensor, h: torch.Tensor, state: torch.Tensor | None):
        """e [B, r] = W1[prev], h [B, d] -> (B_k [B, V] float32, new state)."""
        if self.kind == "vanilla":
            v = e
        elif self.kind == "gated":
            g = torch.sigmoid(linear(torch.cat([h, e], -1), self.gate_proj.weight) + self.gate_proj.bias)
            v = g * e
        else:
            gco = linear(torch.cat([state, e, h], -1), self.joint_proj.weight) + self.joint_proj.bias
            g, c, o = gco.chunk(3, dim=-1)
            state = torch.sigmoid(g) * state + (1 - torch.sigmoid(g)) * torch.tanh(c)
            v = torch.tanh(o)
        return linear(v, self.markov_w2.weight).float(), state


class ConfidenceHead(nn.Module):
    """c_k = sigmoid(w . [h_k ; W1[d_k]] + b), computed in float32 (spec §10: d_k is the token fed into slot k,
    d_0 the anchor; in the engine's 0-based drafts tensor that is drafts[:, k-1])."""

    def __init__(self, in_features: int):
        super().__init__()
        self.proj = nn.Linear(in_features, 1)

    def forward(self, h: torch.Tensor, e: torch.Tensor | None) -> torch.Tensor:
        """All slots at once: h [B, γ, d], e [B, γ, r] (Markov embeddings of each slot's previous token, or None)
        -> [B, γ]. Elementwise products and sums (two small kernels, not one matrix-vector call per slot)."""
        w = self.proj.weight.float()[0]
        d = h.shape[-1]
        logit = (h.float() * w[:d]).sum(-1)
        if e is not None:
            logit = logit + (e.float() * w[d:]).sum(-1)
        return torch.sigmoid(logit + self.proj.bias.float()[0])


class DSparkDrafter(nn.Module):
    def __init__(self, cfg: DraftConfig):
        super().__init__()
        lc = cfg.layers
        self.config = cfg
        self.fc = nn.Linear(cfg.num_taps * lc.hidden_size, lc.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(lc.hidden_size, lc.rms_norm_eps)
        self.layers = nn.ModuleList(Qwen3DecoderLayer(lc) for _ in range(lc.num_hidden_layers))
        self.norm = RMSNorm(lc.hidden_size, lc.rms_norm_eps)
        self.markov_head = MarkovHead(cfg) if cfg.markov_rank > 0 else None
        width = lc.hidden_size + (cfg.markov_rank if cfg.confidence_head_with_markov else 0)
        self.confidence_head = ConfidenceHead(width) if cfg.enable_confidence_head else None
        self._shared: dict[str, nn.Module] = {}
        self.rope: RotaryTable | None = None

    def share_target(self, target: nn.Module) -> None:
        """Alias the target's embedding and LM head (kept outside this module's parameters)."""
        self._shared = {"embed": target.model.embed_tokens, "lm_head": target.lm_head}

    def setup_rope(self, max_positions: int, device) -> None:
        lc = self.config.layers
        self.rope = RotaryTable(lc.head_dim, lc.rope_theta, max_positions, device)

    def write_context(self, taps: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, kv_layers) -> None:
        """taps [T, m*d] of target rows -> fused context K/V of every draft layer at those positions (spec §5-7)."""
        ctx = self.hidden_norm(linear(taps, self.fc.weight))  # [T, d]
        for layer, kv in zip(self.layers, kv_layers):
            layer.self_attn.write_kv(ctx, positions, slots, kv, self.rope)

    def embed_block(self, anchors: torch.Tensor) -> torch.Tensor:
        """anchors [B] -> the embedded block rows [x0, M, ..., M] of every sequence [B*γ, d] (one launch on CUDA)."""
        gamma, mask_id = self.config.block_size, self.config.mask_token_id
        table = self._shared["embed"].weight
        if anchors.is_cuda:
            from sparkdec.ops.triton_propose import block_embed

            return block_embed(table, anchors, gamma, mask_id)
        ids = torch.full((anchors.shape[0], gamma), mask_id, dtype=torch.long, device=anchors.device)
        ids[:, 0] = anchors
        return self._shared["embed"](ids.view(-1))

    def block_hidden(self, input_ids: torch.Tensor, ctx: ForwardContext, kv_layers) -> torch.Tensor:
        """Block rows [B*γ] (anchor, mask, ...) -> final-normed hidden [B*γ, d]."""
        return self.block_hidden_rows(self._shared["embed"](input_ids), ctx, kv_layers)

    def block_hidden_rows(self, h: torch.Tensor, ctx: ForwardContext, kv_layers) -> torch.Tensor:
        """Embedded block rows [B*γ, d] -> final-normed hidden [B*γ, d]."""
        for layer, kv in zip(self.layers, kv_layers):
            h = layer(h, ctx, kv, self.rope)
        return self.norm(h)

    def base_logits(self, h: torch.Tensor) -> torch.Tensor:
        return linear(h, self._shared["lm_head"].weight, torch.float32)

    def markov_chain(self, h: torch.Tensor, anchors: torch.Tensor, pick, greedy: bool = False, coupling=None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sequential stage (spec §9.3). h [B, γ, d], anchors [B]; pick(z_k [B, V], k) -> tokens [B].
        greedy: pick is the argmax, or for the rows coupling marks (spec/coupling.py; its tensors as
        triton_markov.markov_chain takes them) the coupled race: lets CUDA run the fused Markov chain.
        Returns drafts [B, γ], corrected logits z [B, γ, V] (float32) and confidences [B, γ]."""
        b, gamma, _ = h.shape
        u = self.base_logits(h.reshape(b * gamma, -1)).view(b, gamma, -1)  # [B, γ, V]
        if greedy and h.is_cuda and self._fused_markov_ok(coupling):
            return self.greedy_chain_fused(h, u, anchors, coupling)
        prev, state = anchors, None
        if self.markov_head is not None and self.markov_head.kind == "rnn":
            state = h.new_zeros(b, self.markov_head.rank)
        drafts, zs, es = [], [], []
        for k in range(gamma):
            z = u[:, k]
            if self.markov_head is not None:
                e = self.markov_head.markov_w1(prev)  # [B, r]
                bias, state = self.markov_head.bias(e, h[:, k], state)
                z = z + bias
                es.append(e)
            prev = pick(z, k)
            drafts.append(prev)
            zs.append(z)
        drafts = torch.stack(drafts, 1)
        return drafts, torch.stack(zs, 1), self._confidences(h, anchors, drafts)

    def _fused_markov_ok(self, coupling=None) -> bool:
        from sparkdec.ops.triton_markov import CHAIN, supported

        mh = self.markov_head
        return (mh is not None and mh.kind == "vanilla" and supported(mh.markov_w1.weight)
                and (coupling is None or CHAIN))

    def greedy_chain_fused(self, h: torch.Tensor, u: torch.Tensor, anchors: torch.Tensor, coupling=None):
        """markov_chain with argmax (or coupled) picks for the vanilla head, one kernel per slot
        (ops/triton_markov.py)."""
        from sparkdec.ops import triton_markov

        b, gamma, v = u.shape
        w1, w2 = self.markov_head.markov_w1.weight, self.markov_head.markov_w2.weight
        drafts = torch.empty(b, gamma, dtype=torch.long, device=u.device)
        z = torch.empty(b, gamma, v, dtype=torch.float32, device=u.device)
        tail = None
        if triton_markov.CHAIN:  # the last draft is reduced by the confidence kernel when there is a head
            tail = triton_markov.markov_chain(anchors, w1, w2, u, z, drafts, finish=self.confidence_head is None,
                                              coupling=coupling)
        else:
            prev = anchors.clone()
            for k in range(gamma):
                triton_markov.markov_step(prev, w1, w2, u[:, k], z[:, k], drafts[:, k])
        return drafts, z, self._confidences(h, anchors, drafts, tail)

    def _confidences(self, h: torch.Tensor, anchors: torch.Tensor, drafts: torch.Tensor, tail=None) -> torch.Tensor:
        """h [B, γ, d], anchors [B], drafts [B, γ] -> [B, γ]; the head sees each slot's previous token through
        W1 (the anchor for slot 0) when it was trained with the Markov embedding. tail (CUDA): the fused chain's
        unreduced last slot; the confidence kernel also writes drafts[:, γ-1] from it."""
        b, gamma = h.shape[:2]
        if self.confidence_head is None:
            return torch.ones(b, gamma, device=h.device)
        w1 = self.markov_head.markov_w1.weight if self.markov_head is not None else None
        w1 = w1 if self.config.confidence_head_with_markov else None
        if h.is_cuda:
            from sparkdec.ops.triton_propose import confidences

            proj = self.confidence_head.proj
            return confidences(h, w1, anchors, drafts, proj.weight, proj.bias, tail)
        es = None if w1 is None else w1[torch.cat([anchors[:, None], drafts[:, :-1]], 1)]  # [B, γ, r]
        return self.confidence_head(h, es)
