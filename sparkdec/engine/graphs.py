"""CUDA graphs of the verify/decode forward: target + drafter context write + logits + argmax, per token tier.

Every per-round value lives in static device buffers written before replay (DESIGN §3.5). Rows past the
live count are padding: they write K/V into a trash page and their outputs are ignored.
"""
from __future__ import annotations

import torch

from sparkdec.engine.context import ForwardContext

TIERS = (16, 32, 64, 128)


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
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}

    def _forward(self, t: int):
        ctx = ForwardContext(positions=self.positions[:t], slot_mapping=self.slots[:t], block_tables=self.tables,
                             page_size=self.page_size, row_seq=self.row_seq[:t], row_kv_len=self.row_len[:t],
                             max_kv_len=self.max_positions)
        logits = self.runner.forward_rows(self.ids[:t], ctx)
        return logits, logits.argmax(-1)

    @torch.inference_mode()
    def capture(self) -> None:
        self._fill([], [])
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for t in self.tiers:
                for _ in range(2):
                    self._forward(t)
        torch.cuda.current_stream().wait_stream(stream)
        pool = None
        for t in sorted(self.tiers, reverse=True):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits, argmax = self._forward(t)
            pool = graph.pool()
            self.graphs[t] = (graph, logits, argmax)

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

    def run(self, pieces, tier: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the tier's graph for these rows -> (logits [tier, V], argmax [tier]) static outputs."""
        self._fill(pieces, [p[0] for p in pieces])
        graph, logits, argmax = self.graphs[tier]
        graph.replay()
        return logits, argmax
