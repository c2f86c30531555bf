"""Scheduler: admits waiting requests while pages last, grows their pages as they decode (preempting the newest
when pages run out), splits prompts into chunks, picks each step's batch."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sparkdec.engine import prefix_cache
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


# pages a decoding sequence is given at a time when free: a graph restages a row's block table when it changes, so
# growing a page at a time would restage every page_size tokens
GROW_PAGES = 4


class Scheduler:
    def __init__(self, blocks: BlockManager, max_num_seqs: int, max_batched_tokens: int, headroom: int,
                 prefix_caching: bool = False):
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_batched_tokens = max_batched_tokens
        self.headroom = headroom  # positions a round may write past the last committed token (drafter block)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the newest is preempted first
        self.watermark = max(1, blocks.num_pages // 100)  # pages admission leaves free for growth
        self.num_preemptions = 0
        self.prefix_caching = prefix_caching  # engine/prefix_cache.py
        self.prefix_queries = self.prefix_hits = 0  # prompt tokens looked up at admission, and found cached

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
            hit = self.blocks.cached_pages(prefix_cache.reusable_keys(seq, self.blocks.page_size)) \
                if self.prefix_caching else []
            taken = sum(1 for p in hit if self.blocks.refs[p] == 0)  # cached pages no table held: out of num_free
            need = self.blocks.pages_for(self.next_positions(seq)) - len(hit) + taken
            if need + (self.watermark if self.running else 0) > self.blocks.num_free:
                break
            if self.prefix_caching:  # (a preempted request looks its prompt up again)
                self.prefix_queries += len(seq.prompt_ids)
                self.prefix_hits += len(hit) * self.blocks.page_size
            self.blocks.share(seq.block_table, hit)  # its prefill starts after them
            seq.registered_pages, seq.num_computed = len(hit), len(hit) * self.blocks.page_size
            self.blocks.reserve(seq.block_table, self.next_positions(seq))
            self.waiting.popleft()
            seq.status = Status.RUNNING
            self.running.append(seq)

    def _pages_wanted(self, seq: Sequence) -> int:
        """Pages seq lacks for its next rounds: none in most steps (the first test)."""
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
        reach, page = 2 * self.headroom, self.blocks.page_size
        grown = []
        for seq in list(self.running):
            if seq.num_tokens + reach <= len(seq.block_table) * page:
                continue  # most steps: the table covers the next rounds
            if seq.status is not Status.RUNNING or not seq.prefill_done or not self._pages_wanted(seq):
                continue
            need = self.next_positions(seq)
            while not self.blocks.can_reserve(seq.block_table, need) and self._preempt(self.running[-1]) is not seq:
                pass
            if seq.status is Status.RUNNING:
                self.blocks.reserve(seq.block_table, need)
                grown.append(seq)
        # then a few pages ahead, only from what every sequence's needs left free (pages_short stays exact: no
        # preemption comes of these)
        for seq in grown:
            if seq.status is Status.RUNNING:
                ahead = min(self.next_positions(seq) + (GROW_PAGES - 1) * page, self.lifetime_positions(seq))
                if self.blocks.can_reserve(seq.block_table, ahead):
                    self.blocks.reserve(seq.block_table, ahead)

    def _register(self, seq: Sequence) -> None:
        """Register the sequence's newly computed full prompt pages in the prefix cache."""
        done = prefix_cache.computed_prompt_pages(seq, self.blocks.page_size) if self.prefix_caching else 0
        if done > seq.registered_pages:
            keys = prefix_cache.page_keys(seq, self.blocks.page_size)
            for i in range(seq.registered_pages, done):
                self.blocks.register(seq.block_table[i], keys[i])
            seq.registered_pages = done

    def _preempt(self, seq: Sequence) -> Sequence:
        self._register(seq)
        self.blocks.release(seq.block_table)
        self.running.remove(seq)
        seq.status, seq.num_computed, seq.registered_pages = Status.WAITING, 0, 0
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)
        return seq

    def schedule(self, rows_per_decode: int) -> Batch:
        if self.prefix_caching:
            for seq in self.running:
                if seq.registered_pages < len(seq.prompt_ids) // self.blocks.page_size:  # (some not registered yet)
                    self._register(seq)
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
        self._register(seq)
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
