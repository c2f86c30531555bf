"""Qwen3's thinking split from its answer (`sparkdec serve --reasoning-parser qwen3`): the text between `<think>` and
`</think>` comes back as the message's `reasoning_content`, the rest as its `content`."""
from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def split(text: str, final: bool) -> tuple[str, str]:
    """-> (reasoning, content) of an output so far. Only an output that starts with `<think>` thinks (Qwen3 with
    thinking off starts with its answer); until `</think>` comes, all of it is reasoning, and a running text holds
    back a tail that may be the start of `</think>` or `<think>`, or newlines that may end the thinking. A running
    text's parts are prefixes of the final text's."""
    if not text.startswith(OPEN):
        if not final and OPEN.startswith(text):
            return "", ""  # may still become <think>
        return "", text
    end = text.find(CLOSE)
    if end >= 0:
        return text[len(OPEN):end].strip("\n"), text[end + len(CLOSE):].lstrip("\n")
    body = text[len(OPEN):].lstrip("\n")
    if final:
        return body.rstrip("\n"), ""
    for k in range(min(len(CLOSE) - 1, len(body)), 0, -1):
        if body.endswith(CLOSE[:k]):
            body = body[:-k]
            break
    return body.rstrip("\n"), ""  # (trailing newlines: the final text strips them before </think>)
