"""ModelRunner: owns the models and their KV caches, packs rows into one forward, runs target and drafter."""
from __future__ import annotations

import functools

import torch

from sparkdec.engine.context import ForwardContext, build_context
from sparkdec.engine.graphs import pinned
from sparkdec.engine.kv_cache import KVCache
from sparkdec.engine.sampler_graphs import SamplerGraphs
from sparkdec.sampling import draw_tokens
from sparkdec.spec.chain import accept_reference
from sparkdec.spec.coupling import race_tensors
from sparkdec.staging import to_device


def apply_fill(ids: torch.Tensor, fill) -> None:
    """ids[rows] = values[src] on the device (drafts into their verify rows)."""
    if fill is not None and fill[0]:
        rows, values, src = fill
        dev = ids.device
        ids[to_device(rows, dev)] = values[to_device(src, dev)]


class LogitRows:
    """Rows of a logits tensor picked lazily: rows[k] is logits[index[k]] (a view). Greedy rounds never touch
    the logits, so they never pay for a gather."""

    def __init__(self, logits: torch.Tensor, index: list[int]):
        self.logits, self.index = logits, index

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return LogitRows(self.logits, self.index[k])
        return self.logits[self.index[k]]

    def consecutive(self) -> bool:
        """Are the rows consecutive (as one sequence's verify rows are), so that tensor() is a view?"""
        a = self.index[0] if self.index else 0
        return self.index == list(range(a, a + len(self.index)))

    def tensor(self) -> torch.Tensor:
        """The rows as one [R, V] tensor (a view when they are consecutive)."""
        if self.consecutive():
            a = self.index[0] if self.index else 0
            return self.logits[a:a + len(self.index)]
        return self.logits[torch.tensor(self.index, device=self.logits.device)]


def rows_tensor(logits) -> torch.Tensor:
    """Logit rows as one [R, V] tensor, whether a tensor or LogitRows."""
    return logits.tensor() if isinstance(logits, LogitRows) else logits


class ModelRunner:
    def __init__(self, target, target_cfg, drafter=None, draft_cfg=None, *, num_pages: int, page_size: int,
                 max_positions: int, device):
        self.target, self.target_cfg = target, target_cfg
        self.drafter, self.draft_cfg = drafter, draft_cfg
        self.device = torch.device(device)
        self.page_size = page_size
        dtype = target.lm_head.weight.dtype
        tc = target_cfg
        # NOTE: one page past the allocator's range is a trash page for the padding rows of CUDA graphs
        self.kv = KVCache(tc.num_hidden_layers, num_pages + 1, page_size, tc.num_key_value_heads, tc.head_dim, dtype, device)
        self.trash_page = num_pages
        self.max_positions = max_positions
        self.graphs = None
        self.tokens_ring_slot: int | None = None  # see decode_tokens
        self.propose_graphs = None
        self.sampler_graphs = None  # races over the target graphs' logits (engine/sampler_graphs.py)
        self._readback: dict = {}  # pinned host buffers of the round's one read, by dtype
        target.setup_rope(max_positions, device)
        self.tap_layers: tuple[int, ...] = ()
        self.draft_kv = None
        if drafter is not None:
            lc = draft_cfg.layers
            self.draft_kv = KVCache(lc.num_hidden_layers, num_pages + 1, page_size, lc.num_key_value_heads, lc.head_dim,
                                    dtype, device)
            drafter.setup_rope(max_positions, device)
            self.tap_layers = draft_cfg.target_layer_ids

    def fuse_weights(self) -> None:
        """CUDA path: fused qkv and gate_up products in every target and drafter layer."""
        layers = list(self.target.model.layers) + (list(self.drafter.layers) if self.drafter is not None else [])
        for layer in layers:
            layer.fuse()
        from sparkdec.ops import gluon_gemv
        from sparkdec.ops.tiled_weights import set_tiled_

        # the target's o, gate_up and down weights (the drafter's too with gluon_gemv.TILED_DRAFTER) stored tile by
        # tile in place where the Gluon products run them (gluon_gemv.TILED_SHAPES); row-major again where not, so
        # that engines built on shared models agree
        drafted = list(self.drafter.layers) if self.drafter is not None else []
        for group, tiled in ((self.target.model.layers, True), (drafted, gluon_gemv.TILED_DRAFTER)):
            for w in (w for layer in group for w in layer.tileable_weights()):
                set_tiled_(w, gluon_gemv.tiles_for(w) if tiled else None)

    def enable_graphs(self, max_seqs: int) -> None:
        """Capture verify and propose graphs; if capture fails, warn and stay eager (same results, slower)."""
        from sparkdec.engine.graphs import ProposeGraphs, TargetGraphs

        try:
            self.graphs = TargetGraphs(self, max_seqs, self.max_positions, self.trash_page)
            self.graphs.capture()
            self.sampler_graphs = SamplerGraphs()
            if self.drafter is not None:
                self.propose_graphs = ProposeGraphs(self, max_seqs, self.max_positions, self.trash_page)
                self.propose_graphs.capture()
        except RuntimeError as exc:  # torch.AcceleratorError is a RuntimeError
            import warnings

            warnings.warn(f"CUDA graph capture failed ({exc}); running eagerly")
            self.graphs = self.propose_graphs = self.sampler_graphs = None
            torch.cuda.synchronize()

    def forward_rows(self, ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """Target forward + drafter context write + logits of every row: [T, V] float32."""
        return self.target.logits(self.forward_rows_hidden(ids, ctx))

    @torch.inference_mode()
    def verify(self, pieces, logit_rows: list[int], fill=None, readback: tuple = (), prompt_from: int | None = None,
               mark=None, before_read=None, draws=None, process=None, kept=None):
        """Packed causal forward of all pieces -> (logits [R, V] of logit_rows (a tensor, or LogitRows when a graph
        ran), host lists).
        fill = (rows, values [N] device, src [N]): token ids written on the device into those packed rows
        (the drafts, which never visit the host before the verify). The host lists are the argmax of the
        logit rows followed by each readback tensor, flattened: one device->host read for all of them.
        prompt_from: index of the first piece that is a prompt chunk (all later pieces are too).
        mark: called once the forward is queued, before the readback (benchmarks record a CUDA event there).
        before_read(first): called with the argmax of the packed rows (device) once the readback is queued and
        before waiting for it (spec/chain.py queues the next propose there).
        draws: per logit row (params, seed, position of the token): sampled rows then read back, and hand
        before_read, their drawn token (sampling.draw_tokens) in place of the argmax.
        process(rows [R, V]) -> (row indices, those rows processed, their states [m]): logit processing on the
        device before the draws (spec/processed.device_processing); the states are read back after readback's.
        kept(rows, at, x) -> [m]: with draws, values read back last (spec/processed.kept_reader: the ids a top-k
        keeps in checked guided rows), given the rows as drawn (at, x: those process rewrote, or None).
        Replays a CUDA graph when one fits and no prompt rows are in the forward (prompt rows always take the
        prefill attention kernel, eagerly; graphs hold generated rows only)."""
        num_tokens = sum(len(p[1]) for p in pieces)
        graphs = self.graphs if prompt_from is None else None
        tier = graphs.tier_for(num_tokens, len(pieces)) if graphs is not None else None
        if tier is not None:
            logits_all, argmax_all = self.graphs.run(pieces, tier, fill)
            logits, first = LogitRows(logits_all, logit_rows), argmax_all[:num_tokens]  # no gather on the device
        else:
            idx = to_device(logit_rows, self.device)
            hidden, _ = self.target_forward(pieces, fill, prompt_from)
            logits = self.logits(hidden[idx])
            first = logits.argmax(-1)
        if draws is not None:
            static = tier is not None and logits.consecutive()  # (rows a view of the graph's logits)
            drawn, extra = _drawn(logits.tensor() if tier is not None else logits, draws, process, kept,
                                  self._graph_race(logits_all) if static else None)
            readback = tuple(readback) + extra
            if tier is not None:  # first is indexed by packed row there
                at = to_device(logit_rows, self.device)
                first = first.clone().index_copy_(0, at, drawn)
            else:
                first = drawn
        if mark is not None:
            mark()
        # NOTE: token ids < 2**24 are exact in float32, so ids and confidences travel in one tensor
        flat = torch.cat([first.float()] + [t.float().reshape(-1) for t in readback]) if readback else first
        host = self._read(flat, lambda: before_read(first) if before_read is not None else None)
        at = first.numel()
        out = [[int(host[r]) for r in logit_rows] if tier is not None else [int(x) for x in host[:at]]]
        for t in readback:
            out.append(host[at:at + t.numel()])
            at += t.numel()
        return logits, out

    def _read(self, flat: torch.Tensor, meanwhile) -> list:
        """flat's values on the host; meanwhile() runs after the copy is queued, before waiting for it (its work
        queues behind the copy, so the wait does not include it)."""
        if flat.device.type != "cuda":
            meanwhile()
            return flat.tolist()
        buf = self._readback.get(flat.dtype)
        if buf is None or buf.numel() < flat.numel():
            buf = self._readback[flat.dtype] = pinned(torch.empty(max(flat.numel(), 4096), dtype=flat.dtype))
        host = buf[:flat.numel()]
        host.copy_(flat, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        meanwhile()
        done.synchronize()
        return host.tolist()

    @torch.inference_mode()
    def decode_tokens(self, pieces, fill=None, draws=None, process=None, kept=None) -> torch.Tensor:
        """One row per piece (plain decoding) -> each row's token [n], on the device; no host read. draws: per row
        (params, seed, position of the token) when some row samples or is processed (sampling.draw_tokens), else
        the argmax: a graph's static output when a graph ran, valid until that graph replays again. process, kept:
        as verify's, with draws; their values follow the tokens as ids ([n + m + sum k])."""
        n = len(pieces)
        tier = self.graphs.tier_for(n, n) if self.graphs is not None else None
        self.tokens_ring_slot = None  # the host ring slot the graph wrote these tokens to (graphs.RING_READBACK)
        if tier is not None:
            whole, argmax = self.graphs.run(pieces, tier, fill, advance=not draws)  # (greedy: rows moved on)
            self.tokens_ring_slot = self.graphs.ring_slot
            logits = whole[:n]
        else:
            hidden, _ = self.target_forward(pieces, fill)
            logits = self.logits(hidden)
            argmax = None
        if not draws:
            return argmax[:n] if argmax is not None else logits.argmax(-1)
        drawn, extra = _drawn(logits, draws, process, kept, self._graph_race(whole) if tier is not None else None)
        return torch.cat([drawn, *(t.long() for t in extra)]) if extra else drawn  # (kept's ids: exact in float32)

    def _graph_race(self, whole: torch.Tensor):
        """draw_tokens' race over rows of whole [tier, V], a target graph's static logits: the sampler graphs'."""
        return functools.partial(self.sampler_graphs.race, whole=whole) if self.sampler_graphs is not None else None

    @torch.inference_mode()
    def target_forward(self, pieces: list[tuple[list[int], list[int], list[int]]], fill=None,
                       prompt_from: int | None = None) -> tuple[torch.Tensor, ForwardContext]:
        """pieces: per sequence (block_table, token ids, positions), causal rows; pieces from prompt_from on are
        prompt chunks. Returns hidden [T, d].
        Tap rows go straight into the drafter's context cache at their positions (DESIGN §3.3)."""
        ctx = build_context([(bt, pos, False) for bt, _, pos in pieces], self.page_size, self.device, prompt_from)
        ids = torch.tensor([t for _, toks, _ in pieces for t in toks], dtype=torch.long, device=self.device)
        apply_fill(ids, fill)
        return self.forward_rows_hidden(ids, ctx), ctx

    def forward_rows_hidden(self, ids: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """Target forward + drafter context write -> final-normed hidden [T, d]."""
        hidden, taps = self.target(ids, ctx, self.kv.layers, self.tap_layers)
        if self.drafter is not None:
            self.drafter.write_context(taps, ctx.positions, ctx.slot_mapping, self.draft_kv.layers)
        return hidden

    @torch.inference_mode()
    def logits(self, hidden_rows: torch.Tensor) -> torch.Tensor:
        return self.target.logits(hidden_rows)

    def propose_rows(self, anchors: torch.Tensor, ctx: ForwardContext, pick, greedy: bool = False, coupling=None):
        """Block [x0, M, ..., M] per sequence (ctx holds its rows) -> drafts [B, γ], z [B, γ, V], conf [B, γ].
        coupling: the coupled rows' race (DSparkDrafter.markov_chain)."""
        gamma, b = self.draft_cfg.block_size, anchors.shape[0]
        h = self.drafter.block_hidden_rows(self.drafter.embed_block(anchors), ctx, self.draft_kv.layers)  # [B*γ, d]
        return self.drafter.markov_chain(h.view(b, gamma, -1), anchors, pick, greedy, coupling)

    @torch.inference_mode()
    def propose_chained(self, tables: list[list[int]], first: torch.Tensor, drafts: torch.Tensor, vals: torch.Tensor,
                        simulate_al: int | None = None):
        """The greedy propose of the round after the one whose verify is queued (spec/chain.py), from that round's
        outcome on the device: first [T] each verify row's token, drafts [n, γ], vals [3, n] (anchor rows, drafts
        verified, anchor positions). With a graph, the acceptance and the graph's rows are staged in one launch
        (ops/triton_chain.py), with no host read; without one, the eager propose (reads the anchors back)."""
        n = len(tables)
        tier = self.propose_graphs.tier_for(n) if self.propose_graphs is not None else None
        if tier is not None:
            drafts, z, conf = self.propose_graphs.run_chained(tables, first, drafts, vals, simulate_al, tier)
            return drafts[:n], z[:n], conf[:n]
        anchors, positions = accept_reference(first, drafts, vals, simulate_al)
        return self.propose(tables, anchors.tolist(), positions.tolist(), lambda z, k: z.argmax(-1), greedy=True)

    @torch.inference_mode()
    def propose(self, tables: list[list[int]], anchors: list[int], anchor_positions: list[int], pick,
                greedy: bool = False, coupled: list | None = None):
        """One drafter forward over all sequences: block [x0, M, ..., M] at s..s+γ-1 (spec §3).
        Returns drafts [B, γ] (device), z [B, γ, V] float32, confidences [B, γ] float32.
        greedy: pick is the argmax but for the coupled rows; coupled: per row, (key base, temperature) of its
        coupled race (spec/coupling.py) or None. A greedy propose replays a CUDA graph when one fits."""
        graphs = self.propose_graphs
        tier = graphs.tier_for(len(anchors)) if greedy and graphs is not None else None
        if tier is not None and (coupled is None or graphs.couples):
            drafts, z, conf = graphs.run(tables, anchors, anchor_positions, tier, coupled)
            n = len(anchors)
            return drafts[:n], z[:n], conf[:n]
        gamma = self.draft_cfg.block_size
        rows = [(bt, list(range(s, s + gamma)), True) for bt, s in zip(tables, anchor_positions)]
        ctx = build_context(rows, self.page_size, self.device)
        coupling = race_tensors(coupled, anchor_positions, self.device) if coupled else None
        return self.propose_rows(torch.tensor(anchors, dtype=torch.long, device=self.device), ctx, pick, greedy,
                                 coupling)


def _drawn(rows: torch.Tensor, draws, process, kept=None, race=None) -> tuple[torch.Tensor, tuple]:
    """Each row's drawn token [R] (sampling.draw_tokens, with its race) -> (tokens, extra): the rows process rewrites
    (spec/processed.device_processing) drawn from their processed copies (only those rows are copied), extra their
    states [m] if any, then kept's values if asked (ModelRunner.verify)."""
    tokens, extra, at, x = draw_tokens(rows, draws, race), (), None, None
    if process is not None:
        at, x, states = process(rows)
        tokens = tokens.index_copy(0, to_device(at, rows.device), draw_tokens(x, [draws[r] for r in at]))
        extra = (states,)
    return tokens, extra + ((kept(rows, at, x),) if kept is not None else ())
