"""The Python API: LLM(model, draft).generate(prompts, SamplingParams) -> list of RequestOutput."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from sparkdec.engine.llm_engine import Engine, EngineConfig
from sparkdec.engine.sequence import Sequence
from sparkdec.sampling import SamplingParams


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    finish_reason: str | None
    stats: dict = field(default_factory=dict)
    rounds: list[dict] | None = None
    # per token when SamplingParams.logprobs is set: (id, log-probability, ((id, log-probability), ...) of the top ones)
    logprobs: list[tuple[int, float, tuple]] | None = None
    prompt_logprobs: list[tuple[int, float | None, tuple]] | None = None  # SamplingParams.prompt_logprobs
    error: str | None = None  # why it ended with finish_reason "error" (e.g. its grammar allowed no next token)


def request_stats(seq: Sequence) -> dict:
    end = seq.finish_time or time.perf_counter()
    first = seq.first_token_time or end
    new = len(seq.output_ids)
    stats = {"prompt_tokens": len(seq.prompt_ids), "new_tokens": new,
             "prefill_s": first - seq.arrival, "decode_s": end - first,
             "tokens_per_s": (new - 1) / (end - first) if new > 1 and end > first else None}
    stats.update(seq.spec.as_dict())
    return stats


def to_output(seq: Sequence) -> RequestOutput:
    return RequestOutput(seq.request_id, list(seq.prompt_ids), seq.text, list(seq.output_ids), seq.finish_reason,
                         request_stats(seq), seq.rounds, _copy(seq.logprobs), _copy(seq.prompt_logprobs), seq.error)


def _copy(entries: list | None) -> list | None:
    return list(entries) if entries is not None else None


class LLM:
    def __init__(self, model: str | None = None, draft: str | None = None, **engine_kwargs):
        self.engine = Engine(EngineConfig(model=model, draft=draft, **engine_kwargs))
        self.tokenizer = self.engine.tokenizer

    def generate(self, prompts, params: SamplingParams | list[SamplingParams] | None = None,
                 trace: bool = False) -> list[RequestOutput]:
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        plist = params if isinstance(params, list) else [params or SamplingParams()] * len(prompts)
        seqs = [self.engine.add_request(p, sp, trace=trace) for p, sp in zip(prompts, plist)]
        while self.engine.has_unfinished():
            self.engine.step()
        return [to_output(s) for s in seqs]
