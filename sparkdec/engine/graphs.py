"""CUDA graphs of the verify/decode forward: target + drafter context write + logits + argmax, per token tier.

Every per-round value lives in static device buffers written before replay (DESIGN §3.5). Rows past the
live count are padding: they write K/V into a trash page and their outputs are ignored.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import importlib

import numpy as np
import torch

from sparkdec.engine.context import ForwardContext, row_blocks
from sparkdec.env import flag
from sparkdec.spec import chain, coupling
from sparkdec.staging import to_device

TIERS = (1, 2, 4, 8, 16, 32, 64, 128)  # NOTE: rows below 16 share the GEMM tile; small tiers save attention work
# graphs for short contexts, for the tiers of SHORT_TIERS: (keys at most, ops/triton_attention settings) each, bounds
# increasing; rows replay the first that holds the keys of each. They are captured with these PDL modes
# (triton_gemm.PDL_KINDS): the q/k norm + RoPE, the attention split and the combine let the next kernel launch at
# their start. H200, Qwen3-4B shape, 1 row
# (early_ctx_ab_h200_2026-11-30_session19.json): replay 2.712 -> 2.682 ms at ctx 1k, 2.866 -> 2.797 at 2k, but
# 2.999 -> 3.016 at 4k, 3.32 -> 3.46 at 8k; 8 rows slower at every context. Up to 1280 keys (20 splits) 32 split
# programs per kv head rather than 64: replay at 1k (17-20 splits) 2.654 -> 2.616 ms (session 19: 2.657 -> 2.621),
# but at 1.5k (25-28 splits) 2.607 -> 2.644, at 2k 2.748 -> 2.843 (short_loads_ab_*, short_bound_ab_h200_2026-12-01_
# session20.json; between 20 and 25 splits not measured). Up to 1280 keys the split is the Gluon kernel that copies
# a split's keys before its PDL wait (ops/gluon_split.py; on other devices the Triton split), its grid's row blocks
# last: 1k decode 2.684-2.688 -> 2.669-2.672 ms/token (two runs); at 2k slower (2.78 -> 2.82;
# short_gluon_ab_h200_2026-12-01_session21*.json). Neither PDL modes nor these settings change bits.
# SHORT_PDL {} or SHORT_BOUNDS (): one graph per tier.
SHORT_PDL = {"rope": 3, "split": 3, "combine": 3}
# PDL modes added to SHORT_PDL's in the short graphs of one row (plain decoding's) only (triton_gemm.PDL_KINDS): the
# down product lets the norm after it launch once each of its programs asked for its last weight tile (mode 6), the o
# product after its loop (1), and the norm before the MLP lets gate_up launch at its own start (3), so gate_up's ring
# fills during o's tail, not after o has ended and the norm's wait returned. Same bits (PDL moves launches only).
# H200, 4B, 1k, three interleaved runs: 1-row replay 2.436/2.439 -> 2.421/2.420/2.422 ms, decode 2.474/2.476 ->
# 2.459/2.459/2.462 ms/token (one_row_pdl_ab_h200_2026-12-04_session38.json). In every graph, o at 1 with that norm at
# 3 made 8-row replay 3.4% slower; down at 6 with the norm before qkv at 3, 0.8% slower at 1 row
# (tail_launch_ab_h200_2026-12-04_session38.json)
SHORT_PDL_ONE_ROW: dict[str, int] = {"gluon_down": 6, "gluon_o": 1, "norm_mlp": 3}
SHORT_PDL_ONE_ROW_TIERS = (1,)  # the tiers that take them (staged A/B: 2 and 4 rows too)
# Since session 24 a 1280-key and a 2048-key graph with the Gluon split, each sized for its bound (SHORT_SIZED): its
# rows never hold more keys (graph_for), and the splits' boundaries do not depend on the bound, so the same bits (eager
# decoding sizes them for the batch's longest row). Sized, the split runs one split per program with buffers for one
# 64-key step (triton_attention.GLUON_ONE_STEP: 48 KB of shared memory, not the 40k window's 16-split loop at 96 KB)
# and the combine sizes 2-4 chunks, not 32; more of the o product's programs, launched during the chain, are resident
# beside the split and fill their rings before their wait. In the 2048-key graph the Qwen3-4B o product's ring has 3
# stages (gluon_gemv.LONE_ROW_STAGES), in the 1280-key one 4. H200, 1 row, decode ms/token: 1k 2.637/2.634 -> 2.559,
# 1.5k 2.655/2.659 -> 2.596, 1.8k 2.682/2.687 -> 2.611 (sized_bound_ab_h200_2026-12-01_session24.json: "s1280_o4_g2k1";
# the 2048-key graph alone 2.571/2.574, 2.597/2.594, 2.614/2.616). Sizing the 3072-key graph (the Triton split) was
# slower at 2k, 2.760 -> 2.825 (sized_ab_*_session24.json); session 23's o ring at 3 stages beside the unsized split:
# lone3_ab_h200_2026-12-01_session23.json. A setting "module.NAME" is NAME in sparkdec/ops/module.py; a plain NAME
# is ops/triton_attention's.
_GLUON_SHORT = {"PROGRAMS_ONE_ROW": 32, "GLUON_SPLIT": True, "GLUON_PROGRAMS": 32, "GLUON_BLOCK_LAST": True,
                "GLUON_ONE_STEP": True}
SHORT_BOUNDS: tuple = ((1280, _GLUON_SHORT),
                       (2048, {**_GLUON_SHORT, "gluon_gemv.LONE_ROW_STAGES": {(2560, 4096): 3}}),
                       (3072, {}))
SHORT_SIZED: tuple = (1280, 2048)  # the bounds whose graphs' attention is sized for the bound, not the window
ROW_ARGMAX = True  # the graphs' argmax in two launches (ops/triton_argmax.py) rather than torch's one block per row
# the decode graphs move their rows on to the next step themselves (ops/triton_argmax.Advance, in the argmax's last
# kernel), so plain decoding one step ahead replays with no host copy and no fill kernels while its rows stay the same.
# Between two steps' graphs the device had spent about 22 us on the metadata copy, the two fill kernels and their gaps
# (decode_loop_gaps_h200_2026-12-01_session25.json). With it the graphs' argmax is ops/triton_argmax's whatever
# ROW_ARGMAX says (its torch path where the kernels do not apply).
ADVANCE = flag("SPARKDEC_GRAPH_ADVANCE", True)
# (with ADVANCE) the argmax also writes the moved-on rows' tokens into pinned host memory, a ring of RING_SLOTS steps,
# so the lookahead reads a step's tokens with no device->host copy between the graphs. Session 26, 4B decode ms/token
# (advance_ab_h200_2026-12-01_session26.json): 1k 2.535/2.526 -> 2.521/2.518 (ADVANCE) -> 2.508/2.510 (both), 8k
# 3.276/3.274 -> 3.254/3.259; a request's 128 steps then take what their graphs replayed back to back take (2.461 ms
# per token against 2.464; decode_loop_gaps_advance_h200_2026-12-01_session26.json).
RING_READBACK = flag("SPARKDEC_GRAPH_RING", True)
RING_SLOTS = 4
# the tiers that get a short graph: for 2, 4 and 8 rows they were slower at 1k and 2k (2 rows at 1k 2.737 -> 2.840
# ms, 8 rows 2.843 -> 2.927; short_graph_tiers_ab_h200_2026-11-30_session19.json), before the sized Gluon graphs.
# With them (session 24) 8 rows at 1k: replay 2.796/2.794 -> 2.734/2.740 ms, a verify of 8 2.782/2.792 -> 2.728/2.727
# (short_t18_ab_h200_2026-12-01_session24.json). Session 25 (short_tiers_ab_h200_2026-12-01_session25.json), replay
# ms at 1k: 2 rows 2.725/2.731 -> 2.519/2.521 and 4 rows 2.758/2.763 -> 2.602/2.602 with the 1280-key graph; at 1.5k
# 8 rows 2.865/2.857 -> 2.796 with the 2048-key graph; 2 rows 2.731/2.729 -> 2.585/2.581 and 4 rows 2.764/2.763 ->
# 2.680/2.676 with it (t24_ab_h200_2026-12-01_session25.json: there 2 and 4 rows also took the 3072-key graph, which
# at 2k was slower, 2.912 -> 3.122 ms, so they stop at 2048 keys). 1 row unchanged.
SHORT_TIERS = (1, 2, 4, 8)
# the largest bound whose short graph a tier gets (a tier not named: every bound)
SHORT_TIER_BOUND = {2: 2048, 4: 2048, 8: 2048}


def pinned(t: torch.Tensor) -> torch.Tensor:
    """Page-locked host memory (asynchronous host->device copies) where CUDA exists; plain memory otherwise."""
    return t.pin_memory() if torch.cuda.is_available() else t


def capture_tiers(tiers, forward) -> dict:
    """Warm up forward(tier) on a side stream, then capture one graph per tier (largest first, shared pool).
    Returns {tier: (graph, static outputs)}."""
    warm_up(tiers, forward)
    graphs, pool = {}, None
    for t in sorted(tiers, reverse=True):
        graphs[t] = capture_one(forward, t, pool)
        pool = graphs[t][0].pool()
    return graphs


def warm_up(tiers, forward) -> None:
    """forward(tier) for each tier, once on the current stream, then twice on a side stream."""
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


def capture_one(forward, t: int, pool) -> tuple:
    """One graph of forward(t) in the memory pool (None: a new one) -> (graph, static outputs)."""
    gc.collect()
    gc.disable()  # NOTE: a collection during capture may free another graph's memory, which invalidates the capture
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            out = forward(t)
        # NOTE: a graph's first launch also uploads it to the device: done here, not in a user's first request (not
        # timed apart: with it the bench's first request reads as the later ones, kernels_*_session26.json)
        graph.replay()
        return graph, out
    finally:
        gc.enable()


def capture_short(tiers, forward, pool) -> dict:
    """The short graphs of these tiers, with SHORT_PDL's modes (and SHORT_PDL_ONE_ROW's for SHORT_PDL_ONE_ROW_TIERS,
    warmed up and captured after the others) and each bound's settings -> {tier: [(keys at most, (graph, static
    outputs))] in SHORT_BOUNDS' order} ({} where off)."""
    from sparkdec.ops import triton_gemm

    if not SHORT_PDL or not SHORT_BOUNDS or not tiers:
        return {}
    bounds = [b for b, _ in SHORT_BOUNDS]
    assert bounds == sorted(set(bounds)), f"SHORT_BOUNDS: bounds must increase, got {bounds}"
    short: dict = {t: [] for t in tiers}
    for bound, settings in SHORT_BOUNDS:
        here = [t for t in tiers if bound <= SHORT_TIER_BOUND.get(t, bound)]
        if not here:
            continue
        bounded = functools.partial(forward, keys=bound) if bound in SHORT_SIZED else forward
        own = [t for t in here if t in SHORT_PDL_ONE_ROW_TIERS] if SHORT_PDL_ONE_ROW else []
        groups = [([t for t in here if t not in own], {}), (own, SHORT_PDL_ONE_ROW)]  # (tiers, extra PDL modes)
        with patched({(triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, **SHORT_PDL},
                      **{setting(name): value for name, value in settings.items()}}):
            for group, extra in (g for g in groups if g[0]):  # (own tiers are the smallest: still largest first)
                with patched({(triton_gemm, "PDL_KINDS"): {**triton_gemm.PDL_KINDS, **extra}} if extra else {}):
                    warm_up(group, bounded)  # the kernels of these settings compile and load outside the capture
                    for t in sorted(group, reverse=True):
                        short[t].append((bound, capture_one(bounded, t, pool)))
    return short


def setting(name: str) -> tuple:
    """(module, attribute) of a SHORT_BOUNDS setting: "NAME" in ops/triton_attention, "module.NAME" in ops/module."""
    module, _, attr = name.rpartition(".")
    return importlib.import_module(f"sparkdec.ops.{module or 'triton_attention'}"), attr


@contextlib.contextmanager
def patched(overrides: dict):
    """Module settings {(module, name): value} set for the block, restored after it."""
    saved = {key: getattr(*key) for key in overrides}
    for (mod, name), value in overrides.items():
        setattr(mod, name, value)
    try:
        yield
    finally:
        for (mod, name), value in saved.items():
            setattr(mod, name, value)


class TargetGraphs:
    def __init__(self, runner, max_seqs: int, max_positions: int, trash_page: int, tiers=TIERS):
        self.runner = runner
        dev = runner.device
        self.page_size = runner.page_size
        self.max_positions = max_positions
        self.tiers = tiers
        t, pages = max(tiers), -(-max_positions // self.page_size)
        self.max_seqs = max_seqs
        # NOTE: all per-round row metadata goes through a pinned host buffer and one copy (ids, positions,
        # slots, row -> sequence, keys per row, row blocks); the graph reads views of the device copy. Two buffers,
        # used in turn: plain decoding one step ahead (engine/lookahead.py) stages step k+1 while the copy of step
        # k's may still wait in the stream behind step k-1 (ProposeGraphs.stage has one: a round reads back first)
        self.stages = [pinned(torch.zeros(10, t, dtype=torch.long)) for _ in range(2)]
        self.stages_np = [s.numpy() for s in self.stages]
        self._turn = 0
        self.dev_stage = torch.zeros(10, t, dtype=torch.long, device=dev)
        # rows 5 and 6: packed rows that take a draft token, and where in the drafts it is (apply_fill);
        # rows 7 and 8: attention row blocks (first row, rows), -1 / 0 past the last block; row 9: for the rows the
        # graph moves on to their next step (ADVANCE), 1 + the step's ring slot (RING_READBACK), else 0
        (self.ids, self.positions, self.slots, self.row_seq, self.row_len, self.fill_rows, self.fill_src,
         self.block_lead, self.block_rows, self.advance_on) = self.dev_stage.unbind(0)
        self._moved: tuple | None = None  # (tier, next positions, tokens' address) the last replay moved its rows to
        self.advances = False  # the graphs were captured with ADVANCE
        self.ring: torch.Tensor | None = None  # [RING_SLOTS, t] pinned: the graphs write tokens here (RING_READBACK)
        self.next_slot = 0  # the ring slot the next moved-on step writes
        self.ring_slot: int | None = None  # the slot the last replay wrote its tokens to (None: it did not)
        self.tables = torch.full((max_seqs + 1, pages), trash_page, dtype=torch.long, device=dev)
        self.table_rows = TableRows(self.tables)
        self.trash_slot = trash_page * self.page_size
        # what padding rows (ids .. keys per row) and unused block entries hold, as columns to broadcast
        self.pad_rows = np.array([[0], [0], [self.trash_slot], [max_seqs], [1]])
        self.no_block = np.array([[-1], [0]])
        self.graphs: dict[int, tuple] = {}
        self.short: dict[int, list] = {}  # tier -> its short-context graphs [(keys at most, graph)] (SHORT_BOUNDS)

    def _forward(self, t: int, keys: int | None = None):
        """The tier-t forward on the static buffers; keys: the most keys a row replaying it holds (the window)."""
        ctx = ForwardContext(positions=self.positions[:t], slot_mapping=self.slots[:t], block_tables=self.tables,
                             page_size=self.page_size, row_seq=self.row_seq[:t], row_kv_len=self.row_len[:t],
                             max_kv_len=min(keys or self.max_positions, self.max_positions),
                             block_lead=self.block_lead[:t],
                             block_rows=self.block_rows[:t])
        logits = self.runner.forward_rows(self.ids[:t], ctx)
        from sparkdec.ops.triton_argmax import Advance, argmax_rows

        if not self.advances:
            return logits, (argmax_rows(logits) if ROW_ARGMAX else logits.argmax(-1))
        return logits, argmax_rows(logits, Advance(self.advance_on[:t], self.ids[:t], self.positions[:t],
                                                   self.slots[:t], self.row_len[:t], self.row_seq[:t], self.tables,
                                                   self.page_size, self.ring))

    @torch.inference_mode()
    def capture(self) -> None:
        self.advances = ADVANCE
        if ADVANCE and RING_READBACK and self.dev_stage.is_cuda:
            self.ring = pinned(torch.zeros(RING_SLOTS, self.dev_stage.shape[1], dtype=torch.long))
        self._fill([], [])
        self.graphs = capture_tiers(self.tiers, self._forward)
        short = [t for t in SHORT_TIERS if t in self.graphs]
        if short:
            self.short = capture_short(short, self._forward, self.graphs[short[0]][0].pool())

    def graph_for(self, pieces, tier: int) -> tuple:
        """(graph, static outputs) to replay for these rows: the first of their tier's short graphs whose bound holds
        the keys of every row, else the tier's own."""
        if tier in self.short and pieces:
            keys = max(p[2][-1] for p in pieces) + 1  # (a row's last position + 1)
            for bound, graph in self.short[tier]:
                if keys <= bound:
                    return graph
        return self.graphs[tier]

    def tier_for(self, num_tokens: int, num_seqs: int) -> int | None:
        if num_seqs > self.max_seqs:
            return None
        return next((t for t in self.tiers if t >= num_tokens), None)

    def _fill(self, pieces, tables, tier: int | None = None, fill=None, advance: bool = False) -> int:
        """Stage every row's metadata (and the draft fill map) and copy it to the device in one transfer.
        advance: the graph moves these rows on to their next step (ADVANCE). Returns how many rows take a draft
        token."""
        self._turn ^= 1
        self._moved = None
        st, ps, at = self.stages_np[self._turn], self.page_size, 0
        tier = tier or st.shape[1]
        spans = []
        for i, (table, toks, positions) in enumerate(pieces):
            k = len(toks)
            st[0, at:at + k] = toks
            st[1, at:at + k] = positions
            st[2, at:at + k] = [table[p // ps] * ps + p % ps for p in positions]
            st[3, at:at + k] = i
            st[4, at:at + k] = positions
            st[4, at:at + k] += 1  # a causal row sees keys 0..position
            spans.append((at, at + k))
            at += k
        st[:5, at:tier] = self.pad_rows
        st[9, :at], st[9, at:tier] = (1 + self.next_slot) if advance else 0, 0  # moved on (and its ring slot + 1)
        nb = 0
        for lead, rows in row_blocks(spans + ([(at, tier)] if tier > at else [])):  # padding: the trash row's blocks
            st[7, nb], st[8, nb] = lead, rows
            nb += 1
        st[7:9, nb:tier] = self.no_block
        n_fill = len(fill[0]) if fill is not None else 0
        if n_fill:
            st[5, :n_fill] = fill[0]
            st[6, :n_fill] = fill[2]
        self.dev_stage.copy_(self.stages[self._turn], non_blocking=True)
        self.table_rows.write(tables)
        return n_fill

    def run(self, pieces, tier: int, fill=None, advance: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the tier's graph for these rows -> (logits [tier, V], argmax [tier]) static outputs. advance
        (plain decode rows, one per sequence, their tokens the argmax): the graph moves the rows on to their next
        step (ADVANCE), and the next call for exactly those rows stages nothing."""
        if not (advance and self.moved_to(pieces, tier, fill)):
            n_fill = self._fill(pieces, [p[0] for p in pieces], tier, fill, advance and self.advances)
            if n_fill:  # the drafts never visit the host: ids[fill_rows] = drafts[fill_src], on the device
                self.ids.index_copy_(0, self.fill_rows[:n_fill], fill[1].index_select(0, self.fill_src[:n_fill]))
        graph, (logits, argmax) = self.graph_for(pieces, tier)
        graph.replay()
        moved = advance and self.advances
        self._moved = (tier, [p[2][0] + 1 for p in pieces], argmax.data_ptr()) if moved else None
        self.ring_slot = self.next_slot if moved and self.ring is not None else None
        if moved:  # the graph moved its rows' ring slot on too (Advance)
            self.next_slot = (self.next_slot + 1) % RING_SLOTS
        return logits, argmax

    def ring_tokens(self, slot: int, n: int) -> list[int]:
        """The tokens of the first n rows of the step that wrote ring slot `slot` (once that step has completed)."""
        return self.ring[slot, :n].tolist()

    def moved_to(self, pieces, tier: int, fill) -> bool:
        """Did the last replay move its rows on to exactly these (the same tier, sequences in the same rows, one
        position on, each row's token from that replay's argmax, block tables unchanged)?"""
        moved = self._moved
        if moved is None or fill is None or moved[0] != tier or len(pieces) != len(moved[1]):
            return False
        same_rows = list(fill[0]) == list(fill[2]) == list(range(len(pieces)))
        # (a row whose next page lies past its table was not moved: the kernel's bound, and the host table's)
        in_tables = all(q // self.page_size < min(len(p[0]), self.tables.shape[1]) for q, p in zip(moved[1], pieces))
        return (same_rows and fill[1].data_ptr() == moved[2] and [p[2] for p in pieces] == [[q] for q in moved[1]]
                and in_tables and self.table_rows.unchanged([p[0] for p in pieces]))


PROPOSE_TIERS = (1, 2, 4, 8, 16, 32, 64)


class TableRows:
    """Writes block tables into rows of a static device table, skipping rows whose table is unchanged since the
    last write (a sequence's table changes only when it grows, a few pages at a time, or after a preemption, so in
    steady decoding nothing is copied). Entries past a row's table point at the trash page."""

    def __init__(self, tables: torch.Tensor):
        self.tables = tables
        self.trash = int(tables[0, 0])
        self.written: list[list[int] | None] = [None] * tables.shape[0]

    def unchanged(self, tables: list[list[int]]) -> bool:
        """Do the first rows hold exactly these tables already?"""
        return all(self.written[i] == tb for i, tb in enumerate(tables))

    def write(self, tables: list[list[int]], pad_to: int = 0) -> None:
        for i, tb in enumerate(tables):
            if self.written[i] != tb:
                self.tables[i, :len(tb)].copy_(to_device(tb, self.tables.device))
                old = len(self.written[i] or ())
                if old > len(tb):  # a longer table was here: its pages are another sequence's
                    self.tables[i, len(tb):old].fill_(self.trash)
                self.written[i] = list(tb)
        for i in range(len(tables), pad_to):  # padding rows of a propose tier point at the trash page
            if self.written[i] is not None:
                self.tables[i].fill_(self.trash)
                self.written[i] = None


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
        # pinned staging of (positions, slots, keys per row) and anchors: one host->device copy per round
        self.stage = pinned(torch.zeros(3 * b * self.gamma + b, dtype=torch.long))
        self.stage_np = self.stage.numpy()
        self.dev_stage = torch.zeros_like(self.stage, device=dev)
        rows = self.dev_stage[:3 * b * self.gamma].view(3, b * self.gamma)
        self.positions, self.slots, self.row_len = rows.unbind(0)
        self.anchors = self.dev_stage[3 * b * self.gamma:]
        self.stage_np[b * self.gamma:2 * b * self.gamma] = trash_page * self.page_size
        self.stage_np[2 * b * self.gamma:3 * b * self.gamma] = self.gamma
        self.dev_stage.copy_(self.stage)
        self.row_seq = torch.zeros(b * self.gamma, dtype=torch.long, device=dev)
        # row r belongs to sequence r // γ in every tier: the attention row blocks are fixed
        blocks = row_blocks([(i * self.gamma, (i + 1) * self.gamma) for i in range(b)])
        self.blocks_per_seq = len(blocks) // b
        self.block_lead = torch.tensor([a for a, _ in blocks], dtype=torch.int32, device=dev)
        self.block_rows = torch.tensor([n for _, n in blocks], dtype=torch.int32, device=dev)
        self.tables = torch.full((b, pages), trash_page, dtype=torch.long, device=dev)
        self.table_rows = TableRows(self.tables)
        self.trash_slot = trash_page * self.page_size
        self.graphs: dict[int, tuple] = {}
        # coupled drafts (spec/coupling.py) inside the graphs: per row (key base, temperature, anchor position);
        # temperature 0 is the argmax. Captured with the chain's coupled kernels when coupling.COUPLED is on
        self.couples = coupling.COUPLED and runner.drafter._fused_markov_ok(coupling=True)
        self.race = (torch.zeros(b, dtype=torch.long, device=dev), torch.zeros(b, dtype=torch.float32, device=dev),
                     torch.zeros(b, dtype=torch.long, device=dev))
        self.race_stage = (pinned(torch.zeros(b, dtype=torch.long)), pinned(torch.zeros(b, dtype=torch.float32)),
                           pinned(torch.zeros(b, dtype=torch.long)))  # host side of race, copied as _fill's stage
        self.race_live = False  # some row's temperature is above 0

    def _forward(self, b: int):
        n, nb = b * self.gamma, b * self.blocks_per_seq
        ctx = ForwardContext(positions=self.positions[:n], slot_mapping=self.slots[:n], block_tables=self.tables,
                             page_size=self.page_size, row_seq=self.row_seq[:n], row_kv_len=self.row_len[:n],
                             max_kv_len=self.max_positions, block_lead=self.block_lead[:nb],
                             block_rows=self.block_rows[:nb])
        race = tuple(t[:b] for t in self.race) if self.couples else None
        return self.runner.propose_rows(self.anchors[:b], ctx, lambda z, k: z.argmax(-1), greedy=True, coupling=race)

    @torch.inference_mode()
    def capture(self) -> None:
        b = max(self.tiers)  # row r belongs to sequence r // γ, for every tier
        self.row_seq[:b * self.gamma] = torch.arange(b, device=self.row_seq.device).repeat_interleave(self.gamma)
        self.graphs = capture_tiers(self.tiers, self._forward)
        if chain.STAGE_KERNEL:  # (compiled now, not in a request's first chained round)
            from sparkdec.ops.triton_chain import warm_up
            warm_up(self.gamma, self.tables, (self.anchors, self.positions, self.slots, self.row_len), self.page_size,
                    self.trash_slot)

    def tier_for(self, num_seqs: int) -> int | None:
        return next((b for b in self.tiers if b >= num_seqs), None)

    def run(self, tables: list[list[int]], anchors: list[int], anchor_positions: list[int], tier: int,
            coupled: list | None = None):
        """-> views of the static (drafts [tier, γ], z [tier, γ, V], confidences [tier, γ]); rows past len(anchors)
        are padding. coupled: per row, (key base, temperature) of its coupled race or None (spec/coupling.py)."""
        self._fill(tables, anchors, anchor_positions, tier)
        self._stage_race(coupled, anchor_positions, tier)
        graph, out = self.graphs[tier]
        graph.replay()
        return out

    def run_chained(self, tables: list[list[int]], first: torch.Tensor, drafts: torch.Tensor, vals: torch.Tensor,
                    simulate_al: int | None, tier: int):
        """run() for the round after the one whose verify is queued (spec/chain.py): that round's acceptance and
        this propose's rows are staged on the device (ops/triton_chain.stage_kernel: the values _fill would write), with
        no host read. first [T], drafts [n, γ], vals [3, n]: see ModelRunner.propose_chained."""
        self.table_rows.write(tables, pad_to=tier)
        out = (self.anchors, self.positions, self.slots, self.row_len)
        if first.device.type == "cuda" and chain.STAGE_KERNEL:
            from sparkdec.ops.triton_chain import stage_kernel as stage
        else:
            stage = chain.stage_reference
        stage(first, drafts, vals, self.tables, out, tier, self.page_size, self.trash_slot, simulate_al)
        self._stage_race(None, [], tier)
        graph, out = self.graphs[tier]
        graph.replay()
        return out

    def _stage_race(self, coupled: list | None, anchor_positions: list[int], tier: int) -> None:
        """The coupled rows' race into the static buffers (argmax rows: temperature 0); nothing to write when no
        row couples now or last time."""
        if coupled is None:
            if self.race_live:
                self.race[1].zero_()
                self.race_live = False
            return
        pad = tier - len(coupled)
        columns = coupling.race_columns(list(coupled) + [None] * pad, list(anchor_positions) + [0] * pad)
        for dst, src, col in zip(self.race, self.race_stage, columns):
            src.numpy()[:tier] = col
            dst[:tier].copy_(src[:tier], non_blocking=True)
        self.race_live = True

    def _fill(self, tables: list[list[int]], anchors: list[int], anchor_positions: list[int], tier: int) -> None:
        g, n, ps, bg = self.gamma, len(anchors), self.page_size, self.positions.shape[0]
        st = self.stage_np
        for i, (tb, s) in enumerate(zip(tables, anchor_positions)):
            r = i * g
            st[r:r + g] = range(s, s + g)  # positions
            st[bg + r:bg + r + g] = [tb[p // ps] * ps + p % ps for p in range(s, s + g)]  # slots
            st[2 * bg + r:2 * bg + r + g] = s + g  # a block row sees everything up to the block end
        st[n * g:tier * g] = 0
        st[bg + n * g:bg + tier * g] = self.trash_slot
        st[2 * bg + n * g:2 * bg + tier * g] = g
        st[3 * bg:3 * bg + n] = anchors
        st[3 * bg + n:3 * bg + tier] = 0
        self.dev_stage.copy_(self.stage, non_blocking=True)
        self.table_rows.write(tables, pad_to=tier)
