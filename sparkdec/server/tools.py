"""Tool calls in chat output: Qwen3 (Hermes-style) models write each call as `<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`; a request that offers `tools` gets them back as OpenAI `tool_calls`, each call's
arguments the text the model wrote for them (so a stream's argument pieces add up to the whole response's)."""
from __future__ import annotations

import json
import re
import uuid
from json.decoder import scanstring

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)


def parse(text: str, unfinished: bool = False) -> tuple[str | None, list[dict]]:
    """-> (content outside the calls, or None when nothing but calls; the calls in OpenAI's shape). A block that is
    not a JSON object with a name stays in the content as written (nothing the model wrote is dropped). unfinished:
    a last block the output ended inside (cut by max_tokens) is a call too, with the arguments written so far, once
    its name is whole (for outputs a grammar holds to calls, which stream their arguments as written)."""
    calls, kept, at = [], [], 0
    for m in _CALL.finditer(text):
        call = _call_of(m.group(1))
        if call is None:
            continue
        kept.append(text[at:m.start()])
        calls.append(call)
        at = m.end()
    cut = _unclosed(text)
    name, args, _ = written_call(text[cut + len(OPEN):]) if unfinished and cut >= at else (None, "", False)
    if name is not None:
        kept.append(text[at:cut])
        calls.append(openai_call(name, args))
        at = len(text)
    kept.append(text[at:])
    content = "".join(kept)
    return (None if calls and not content.strip() else content), calls


def _call_of(body: str) -> dict | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, str):
        _, written, whole = written_call(body)
        args = written if whole else json.dumps(args)  # (the text as written: its JSON with the model's spacing)
    return openai_call(obj["name"], args)


def openai_call(name: str, arguments: str) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def running_calls(text: str, unfinished: bool) -> list[tuple[str, str]]:
    """(name, arguments so far) of a running text's calls: those whose blocks are closed, and with unfinished the
    one being written once its name is whole, its arguments as far as they are written (an object's text; a
    stream sends what it has not sent yet)."""
    end = text.rfind(CLOSE)
    closed = parse(text[:end + len(CLOSE)])[1] if end >= 0 else []
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in closed]
    cut = _unclosed(text)
    if unfinished and cut >= 0:
        name, args, _ = written_call(text[cut + len(OPEN):])
        if name is not None:
            calls.append((name, args))
    return calls


def _unclosed(text: str) -> int:
    """Where the block the text ends inside opens; -1 when it ends inside none."""
    cut = text.rfind(OPEN)
    return cut if cut > text.rfind(CLOSE) else -1


def written_call(body: str) -> tuple[str | None, str, bool]:
    """(name, the arguments' text as written so far, whether they are whole) of a call's JSON body, whole or being
    written: the name once its string is closed; the arguments' text only while they are an object (a string
    value goes out whole, decoded, by _call_of)."""
    name, args, whole = None, "", False
    for key, start, end in _members(body):
        if key == "name" and end is not None:
            value = json.loads(body[start:end])
            name = value if isinstance(value, str) else None
        elif key in ("arguments", "parameters") and body[start:start + 1] == "{":
            args, whole = body[start:end], end is not None
    return name, args, whole


def _members(body: str) -> list[tuple[str, int, int | None]]:
    """(key, start of its value, end of its value or None while it is unfinished) of the members of the JSON
    object that body begins, as far as body has them; the last may be unfinished."""
    decoder, out = json.JSONDecoder(), []
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
            _, end = decoder.raw_decode(body, start)
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
