"""Commit a round's tokens one at a time, ending exactly where plain decoding would (EOS, stop ids/strings, limits)."""
from __future__ import annotations

from sparkdec.engine.sequence import Sequence


def find_stop(text: str, stops: tuple[str, ...], start: int = 0, include: bool = False) -> int:
    """Index where the earliest stop string starting at or after `start` starts in text (include: where it ends, the
    first listed of those starting there), or -1."""
    hits = [(i, -k, len(s)) for k, s in enumerate(stops) if (i := text.find(s, start)) >= 0]
    if not hits:
        return -1
    i, _, size = max(hits, key=lambda h: (-h[0], h[1]))
    return i + size if include else i


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
    """The text without the special token that ended it (its EOS, kept in the text when special tokens are, as vLLM
    keeps a stop id only when it is not special), unless include_stop_str_in_output."""
    last = seq.output_ids[-1]
    piece = decode([last], False)
    if seq.params.include_stop_str_in_output or decode([last], True) or not seq.text.endswith(piece):
        return seq.text
    return seq.text[:len(seq.text) - len(piece)]
