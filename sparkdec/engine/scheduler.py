"""Scheduler: admits waiting requests while pages last, grows their pages as they decode (preempting the newest
when pages run out), splits prompts into chunks, picks each step's batch."""
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
        self.running: list[Sequence] = []  # in admission order: the newest is preempted first
        self.watermark = max(1, blocks.num_pages // 100)  # pages admission leaves free for growth
        self.num_preemptions = 0

    def lifetime_positions(self, seq: Sequence) -> int:
        """The most positions a request may ever write: its whole life (prompt + max_tokens, the window)."""
        return min(len(seq.prompt_ids) + seq.params.max_tokens, seq.max_model_len) + self.headroom

    def next_positions(self, seq: Sequence) -> int:
        """The positions the next two rounds may write: a round verifies up to headroom rows past the anchor, and
        a greedy round queues the next propose (a block past its accepted tokens) before the host reads it back."""
        return min(seq.num_tokens + 2 * self.headroom, self.lifetime_positions(seq))

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
        """Admit from the front of the queue (preempted sequences are put back there) while a batch slot and the
        pages of the sequence's next rounds are free, leaving the watermark free for the running ones to grow."""
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            need = self.blocks.pages_for(self.next_positions(seq)) - len(seq.block_table)
            if need + (self.watermark if self.running else 0) > self.blocks.num_free:
                break
            self.blocks.reserve(seq.block_table, self.next_positions(seq))
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)

    def _pages_wanted(self, seq: Sequence) -> int:
        """Pages seq lacks for its next rounds: none in most steps (the first test), as tables grow a page at a time."""
        if seq.num_tokens + 2 * self.headroom <= len(seq.block_table) * self.blocks.page_size:
            return 0
        return max(self.blocks.pages_for(self.next_positions(seq)) - len(seq.block_table), 0)

    def pages_short(self) -> bool:
        """Would the next schedule preempt? (The engine first finishes a step it queued ahead.)"""
        need = sum(self._pages_wanted(s) for s in self.running if s.prefill_done)
        return need > self.blocks.num_free

    def _grow(self) -> None:
        """Give every decoding sequence the pages its next rounds may write, oldest first. When pages run out, the
        newest running sequence gives its pages back and waits at the front of the queue; when admitted again it
        recomputes its context (prompt and output so far) and goes on where it stopped."""
        covered = 2 * self.headroom, self.blocks.page_size
        for seq in list(self.running):
            if seq.num_tokens + covered[0] <= len(seq.block_table) * covered[1]:
                continue  # most steps (tables grow a page at a time): the one test made
            if seq.status is not Status.RUNNING or not seq.prefill_done or not self._pages_wanted(seq):
                continue
            need = self.next_positions(seq)
            while not self.blocks.can_reserve(seq.block_table, need) and self._preempt(self.running[-1]) is not seq:
                pass
            if seq.status is Status.RUNNING:
                self.blocks.reserve(seq.block_table, need)

    def _preempt(self, seq: Sequence) -> Sequence:
        self.blocks.release(seq.block_table)
        self.running.remove(seq)
        seq.status, seq.num_computed = Status.WAITING, 0
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        return seq

    def schedule(self, rows_per_decode: int) -> Batch:
        self._grow()
        self._admit()
        batch = Batch()
        prefilling = []
        for seq in self.running:
            (batch.decode if seq.prefill_done else prefilling).append(seq)
        budget = self.max_batched_tokens - rows_per_decode * len(batch.decode)
        for seq in prefilling:
            if budget <= 0:
                break
            # a recomputed context is chunked at the prompt's end: prompt rows and generated rows run apart
            end = len(seq.prompt_ids) if seq.num_computed < len(seq.prompt_ids) else seq.context_len
            stop = min(end, seq.num_computed + budget)
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
