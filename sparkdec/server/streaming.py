"""Turning engine snapshots into responses: server-sent events for streams, one final snapshot otherwise."""
from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from collections.abc import AsyncIterator

from fastapi import Request

from sparkdec.server import protocol as P
from sparkdec.server import tools
from sparkdec.server.choices import chat_message, prompt_tokens
from sparkdec.server.engine_loop import RequestHandle, Snapshot
from sparkdec.spec.commit import stable_prefix


def sse(obj) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


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


class _ChoiceStream:
    """The events of one choice, from its successive snapshots: text as it becomes stable, each token's
    log-probabilities once, the echoed prompt first, each tool call once its block is closed (or, for calls a
    grammar forces, its name once written and then its arguments as they are written)."""

    def __init__(self, choice, rid: str, model: str, chat: bool):
        self.c, self.rid, self.model, self.chat = choice, rid, model, chat
        self.shown = self.scored = self.tokens = self.thought = 0  # characters of content / reasoning shown
        self.calls: list[tuple[str, str]] = []  # each tool call's name and the arguments sent (name and id go first)
        self.echoed = not choice.echo

    def chunk(self, piece: str | None, finish: str | None = None, logprobs: dict | None = None, **extra) -> str:
        if self.chat:
            delta = None if piece is None else ({"content": piece} if finish is None else {})
            return sse(P.chat_chunk(self.rid, self.model, delta, finish, self.c.index, logprobs, **extra))
        return sse(P.completion_chunk(self.rid, self.model, piece, finish, self.c.index, logprobs, **extra))

    def events(self, snap: Snapshot) -> list[str]:
        out = []
        if not self.echoed:  # the prompt, with its log-probabilities when they were asked for
            self.echoed = True
            out.append(self.chunk(self.c.echo, logprobs=self.c.logprobs_of(snap.prompt_logprobs)))
        thought, text, calls, finish = self._parts(snap)
        if len(thought) > self.thought:  # (its tokens' log-probabilities go with the content chunk below)
            delta = {"reasoning_content": thought[self.thought:]}
            out.append(sse(P.chat_chunk(self.rid, self.model, delta, None, self.c.index)))
            self.thought = len(thought)
        new_scores = snap.logprobs.since(self.scored) if snap.logprobs is not None else ()
        if len(text) > self.shown or new_scores:  # each token's log-probability travels once, with its step's text
            out.append(self.chunk(text[self.shown:], logprobs=self.c.logprobs_of(new_scores)))
            self.shown, self.scored = len(text), self.scored + len(new_scores)
        self.tokens = snap.num_tokens
        pieces = self._call_pieces(calls)
        if pieces:
            out.append(sse(P.chat_chunk(self.rid, self.model, {"tool_calls": pieces}, None, self.c.index)))
        if finish is not None:
            out.append(self.chunk("", finish, speculative=snap.spec))
        return out

    def _call_pieces(self, calls: list[tuple[str, str]]) -> list[dict]:
        """The tool_calls deltas not sent yet: a new call's id, name and arguments so far; a call's arguments since
        the last piece. (Sent pieces cannot be taken back: a call that stops extending what was sent of it, which
        the blocks' parsing rules out, sends nothing more.)"""
        pieces = []
        for k, (name, args) in enumerate(calls):
            if k == len(self.calls):
                pieces.append({"index": k, **tools.openai_call(name, args)})
                self.calls.append((name, args))
            elif self.calls[k][0] == name and len(args) > len(self.calls[k][1]) and args.startswith(self.calls[k][1]):
                pieces.append({"index": k, "function": {"arguments": args[len(self.calls[k][1]):]}})
                self.calls[k] = (name, args)
        return pieces

    def _parts(self, snap: Snapshot) -> tuple[str, str, list[tuple[str, str]], str | None]:
        """(reasoning, content, tool calls (name, arguments), finish reason) of the output so far, as much as a
        stream may show."""
        if snap.finish_reason is None:
            text = stable_prefix(snap.text, self.c.params.stop)
            thought, text = self.c.thought_and_text(text, final=False)
            if not self.c.tools:
                return thought, text, [], None
            shown = tools.streamable(text)  # (whitespace alone waits: before calls, the response has no content)
            return thought, shown if shown.strip() else "", tools.running_calls(text, self.c.forced_calls), None
        if not (self.c.tools or self.c.reasoning):
            return "", snap.text, [], snap.finish_reason
        message, calls, finish = chat_message(self.c, snap.text, snap.finish_reason)
        named = [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
        return message.get("reasoning_content") or "", message["content"] or "", named, finish


async def stream_events(choices: list, rid: str, model: str, kind: str, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events of a request's choices (server/choices.py), interleaved as they progress."""
    chat = kind == "chat"
    streams = [_ChoiceStream(c, rid, model, chat) for c in choices]
    for c in choices:
        if chat:
            yield sse(P.chat_chunk(rid, model, {"role": "assistant", "content": ""}, index=c.index))
    async with aclosing(snapshots([c.handle for c in choices])) as updates:  # (its waits end with the stream)
        async for i, snap in updates:
            if snap.error:
                yield sse(P.error_body(snap.error, snap.error_type))
                break
            for event in streams[i].events(snap):
                yield event
        else:
            if include_usage:
                yield streams[0].chunk(None, usage=P.usage(prompt_tokens(choices), sum(st.tokens for st in streams)))
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
