"""The one thread that owns the engine: drains add/abort commands, steps the batch, publishes per-request
snapshots to asyncio waiters (the engine is not thread-safe; nothing else may call into it)."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from sparkdec.engine.sequence import SpecStats
from sparkdec.sampling import SamplingParams
from sparkdec.server.stats_log import StatsLog

log = logging.getLogger("sparkdec.server")


@dataclass(frozen=True, slots=True)
class Entries:
    """The first `count` entries of a list the engine thread only appends to: a snapshot's view, with no copy."""

    items: list
    count: int

    def since(self, start: int) -> list:
        return self.items[start:self.count]


@dataclass(slots=True)
class Snapshot:
    """A request's state after one engine step (immutable values, or views of lists the engine only appends to:
    safe to hand across threads)."""

    text: str
    num_tokens: int
    finish_reason: str | None
    spec: dict | None = None  # speculative stats, on the final snapshot
    error: str | None = None
    error_type: str = "server_error"  # invalid_request_error: the request's own (a grammar with no way on)
    stats: SpecStats | None = None  # a copy of the request's counters, on the final snapshot (merged across choices)
    logprobs: Entries | None = None  # sequence.logprobs so far, when the request asked for them
    prompt_logprobs: tuple | None = None  # sequence.prompt_logprobs once the prompt is scored, when asked for


@dataclass(eq=False)
class RequestHandle:
    """The asyncio side of one request. Updates coalesce: a slow reader sees only the latest snapshot."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    added: asyncio.Future
    guide: object = None  # its grammar matcher, built off the engine thread (LLMEngine.guide_for)
    latest: Snapshot | None = None
    done: bool = False
    _event: asyncio.Event = field(default_factory=asyncio.Event)

    def _publish(self, snap: Snapshot) -> None:  # runs on the event loop
        self.latest = snap
        self.done = snap.finish_reason is not None
        self._event.set()

    async def next(self) -> Snapshot:
        """Wait for a snapshot newer than the last one returned."""
        await self._event.wait()
        self._event.clear()
        return self.latest


@dataclass(slots=True)
class _Tracked:
    handle: RequestHandle
    seq: object
    spec: tuple = (0, 0, 0, None, 0)
    tokens: int = 0
    ttft_seen: bool = False
    prompt_logprobs: tuple | None = None  # copied once, when the prompt has been scored


class EngineLoop:
    def __init__(self, engine, metrics=None, idle_wait_s: float = 1.0):
        self.engine, self.metrics, self.idle_wait_s = engine, metrics, idle_wait_s
        self.stats = StatsLog(engine) if metrics is not None else None  # (the periodic stats line)
        self._cmds: deque = deque()
        self._wake = threading.Event()
        self._stop = False
        self._live: dict[str, _Tracked] = {}
        self._thread = threading.Thread(target=self._run, name="sparkdec-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, request_id: str, prompt_ids: list[int], params: SamplingParams, guide=None) -> RequestHandle:
        """Send a request to the engine thread; its `added` future resolves when the engine takes it, or raises the
        engine's SparkdecError when it refuses it (bad params, capacity). The engine thread takes every command sent
        before its next step. guide: prepare_guide's matcher for a guided request."""
        loop = asyncio.get_running_loop()
        handle = RequestHandle(request_id, prompt_ids, params, loop, loop.create_future(), guide)
        self._send(("add", handle))
        return handle

    async def prepare_guide(self, prompt_ids: list[int], params: SamplingParams):
        """A guided request's matcher, its grammar compiled on a worker thread (a new grammar can take a while to
        compile; the engine thread goes on stepping the requests in flight); None for other requests. Raises the
        engine's InvalidSamplingParamsError for a grammar that does not compile."""
        if not params.guided:
            return None
        return await asyncio.to_thread(self.engine.guide_for, prompt_ids, params)

    def abort(self, request_id: str) -> None:
        self._send(("abort", request_id))

    def _send(self, cmd) -> None:
        self._cmds.append(cmd)
        self._wake.set()

    # ---- engine thread ----
    def _run(self) -> None:
        while not self._stop:
            try:
                self._once()
            except Exception as exc:  # an engine bug must not hang every client: fail the batch, keep serving
                log.exception("engine step failed; failing the requests in flight")
                self._fail_all(f"internal engine error: {type(exc).__name__}: {exc}")

    def _once(self) -> None:
        self._wake.clear()
        while self._cmds:
            self._command(self._cmds.popleft())
        if not self.engine.has_unfinished():
            self._wake.wait(self.idle_wait_s)
            return
        for seq in self.engine.step():
            self._publish(seq)
        if self.stats is not None:
            self.stats.step(*self.metrics.totals)

    def _command(self, cmd) -> None:
        kind, arg = cmd
        if kind == "abort":
            tracked = self._live.get(arg)
            if tracked is not None:
                self.engine.abort(arg)
                self._publish(tracked.seq)
            return
        handle: RequestHandle = arg
        try:
            seq = self.engine.add_request(handle.prompt_ids, handle.params, request_id=handle.request_id,
                                          guide=handle.guide)
        except Exception as exc:
            handle.loop.call_soon_threadsafe(_set_exception, handle.added, exc)
            return
        self._live[handle.request_id] = _Tracked(handle, seq)
        if self.metrics:
            self.metrics.prompt_tokens.inc(len(handle.prompt_ids))
            self.metrics.totals[0] += len(handle.prompt_ids)
        handle.loop.call_soon_threadsafe(_set_result, handle.added, None)

    def _publish(self, seq, error: str | None = None) -> None:
        tracked = self._live.get(seq.request_id)
        if tracked is None:
            return
        error_type = "server_error"
        if error is None and seq.error is not None:
            error, error_type = seq.error, "invalid_request_error" if seq.error_own else "server_error"
        finish = seq.finish_reason if error is None else "error"
        spec = stats = None
        if finish is not None:
            spec, stats = {"enabled": self.engine.speculating(seq), **seq.spec.as_dict()}, seq.spec.copy()
        logprobs = Entries(seq.logprobs, len(seq.logprobs)) if seq.logprobs is not None else None
        if tracked.prompt_logprobs is None and seq.prompt_logprobs is not None and seq.prefill_done:
            tracked.prompt_logprobs = tuple(seq.prompt_logprobs)
        snap = Snapshot(seq.text, len(seq.output_ids), finish, spec, error, error_type, stats, logprobs,
                        tracked.prompt_logprobs)
        if self.metrics:
            self._observe(tracked, seq, finish)
        if finish is not None:
            del self._live[seq.request_id]
        tracked.handle.loop.call_soon_threadsafe(tracked.handle._publish, snap)

    def _observe(self, tracked: _Tracked, seq, finish: str | None) -> None:
        m, s = self.metrics, seq.spec
        new = (s.rounds, s.draft_tokens, s.accepted_tokens, list(s.accepted_per_position), s.bypassed_tokens)
        m.spec_delta(tracked.spec, new)
        m.generation_tokens.inc(len(seq.output_ids) - tracked.tokens)
        m.totals[1] += len(seq.output_ids) - tracked.tokens
        tracked.spec, tracked.tokens = new, len(seq.output_ids)
        if not tracked.ttft_seen and seq.first_token_time is not None:
            tracked.ttft_seen = True
            m.ttft.observe(max(seq.first_token_time - seq.arrival, 0.0))
        if finish is not None:
            m.finished(finish, seq.arrival, seq.first_token_time, seq.finish_time or time.perf_counter(),
                       len(seq.output_ids))

    def _fail_all(self, message: str) -> None:
        for rid, tracked in list(self._live.items()):
            try:
                self.engine.abort(rid)
                self._publish(tracked.seq, error=message)
            except Exception:
                log.exception("could not fail request %s cleanly", rid)
                self._live.pop(rid, None)


def _set_result(fut: asyncio.Future, value) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
