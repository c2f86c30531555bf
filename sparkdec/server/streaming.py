"""Turning engine snapshots into responses: server-sent events for streams, one final snapshot otherwise."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import Request

from sparkdec.server import protocol as P
from sparkdec.server.choices import prompt_tokens
from sparkdec.server.engine_loop import RequestHandle, Snapshot


def sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def stable_prefix(text: str, stops: tuple[str, ...]) -> str:
    """The part of a running text that can no longer change: no trailing incomplete UTF-8 character (U+FFFD)
    and no tail that could still grow into a stop string (the engine cuts the text there if it does)."""
    text = text.rstrip("\ufffd")
    hold = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return text[:len(text) - hold]


async def snapshots(handles: list[RequestHandle]) -> AsyncIterator[tuple[int, Snapshot]]:
    """(i, snapshot) as the handles publish, in index order among those ready together, until each handle has
    published its final snapshot."""
    waits = {asyncio.ensure_future(h.next()): i for i, h in enumerate(handles)}
    try:
        while waits:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for fut in sorted(done, key=waits.get):
                i = waits.pop(fut)
                snap = fut.result()
                yield i, snap
                if snap.finish_reason is None:
                    waits[asyncio.ensure_future(handles[i].next())] = i
    finally:
        for fut in waits:
            fut.cancel()


async def stream_events(choices: list, rid: str, model: str, kind: str, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events of a request's choices (server/choices.py), interleaved as they progress."""
    chat = kind == "chat"

    def chunk(index: int, piece: str | None, finish: str | None = None, logprobs: dict | None = None, **extra) -> str:
        if chat:
            delta = None if piece is None else ({"content": piece} if finish is None else {})
            return sse(P.chat_chunk(rid, model, delta, finish, index, logprobs, **extra))
        return sse(P.completion_chunk(rid, model, piece, finish, index, logprobs, **extra))

    for c in choices:
        if chat:
            yield sse(P.chat_chunk(rid, model, {"role": "assistant", "content": ""}, index=c.index))
    shown, tokens, scored = [0] * len(choices), [0] * len(choices), [0] * len(choices)
    echoed = [not c.echo for c in choices]
    async for i, snap in snapshots([c.handle for c in choices]):
        if snap.error:
            yield sse(P.error_body(snap.error, "server_error"))
            break
        if not echoed[i]:  # the prompt, with its log-probabilities when they were asked for
            echoed[i] = True
            yield chunk(choices[i].index, choices[i].echo, logprobs=choices[i].logprobs_of(snap.prompt_logprobs))
        final = snap.finish_reason is not None
        text = snap.text if final else stable_prefix(snap.text, choices[i].params.stop)
        new_scores = snap.logprobs[scored[i]:] if snap.logprobs is not None else ()
        if len(text) > shown[i] or new_scores:  # each token's log-probability travels once, with its step's text
            yield chunk(choices[i].index, text[shown[i]:], logprobs=choices[i].logprobs_of(new_scores))
            shown[i], scored[i] = len(text), scored[i] + len(new_scores)
        tokens[i] = snap.num_tokens
        if final:
            yield chunk(choices[i].index, "", snap.finish_reason, speculative=snap.spec)
    else:
        if include_usage:
            yield chunk(0, None, usage=P.usage(prompt_tokens(choices), sum(tokens)))
    yield "data: [DONE]\n\n"


async def _until_final(handle: RequestHandle) -> Snapshot:
    snap = handle.latest
    while snap is None or snap.finish_reason is None:
        snap = await handle.next()
    return snap


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_finals(handles: list[RequestHandle], request: Request) -> list[Snapshot] | None:
    """Each handle's final snapshot, or None when the client disconnects first."""
    final = asyncio.ensure_future(asyncio.gather(*(_until_final(h) for h in handles)))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({final, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        finished = final.done()
        if not finished:
            final.cancel()
    return final.result() if finished else None
