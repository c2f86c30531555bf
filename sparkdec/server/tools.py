"""Tool calls in chat output: Qwen3 (Hermes-style) models write each call as `<tool_call>{"name": ...,
"arguments": {...}}</tool_call>`; a request that offers `tools` gets them back as OpenAI `tool_calls`."""
from __future__ import annotations

import json
import re
import uuid

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(re.escape(OPEN) + r"\s*(.*?)\s*" + re.escape(CLOSE), re.S)


def parse(text: str) -> tuple[str | None, list[dict]]:
    """-> (content outside the calls, or None when nothing but calls; the calls in OpenAI's shape). A block that is
    not a JSON object with a name stays in the content as written (nothing the model wrote is dropped)."""
    calls, kept, at = [], [], 0
    for m in _CALL.finditer(text):
        call = _call_of(m.group(1))
        if call is None:
            continue
        kept.append(text[at:m.start()])
        calls.append(call)
        at = m.end()
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
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}}


def complete_calls(text: str) -> list[dict]:
    """The calls of a running text whose blocks are closed already (a stream sends each as soon as it is whole)."""
    end = text.rfind(CLOSE)
    return parse(text[:end + len(CLOSE)])[1] if end >= 0 else []


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
