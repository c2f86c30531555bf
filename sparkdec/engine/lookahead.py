"""Plain decoding one step ahead: step k+1 is queued from step k's tokens on the device before the host reads step
k, so the host's scheduling, commits, staging and sampling launches overlap the device's forward instead of leaving
it idle. Sampled rows are drawn on the device (sampling.draw_tokens: the same race as the ordinary round's).

Used when every sequence of a decode-only batch decodes plainly (greedy or sampled, the fused sampler off). A sequence
whose limit (max_tokens or the context window) step k's token reaches gets no step k+1, so a request that ends at its
limit costs one forward per token. A step queued for a sequence that step k then finished otherwise (EOS, stop id or
string, abort) is computed and thrown away; its K/V goes to the sequence's own pages, which are released only after
it (the device runs in order). Any other batch (prompt chunks, speculation, new sequences) first drains the pending
step and the engine takes the ordinary round next call.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from sparkdec.engine.graphs import pinned
from sparkdec.engine.scheduler import Batch
from sparkdec.engine.sequence import Sequence, Status
from sparkdec.penalties import rewrites
from sparkdec.sampling import fused_sampler_on
from sparkdec.spec import processed
from sparkdec.spec.commit import commit_tokens


@dataclass
class PendingStep:
    seqs: list[Sequence]
    positions: list[int]  # each sequence's row position in this step
    tokens: torch.Tensor  # [n] the step's tokens on the device (the next step's inputs)
    host: torch.Tensor | None  # [n] their host copy, complete once `done` is (None: in the graphs' ring)
    done: torch.cuda.Event | None  # None: the copy is already complete (CPU)
    ring_slot: int | None = None  # the graphs' host ring slot the graph wrote the tokens to (graphs.RING_READBACK)
    epochs: list[int] = field(default_factory=list)  # each sequence's preemption count when the step was queued
    processed: list[int] = field(default_factory=list)  # rows processed on the device (their states follow the tokens)
    # id(seq) of those whose previous step's token their grammar refused: this step's row followed that token
    refused: set[int] = field(default_factory=set)
    # (seq, row, 1) of the guided ones drawn with a top-k: the ids each row keeps follow the states (processed.kept_ids)
    kept_asks: list = field(default_factory=list)


class Lookahead:
    def __init__(self, runner, decode):
        self.runner, self.decode = runner, decode
        self.pending: PendingStep | None = None
        self._host: list[torch.Tensor] = []  # two readback buffers: step k+1 is queued before step k is read
        self._flip = 0
        self.guided_checks = [0, 0]  # guided tokens checked as they were committed, and those refused

    def takes(self, batch: Batch, speculating) -> bool:
        """Does this batch decode one step ahead (decode-only, plain, every sequence in the pending step; sampled
        rows only with the ordinary sampler: the fused one draws each sequence's rows in a call of its own; no
        log-probabilities; logit processing only on the device: spec/processed.on_device)?"""
        if batch.prefill or not batch.decode:
            return False
        if any(speculating(s) or (not s.params.greedy and fused_sampler_on()) or s.logprobs is not None
               or (rewrites(s.params) and not (processed.DEVICE_PROCESSING and processed.on_device(s)))
               or (s.guide is not None and not self._checked(s))
               for s in batch.decode):
            return False  # (a step ahead reads no logits: log-probabilities and masked grammars take the round)
        return self.pending is None or all(any(s is p for p in self.pending.seqs) for s in batch.decode)

    @staticmethod
    def _checked(seq: Sequence) -> bool:
        """Can a guided sequence decode one step ahead: its rows unmasked, each token checked against its grammar as
        it is committed (spec/processed.GUIDED_CHECKED: greedy, an unfiltered draw, or a top-k one whose kept ids are
        read back with the token and checked too, outside the rounds a refusal masks), its grammar seldom refusing
        them (a refused token costs the step queued after it)?"""
        return (processed.GUIDED_CHECKED and seq.guide.fault is None and processed.chains_checked(seq)
                and (seq.params.greedy or processed.unfiltered(seq.params)
                     or (processed.checkable(seq.params) and seq.masked_rounds <= 0)))

    def step(self, batch: Batch) -> list[Sequence]:
        """Queue the next step for the batch, then commit the pending one -> sequences that changed."""
        prev = self.pending
        seqs = batch.decode
        for s in seqs:  # (a guided one's rows go unmasked: its grammar checks each token at its commit)
            s.grammar_checked = s.guide is not None
        if prev is None:  # the first step: inputs from the host
            positions = [s.anchor_position for s in seqs]
            pieces = [(s.block_table, [s.anchor], [p]) for s, p in zip(seqs, positions)]
            fill = None
        else:
            seqs = [s for s in seqs if s.room() > 1]  # step k's token ends the others (their limit): no step k+1
            if not seqs:
                return self.drain()
            where = {id(s): i for i, s in enumerate(prev.seqs)}
            src = [where[id(s)] for s in seqs]
            positions = [prev.positions[i] + 1 for i in src]
            pieces = [(s.block_table, [0], [p]) for s, p in zip(seqs, positions)]
            fill = (list(range(len(seqs))), prev.tokens, src)  # step k's tokens into step k+1's rows, on the device
        # the token at position p + 1 is drawn from the row at p, keyed on p + 1 (as the ordinary round draws it)
        rows = [j for j, s in enumerate(seqs) if rewrites(s.params)]  # (a grammar's rows go unmasked: _checked)
        draws = None if all(s.params.greedy for s in seqs) and not rows else [(s.params, s.seed, p + 1)
                                                                              for s, p in zip(seqs, positions)]
        process = self._processing(seqs, rows, prev, fill)
        asks = [(s, j, 1) for j, s in enumerate(seqs) if processed.keeps_checked(s)]
        self.pending = self._launch(seqs, positions, pieces, fill, draws, rows, process, asks)
        return self._commit(prev) if prev is not None else []

    def drain(self) -> list[Sequence]:
        """Commit the pending step (nothing new is queued) -> sequences that changed."""
        prev, self.pending = self.pending, None
        return self._commit(prev) if prev is not None else []

    @staticmethod
    def _processing(seqs, rows: list[int], prev: PendingStep | None, fill):
        """process for runner.decode_tokens: the processed sequences' rows, each after its output and, from the
        second step on, step k's token, still on the device (spec/processed.device_processing), or None."""
        if not rows:
            return None
        spans = [(seqs[j], j, 1, prev.tokens[fill[2][j]:fill[2][j] + 1] if prev is not None else None,
                  1 if prev is not None else 0) for j in rows]
        return processed.device_processing(spans)

    def _launch(self, seqs, positions, pieces, fill, draws, rows: list[int], process=None, asks=()) -> PendingStep:
        out = self.runner.decode_tokens(pieces, fill, draws, process, processed.kept_reader(asks) if asks else None)
        n = len(seqs)
        tokens = out[:n]  # [n]; out [n + m + sum k] also holds the processed rows' states, then the kept ids
        epochs = [s.preemptions for s in seqs]
        if out.device.type != "cuda":
            return PendingStep(seqs, positions, tokens, out, None, epochs=epochs, processed=rows, kept_asks=list(asks))
        slot = self.runner.tokens_ring_slot
        if slot is not None:  # the graph wrote the tokens into pinned host memory itself: no copy to queue
            done = torch.cuda.Event()
            done.record()
            assert not rows and not asks, "the ring holds tokens only"  # (draws, which states and kept ids need, do
            # not advance the graph's ring: runner.decode_tokens)
            return PendingStep(seqs, positions, tokens, None, done, slot, epochs)
        if not self._host or self._host[0].numel() < out.numel():
            self._host = [pinned(torch.zeros(max(out.numel(), 64), dtype=torch.long)) for _ in range(2)]
        self._flip ^= 1
        host = self._host[self._flip][:out.numel()]
        host.copy_(out, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return PendingStep(seqs, positions, tokens, host, done, epochs=epochs, processed=rows, kept_asks=list(asks))

    def _allowed(self, seq: Sequence, token: int, kept: list[list[int]] | None = None) -> bool:
        """Does a guided sequence's grammar allow this step's token, and each id its top-k kept (kept: [[ids]], for a
        processed.keeps_checked one) (spec/processed.failed_checks' check)? Where it does not, the token is not
        committed and the step queued after it, which followed it, is thrown away for the sequence: the ordinary
        round (a failure keeps it off this path: _checked) computes the row again, masked (the same row bits: the
        same token as masking it here would have drawn)."""
        if not processed.under_grammar(seq):
            return True
        ok = processed.passes_check(seq, [], [token], kept)  # (a top-k row queued before its grammar took over,
        # with no kept ids asked for, is refused: masked then)
        processed.note_check(seq, not ok, self.guided_checks)
        if not ok and self.pending is not None:
            self.pending.refused.add(id(seq))
        return ok

    def _commit(self, step: PendingStep) -> list[Sequence]:
        if step.done is not None:
            step.done.synchronize()
        if step.ring_slot is not None:  # (the step after this one writes another slot: graphs.RING_SLOTS)
            tokens = self.runner.graphs.ring_tokens(step.ring_slot, len(step.seqs))
        else:
            tokens = step.host.tolist()
        n, m = len(step.seqs), len(step.processed)
        dead = processed.dead_of([(step.seqs[j], j, 1) for j in step.processed], tokens[n:n + m])
        kept = processed.kept_lists(step.kept_asks, tokens[n + m:]) if step.kept_asks else {}
        touched = []
        for seq, pos, token, epoch in zip(step.seqs, step.positions, tokens[:n], step.epochs):
            if seq.status != Status.RUNNING or seq.finish_reason is not None or seq.preemptions != epoch:
                continue  # finished by an earlier step, aborted or preempted since: this step's token is thrown away
            if id(seq) in step.refused:  # (its row followed a token its grammar refused: thrown away, see _allowed)
                continue
            if id(seq) in dead:  # its row had no token to choose (spec/processed.py)
                processed.dead_end(seq, dead[id(seq)][1])
                touched.append(seq)
                continue
            if not self._allowed(seq, token, kept.get(id(seq))):
                continue  # (refused: its next round computes this row again, masked)
            commit_tokens(seq, [token], self.decode)
            seq.num_computed = pos + 1
            touched.append(seq)
        return touched
