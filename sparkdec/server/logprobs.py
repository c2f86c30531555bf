"""The OpenAI shapes of output-token log-probabilities: the completions API's parallel lists and the chat API's
`content` entries (with each token's bytes), formatted piece by piece so that streamed chunks carry their own."""
from __future__ import annotations

FLOOR = -9999.0  # JSON has no -inf: a log-probability below this is sent as this (as vLLM does)


class LogprobFormatter:
    """Formats one choice's entries (token id, log-probability, ((id, log-probability), ...)) from
    sequence.logprobs; keeps the completions text offset across calls."""

    def __init__(self, tokenizer, chat: bool, offset: int = 0):
        self.tokenizer, self.chat, self.offset = tokenizer, chat, offset

    def text(self, token_id: int) -> str:
        if self.tokenizer is None:
            return f"token_id:{token_id}"
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def bytes_of(self, token_id: int) -> list[int]:
        if self.tokenizer is None:
            return list(self.text(token_id).encode())
        return list(self.tokenizer.token_bytes(token_id))

    def format(self, entries) -> dict:
        return self._chat(entries) if self.chat else self._completion(entries)

    def _chat(self, entries) -> dict:
        def one(token_id: int, logprob: float) -> dict:  # (chat never scores the prompt: no None here)
            return {"token": self.text(token_id), "logprob": max(logprob, FLOOR), "bytes": self.bytes_of(token_id)}

        return {"content": [{**one(t, lp), "top_logprobs": [one(i, v) for i, v in top]} for t, lp, top in entries]}

    def _completion(self, entries) -> dict:
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for t, lp, top in entries:
            text = self.text(t)
            alternatives = None
            if lp is not None:  # None: an echoed prompt's first token, which no row predicts
                lp = max(lp, FLOOR)
                alternatives = {self.text(i): max(v, FLOOR) for i, v in top}
                alternatives.setdefault(text, lp)  # the chosen token is always listed (as vLLM does)
            out["tokens"].append(text)
            out["token_logprobs"].append(lp)
            out["top_logprobs"].append(alternatives)
            out["text_offset"].append(self.offset)
            self.offset += len(text)
        return out
