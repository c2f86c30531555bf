"""Scheduler: admits waiting requests while pages last, splits prompts into chunks, picks each step's batch."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sparkdec.engine.kv_cache import BlockManager
from sparkdec.engine.sequence import Sequence, Status
from sparkdec.errors import CapacityError


@dataclass(slots=True)
class Batch:
    prefill: list[tuple[Sequence, int, int]] = field(default_factory=list)  # (seq, start, stop) prompt chunk
    decode: list[Sequence] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


class Scheduler:
    def __init__(self, blocks: BlockManager, max_num_seqs: int, max_batched_tokens: int, headroom: int):
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_batched_tokens = max_batched_tokens
        self.headroom = headroom  # positions a round may write past the last committed token (drafter block)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def lifetime_positions(self, seq: Sequence) -> int:
        # NOTE: pages for a request's whole life are reserved at admission, so a running request never
        # waits for memory and nothing is ever preempted.
        return min(len(seq.prompt_ids) + seq.params.max_tokens, seq.max_model_len) + self.headroom

    def add(self, seq: Sequence) -> None:
        need = self.blocks.pages_for(self.lifetime_positions(seq))
        if need > self.blocks.num_pages:
            raise CapacityError(f"request needs {need} KV pages (prompt {len(seq.prompt_ids)} + max_tokens "
                                f"{seq.params.max_tokens}) but the cache holds {self.blocks.num_pages}; "
                                "lower max_tokens or start the engine with a larger KV cache")
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.blocks.can_reserve(seq.block_table, self.lifetime_positions(seq)):
                break
            self.blocks.reserve(seq.block_table, self.lifetime_positions(seq))
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)

    def schedule(self, rows_per_decode: int) -> Batch:
        self._admit()
        batch = Batch(decode=[s for s in self.running if s.prefill_done])
        budget = self.max_batched_tokens - rows_per_decode * len(batch.decode)
        for seq in self.running:
            if seq.prefill_done or budget <= 0:
                continue
            stop = min(len(seq.prompt_ids), seq.num_computed + budget)
            batch.prefill.append((seq, seq.num_computed, stop))
            budget -= stop - seq.num_computed
        return batch

    def finish(self, seq: Sequence) -> None:
        seq.status = Status.FINISHED
        self.blocks.release(seq.block_table)
        if seq in self.running:
            self.running.remove(seq)

    def abort(self, request_id: str) -> Sequence | None:
        for seq in list(self.waiting):
            if seq.request_id == request_id:
                self.waiting.remove(seq)
                seq.status, seq.finish_reason = Status.FINISHED, "abort"
                return seq
        for seq in self.running:
            if seq.request_id == request_id:
                seq.finish_reason = "abort"
                self.finish(seq)
                return seq
        return None
