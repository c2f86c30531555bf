"""Tool calls in chat output: Qwen3 (Hermes-style) models write each call as `<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`; a request that offers `tools` gets them back as OpenAI `tool_calls`, each call's
arguments the text the model wrote for them (so a stream's argument pieces add up to the whole response's)."""
from __future__ import annotations

import json
import uuid
from json.decoder import scanstring

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_DECODER = json.JSONDecoder()


def parse(text: str, forced: bool = False) -> tuple[str | None, list[dict]]:
    """-> (content outside the calls, or None when nothing but calls; the calls in OpenAI's shape). A block that is
    not a JSON object with a name stays in the content as written (nothing the model wrote is dropped). forced: the
    output is held to calls by a grammar (its JSON is valid as far as it goes), and a last block the output ended
    inside (cut by max_tokens or a stop string) is a call too, with the arguments written so far, once its name is
    whole: what a stream of such calls has sent."""
    calls, kept, at = [], [], 0
    for start, end, body in _blocks(text, forced):
        if end is None and not forced:
            break
        call = _call_of(body) if end is not None else _written(body)
        if call is None:
            continue
        kept.append(text[at:start])
        calls.append(call)
        at = len(text) if end is None else end
    kept.append(text[at:])
    content = "".join(kept)
    return (None if calls and not content.strip() else content), calls


def running_calls(text: str, forced: bool) -> list[tuple[str, str]]:
    """(name, arguments so far) of a running text's calls: those whose blocks are closed, and when forced the one
    being written once its name is whole, its arguments as far as they are written (a stream sends what it has
    not sent yet)."""
    return [(c["function"]["name"], c["function"]["arguments"]) for c in parse(text, forced)[1]]


def ends_inside_call(text: str, forced: bool) -> bool:
    """Does the text end inside a call's block (an output cut there: its last call is not whole)?"""
    blocks = list(_blocks(text, forced))
    return bool(blocks) and blocks[-1][1] is None


def _blocks(text: str, forced: bool):
    """(start, end, body) of each `<tool_call>` block, in order: end just after its closing tag, or None for the block
    the text ends inside (its body then runs to the end). A block's JSON is read whole before its closing tag is
    looked for, so the tag written inside one of its strings does not end it; a block whose JSON does not read ends
    at the next closing tag, unless forced (a grammar's JSON that does not read yet is unfinished)."""
    i = 0
    while (start := text.find(OPEN, i)) >= 0:
        j = start + len(OPEN)
        close = _json_end(text, j)
        if close is not None and text.startswith(CLOSE, close):
            end = close + len(CLOSE)
        elif (close is None and forced) or (close is not None and CLOSE.startswith(text[close:])):
            end = None  # the JSON or the closing tag is still being written
        else:  # not one JSON value, then the tag: the block ends at the next tag
            tag = text.find(CLOSE, j if close is None else close)
            end = None if tag < 0 else tag + len(CLOSE)
        if end is None:
            yield start, None, text[j:]
            return
        yield start, end, text[j:end - len(CLOSE)]
        i = end


def _json_end(text: str, j: int) -> int | None:
    """Where the spaces after the JSON value at text[j:] (spaces first) end; None when no whole value reads there."""
    try:
        return _space(text, _DECODER.raw_decode(text, _space(text, j))[1])
    except ValueError:
        return None


def _call_of(body: str) -> dict | None:
    """A closed block's call (its arguments the text the model wrote, when they are an object), or None."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, str):
        _, written, whole = written_call(body)
        args = written if whole and json.loads(written) == args else json.dumps(args)
    return openai_call(obj["name"], args)


def _written(body: str) -> dict | None:
    """An unfinished block's call, once its name is whole."""
    name, args, _ = written_call(body)
    return openai_call(name, args) if name is not None else None


def openai_call(name: str, arguments: str) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def written_call(body: str) -> tuple[str | None, str, bool]:
    """(name, the arguments' text as written so far, whether they are whole) of a call's JSON body, whole or being
    written: the name once its string is closed; the arguments' text ("arguments", else "parameters", the last
    such member as JSON reads it) only while they are an object (any other value goes out whole, by _call_of)."""
    name, values = None, {}
    for key, start, end in _members(body):
        if key == "name" and end is not None:
            value = json.loads(body[start:end])
            name = value if isinstance(value, str) else None
        elif key in ("arguments", "parameters"):
            values[key] = (body[start:end], end is not None) if body[start:start + 1] == "{" else ("", False)
    args, whole = values.get("arguments", values.get("parameters", ("", False)))
    return name, args, whole


def _members(body: str) -> list[tuple[str, int, int | None]]:
    """(key, start of its value, end of its value or None while it is unfinished) of the members of the JSON
    object that body begins, as far as body has them; the last may be unfinished."""
    out = []
    i = _space(body, 0)
    if body[i:i + 1] != "{":
        return out
    i += 1
    while True:
        i = _space(body, i)
        if body[i:i + 1] != '"':
            return out
        try:
            key, i = scanstring(body, i + 1)
        except ValueError:
            return out
        i = _space(body, i)
        if body[i:i + 1] != ":":
            return out
        start = _space(body, i + 1)
        try:
            _, end = _DECODER.raw_decode(body, start)
        except ValueError:
            return out + [(key, start, None)]
        out.append((key, start, end))
        i = _space(body, end)
        if body[i:i + 1] != ",":
            return out
        i += 1


def _space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


def streamable(text: str) -> str:
    """The part of a running text a stream may show while calls may still come: everything before the first call's
    opening tag, held back also while the text ends in a prefix of that tag."""
    cut = text.find(OPEN)
    if cut >= 0:
        return text[:cut]
    for k in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if text.endswith(OPEN[:k]):
            return text[:-k]
    return text
