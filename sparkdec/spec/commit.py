"""Commit a round's tokens one at a time, ending exactly where plain decoding would (EOS, stop ids/strings, limits)."""
from __future__ import annotations

from sparkdec.engine.sequence import Sequence


def find_stop(text: str, stops: tuple[str, ...], start: int = 0, include: bool = False) -> int:
    """Index where the earliest stop string starting at or after `start` starts in text (include: where it ends, the
    first listed of those starting there), or -1."""
    hits = [(i, k) for k, s in enumerate(stops) if (i := text.find(s, start)) >= 0]
    if not hits:
        return -1
    i, k = min(hits)
    return i + len(stops[k]) if include else i


def running_text(seq: Sequence, decode) -> str:
    """Text of all output tokens, decoding only the tokens since the last whole-character point.
    NOTE: exact for byte-level BPE, where a token boundary after a complete character splits the text."""
    tail = decode(seq.output_ids[seq.text_pos:], seq.params.skip_special_tokens)
    if not tail.endswith("\ufffd"):
        seq.text_base += tail
        seq.text_pos = len(seq.output_ids)
        return seq.text_base
    return seq.text_base + tail


def commit_tokens(seq: Sequence, tokens: list[int], decode) -> int:
    """Append tokens until one ends the sequence; returns how many were committed.
    decode(ids, skip_special_tokens) -> text, used for stop strings and the running text."""
    n = 0
    for token in tokens:
        done = seq.append(token)
        if seq.error is not None:  # refused, not committed (Sequence.append)
            break
        n += 1
        if seq.params.stop and decode is not None and len(seq.output_ids) >= seq.params.min_tokens:
            text = running_text(seq, decode)
            if len(seq.output_ids) == seq.params.min_tokens:  # stop strings count from the text after these tokens
                seq.stop_from = len(text.rstrip("\ufffd"))
            # NOTE: a trailing U+FFFD is an incomplete UTF-8 character that later tokens may complete
            cut = find_stop(text if done else text.rstrip("\ufffd"), seq.params.stop, seq.stop_from,
                            seq.params.include_stop_str_in_output)
            if cut >= 0:
                seq.text, seq.finish_reason = text[:cut], "stop"
                return n
        if done:
            break
    if decode is not None:
        seq.text = running_text(seq, decode)
        if seq.finish_reason == "stop" and not seq.params.skip_special_tokens:  # (ended by EOS or a stop id)
            seq.text = _without_final_special(seq, decode)
    return n


def _without_final_special(seq: Sequence, decode) -> str:
    """The text without the special token that ended it (its EOS, which skip_special_tokens=False would write),
    unless include_stop_str_in_output. (A stop id that is not special keeps its text either way, the rule vLLM's
    SamplingParams documents; vLLM's V1 detokenizer drops it unless include_stop_str_in_output.)"""
    last = seq.output_ids[-1]
    piece = decode([last], False)
    if seq.params.include_stop_str_in_output or decode([last], True) or not seq.text.endswith(piece):
        return seq.text
    return seq.text[:len(seq.text) - len(piece)]


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
