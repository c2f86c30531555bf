"""CUDA graphs of the verify/decode forward: target + drafter context write + logits + argmax, per token tier.

Every per-round value lives in static device buffers written before replay (DESIGN §3.5). Rows past the
live count are padding: they write K/V into a trash page and their outputs are ignored.
"""
from __future__ import annotations

import gc

import torch

from sparkdec.engine.context import ForwardContext

TIERS = (16, 32, 64, 128)


def capture_tiers(tiers, forward) -> dict:
    """Warm up forward(tier) on a side stream, then capture one graph per tier (largest first, shared pool).
    Returns {tier: (graph, static outputs)}."""
    # NOTE: one eager pass on the current stream first, so that library handles, workspaces and kernel
    # modules are created outside the capture (creating them inside invalidates it)
    for t in tiers:
        forward(t)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for t in tiers:
            for _ in range(2):
                forward(t)
    torch.cuda.current_stream().wait_stream(stream)
    graphs, pool = {}, None
    gc.collect()
    gc.disable()  # NOTE: a collection during capture may free another graph's memory, which invalidates the capture
    try:
        for t in sorted(tiers, reverse=True):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                out = forward(t)
            pool = graph.pool()
            graphs[t] = (graph, out)
    finally:
        gc.enable()
    return graphs


class TargetGraphs:
    def __init__(self, runner, max_seqs: int, max_positions: int, trash_page: int, tiers=TIERS):
        self.runner = runner
        dev = runner.device
        self.page_size = runner.page_size
        self.max_positions = max_positions
        self.tiers = tiers
        t, pages = max(tiers), -(-max_positions // self.page_size)
        self.max_seqs = max_seqs
        self.ids = torch.zeros(t, dtype=torch.long, device=dev)
        self.positions = torch.zeros(t, dtype=torch.long, device=dev)
        self.slots = torch.zeros(t, dtype=torch.long, device=dev)
        self.row_seq = torch.zeros(t, dtype=torch.int32, device=dev)
        self.row_len = torch.ones(t, dtype=torch.int32, device=dev)
        self.tables = torch.full((max_seqs + 1, pages), trash_page, dtype=torch.long, device=dev)
        self.trash_slot = trash_page * self.page_size
        self.graphs: dict[int, tuple] = {}

    def _forward(self, t: int):
        ctx = ForwardContext(positions=self.positions[:t], slot_mapping=self.slots[:t], block_tables=self.tables,
                             page_size=self.page_size, row_seq=self.row_seq[:t], row_kv_len=self.row_len[:t],
                             max_kv_len=self.max_positions)
        logits = self.runner.forward_rows(self.ids[:t], ctx)
        return logits, logits.argmax(-1)

    @torch.inference_mode()
    def capture(self) -> None:
        self._fill([], [])
        self.graphs = capture_tiers(self.tiers, self._forward)

    def tier_for(self, num_tokens: int, num_seqs: int) -> int | None:
        if num_seqs > self.max_seqs:
            return None
        return next((t for t in self.tiers if t >= num_tokens), None)

    def _fill(self, pieces, tables) -> None:
        ids, pos, slots, row_seq, row_len = [], [], [], [], []
        for i, (table, toks, positions) in enumerate(pieces):
            ids += toks
            pos += positions
            slots += [table[p // self.page_size] * self.page_size + p % self.page_size for p in positions]
            row_seq += [i] * len(toks)
            row_len += [p + 1 for p in positions]
        n = len(ids)
        pad = self.ids.shape[0] - n
        host = torch.tensor([ids + [0] * pad, pos + [0] * pad, slots + [self.trash_slot] * pad], dtype=torch.long)
        self.ids.copy_(host[0], non_blocking=True)
        self.positions.copy_(host[1], non_blocking=True)
        self.slots.copy_(host[2], non_blocking=True)
        rows = torch.tensor([row_seq + [self.max_seqs] * pad, row_len + [1] * pad], dtype=torch.int32)
        self.row_seq.copy_(rows[0], non_blocking=True)
        self.row_len.copy_(rows[1], non_blocking=True)
        if tables:
            width = self.tables.shape[1]
            padded = torch.tensor([tb + [tb[-1]] * (width - len(tb)) for tb in tables], dtype=torch.long)
            self.tables[:len(tables)].copy_(padded, non_blocking=True)

    def run(self, pieces, tier: int, fill=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the tier's graph for these rows -> (logits [tier, V], argmax [tier]) static outputs."""
        from sparkdec.engine.runner import apply_fill

        self._fill(pieces, [p[0] for p in pieces])
        apply_fill(self.ids, fill)
        graph, (logits, argmax) = self.graphs[tier]
        graph.replay()
        return logits, argmax


PROPOSE_TIERS = (1, 2, 4, 8, 16, 32, 64)


class ProposeGraphs:
    """CUDA graphs of the greedy propose: drafter block forward, Markov chain and confidence head, per batch tier."""

    def __init__(self, runner, max_seqs: int, max_positions: int, trash_page: int):
        self.runner = runner
        dev, self.page_size = runner.device, runner.page_size
        self.gamma = runner.draft_cfg.block_size
        self.tiers = tuple(b for b in PROPOSE_TIERS if b <= max(max_seqs, 1)) or (1,)
        b, pages = max(self.tiers), -(-max_positions // self.page_size)
        self.max_positions = max_positions
        self.anchors = torch.zeros(b, dtype=torch.long, device=dev)
        self.positions = torch.zeros(b * self.gamma, dtype=torch.long, device=dev)
        self.slots = torch.full((b * self.gamma,), trash_page * self.page_size, dtype=torch.long, device=dev)
        self.row_seq = torch.zeros(b * self.gamma, dtype=torch.int32, device=dev)
        self.row_len = torch.full((b * self.gamma,), self.gamma, dtype=torch.int32, device=dev)
        self.tables = torch.full((b, pages), trash_page, dtype=torch.long, device=dev)
        self.trash_slot = trash_page * self.page_size
        self.graphs: dict[int, tuple] = {}

    def _forward(self, b: int):
        n = b * self.gamma
        ctx = ForwardContext(positions=self.positions[:n], slot_mapping=self.slots[:n], block_tables=self.tables,
                             page_size=self.page_size, row_seq=self.row_seq[:n], row_kv_len=self.row_len[:n],
                             max_kv_len=self.max_positions)
        return self.runner.propose_rows(self.anchors[:b], ctx, lambda z, k: z.argmax(-1))

    @torch.inference_mode()
    def capture(self) -> None:
        b = max(self.tiers)  # row r belongs to sequence r // γ, for every tier
        self.row_seq[:b * self.gamma] = torch.arange(b, dtype=torch.int32, device=self.row_seq.device).repeat_interleave(self.gamma)
        self.graphs = capture_tiers(self.tiers, self._forward)

    def tier_for(self, num_seqs: int) -> int | None:
        return next((b for b in self.tiers if b >= num_seqs), None)

    def run(self, tables: list[list[int]], anchors: list[int], anchor_positions: list[int], tier: int):
        """-> views of the static (drafts [tier, γ], z [tier, γ, V], confidences [tier, γ]); rows past len(anchors) are padding."""
        g, n, pad = self.gamma, len(anchors), tier - len(anchors)
        pos = [s + k for s in anchor_positions for k in range(g)]
        slots = [tb[p // self.page_size] * self.page_size + p % self.page_size
                 for tb, s in zip(tables, anchor_positions) for p in range(s, s + g)]
        lens = [s + g for s in anchor_positions for _ in range(g)]
        host = torch.tensor([pos + [0] * pad * g, slots + [self.trash_slot] * pad * g], dtype=torch.long)
        self.positions[:tier * g].copy_(host[0], non_blocking=True)
        self.slots[:tier * g].copy_(host[1], non_blocking=True)
        self.row_len[:tier * g].copy_(torch.tensor(lens + [g] * pad * g, dtype=torch.int32), non_blocking=True)
        self.anchors[:tier].copy_(torch.tensor(anchors + [0] * pad, dtype=torch.long), non_blocking=True)
        width = self.tables.shape[1]
        padded = torch.tensor([tb + [tb[-1]] * (width - len(tb)) for tb in tables], dtype=torch.long)
        self.tables[:n].copy_(padded, non_blocking=True)
        self.tables[n:tier].fill_(self.trash_slot // self.page_size)
        graph, out = self.graphs[tier]
        graph.replay()
        return out
