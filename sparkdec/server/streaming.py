"""Turning engine snapshots into responses: server-sent events for streams, one final snapshot otherwise."""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import Request

from sparkdec.server import protocol as P
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


async def stream_events(handle: RequestHandle, rid: str, model: str, kind: str, stops: tuple[str, ...],
                        include_usage: bool) -> AsyncIterator[str]:
    chat = kind == "chat"

    def chunk(piece: str | None, finish: str | None = None, **extra) -> str:
        if chat:
            delta = None if piece is None else ({"content": piece} if finish is None else {})
            return sse(P.chat_chunk(rid, model, delta, finish, **extra))
        return sse(P.completion_chunk(rid, model, piece, finish, **extra))

    if chat:
        yield sse(P.chat_chunk(rid, model, {"role": "assistant", "content": ""}))
    shown = 0
    while True:
        snap = await handle.next()
        if snap.error:
            yield sse(P.error_body(snap.error, "server_error"))
            break
        final = snap.finish_reason is not None
        text = snap.text if final else stable_prefix(snap.text, stops)
        if len(text) > shown:
            yield chunk(text[shown:])
            shown = len(text)
        if final:
            yield chunk("", snap.finish_reason, speculative=snap.spec)
            if include_usage:
                yield chunk(None, usage=P.usage(len(handle.prompt_ids), snap.num_tokens))
            break
    yield "data: [DONE]\n\n"


async def _until_final(handle: RequestHandle) -> Snapshot:
    snap = handle.latest
    while snap is None or snap.finish_reason is None:
        snap = await handle.next()
    return snap


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def wait_final(handle: RequestHandle, request: Request) -> Snapshot | None:
    """The final snapshot, or None when the client disconnects first."""
    final = asyncio.ensure_future(_until_final(handle))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({final, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        finished = final.done()
        if not finished:
            final.cancel()
    return final.result() if finished else None
