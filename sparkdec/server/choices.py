"""One HTTP request's choices: `n` samples of each of its prompts, queued together and answered together."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from sparkdec.engine.sequence import SpecStats
from sparkdec.sampling import SamplingParams
from sparkdec.server import protocol as P
from sparkdec.server import reasoning, tools
from sparkdec.server.reasoning import OPEN
from sparkdec.server.engine_loop import EngineLoop, RequestHandle, Snapshot
from sparkdec.server.logprobs import LogprobFormatter


@dataclass(eq=False)
class Choice:
    """One engine request. Choice i of prompt p has index p * n + i (the OpenAI numbering)."""

    index: int
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    echo: str = ""  # text shown before the completion (completions `echo`: the prompt)
    handle: RequestHandle | None = None
    logprobs: LogprobFormatter | None = None  # when the request asked for log-probabilities
    tools: bool = False  # chat with tools offered: `<tool_call>` blocks come back as tool_calls (server/tools.py)
    reasoning: bool = False  # chat on a server with a reasoning parser: thinking apart (server/reasoning.py)
    thinking_open: bool = False  # its prompt opened the thinking block: the output begins inside it

    def thought_and_text(self, text: str, final: bool) -> tuple[str, str]:
        """(reasoning, content) of an output so far (all content without a reasoning parser)."""
        if not self.reasoning:
            return "", text
        return reasoning.split((reasoning.OPEN if self.thinking_open else "") + text, final)

    @property
    def forced_calls(self) -> bool:
        """A grammar holds its output to tool calls (tool_choice required or named): each call streams as it is
        written, its name first, then its arguments piece by piece (the grammar keeps them whole JSON)."""
        return self.tools and self.params.guided is not None and self.params.guided.tool_calls is not None

    def logprobs_of(self, entries) -> dict | None:
        return self.logprobs.format(entries) if self.logprobs is not None and entries is not None else None


def plan(engine, body, prompts: list, kind: str, rid: str, reasoning: bool = False,
         defaults: dict | None = None) -> list[Choice]:
    """Every choice of the request. All prompts are checked (tokenized, sized) before any is queued.
    With a seed, choice i samples with seed + i, so choice 0 equals the request sent with n = 1. defaults: the
    model's sampling defaults for the fields the request leaves out (server/defaults.py)."""
    keep = body.truncate_prompt_tokens
    ids = [engine.encode_prompt(p, engine.max_model_len - 1 if keep == -1 else keep) for p in prompts]
    out = []
    for p, (prompt, prompt_ids) in enumerate(zip(prompts, ids)):
        default_max = 16 if kind == "completions" else max(engine.max_model_len - len(prompt_ids), 1)
        params = body.sampling_params(default_max, defaults)
        params = _guided_after_thinking(engine, params, reasoning and kind == "chat")
        shown = prompt if keep is None else prompt_ids  # (a truncated prompt echoes the tokens it kept)
        echo = _echo_text(engine, shown) if getattr(body, "echo", False) else ""
        for i in range(body.n):
            index = p * body.n + i
            seeded = params if params.seed is None or i == 0 else replace(params, seed=params.seed + i)
            formatter = LogprobFormatter(engine.tokenizer, kind == "chat") if params.logprobs is not None else None
            out.append(Choice(index, f"{rid}-{index}", prompt_ids, seeded, echo, logprobs=formatter,
                              tools=getattr(body, "calls_tools", False), reasoning=reasoning and kind == "chat",
                              thinking_open=isinstance(prompt, str) and prompt.rstrip().endswith(OPEN)))
    return out


def _guided_after_thinking(engine, params, parsed: bool):
    """A structured output on a server that parses reasoning lets the model think first (vLLM's behaviour): an
    output that begins with `<think>` is free up to `</think>`, the grammar applies after it (grammar_matcher.py),
    and the thinking comes back as reasoning_content. An output that does not begin so follows it from the start."""
    tok = engine.tokenizer
    if (parsed and params.guided is not None and tok.token_to_id(reasoning.OPEN) is not None
            and tok.token_to_id(reasoning.CLOSE) is not None):
        return replace(params, guided=replace(params.guided, thinking=(reasoning.OPEN, reasoning.CLOSE)))
    return params


def _echo_text(engine, prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    if engine.tokenizer is None:
        raise P.RequestError(400, "echo of a token-id prompt needs the model's tokenizer.json, which this model "
                                  "lacks; drop echo or send the prompt as text", param="echo")
    return engine.tokenizer.decode(prompt, skip_special_tokens=False)


def chat_message(c: Choice, text: str, reason: str) -> tuple[dict, list[dict], str]:
    """-> (the assistant message of a finished chat choice, its tool calls, its finish reason: "tool_calls" for
    calls that ended the output whole, else the engine's reason; a forced call cut short keeps the engine's)."""
    thought, text = c.thought_and_text(text, final=True)
    content, calls = tools.parse(text, forced=c.forced_calls) if c.tools else (text, [])
    message = {"role": "assistant", "content": content}
    if c.reasoning:
        message["reasoning_content"] = thought or None
    if calls:
        message["tool_calls"] = calls
    cut = c.forced_calls and tools.ends_inside_call(text, True)
    return message, calls, "tool_calls" if calls and reason == "stop" and not cut else reason


def prompt_tokens(choices: list[Choice]) -> int:
    """Prompt tokens counted once per prompt, however many choices it has."""
    seen: dict[int, int] = {id(c.prompt_ids): len(c.prompt_ids) for c in choices}
    return sum(seen.values())


async def queue_all(loop: EngineLoop, choices: list[Choice]) -> None:
    """Queue every choice at once (the engine takes them before the same step), their grammars compiled first, off
    the engine thread. If the engine refuses one (or the client goes away meanwhile), all are aborted and the error
    propagates: a request runs whole or not at all."""
    guides = [await loop.prepare_guide(c.prompt_ids, c.params) for c in choices]  # (each choice its own matcher)
    for c, guide in zip(choices, guides):
        c.handle = loop.submit(c.request_id, c.prompt_ids, c.params, guide)
    try:
        results = await asyncio.gather(*(c.handle.added for c in choices), return_exceptions=True)
        refused = next((r for r in results if isinstance(r, BaseException)), None)
        if refused is not None:
            raise refused
    except BaseException:
        abort_unfinished(loop, choices)
        raise


def abort_unfinished(loop: EngineLoop, choices: list[Choice]) -> None:
    for c in choices:
        if c.handle is None or not c.handle.done:
            loop.abort(c.request_id)


def merged_spec(snaps: list[Snapshot]) -> dict | None:
    """The speculative statistics of a response: its one choice's, or all its choices' counted together."""
    if len(snaps) == 1:
        return snaps[0].spec
    stats = [s.stats for s in snaps if s.stats is not None]
    enabled = any(s.spec and s.spec.get("enabled") for s in snaps)
    return {"enabled": enabled, **SpecStats.merged(stats).as_dict()}


def response(kind: str, rid: str, model: str, choices: list[Choice], snaps: list[Snapshot]) -> dict:
    """The whole response body of a non-streamed request."""
    bodies = []
    for c, s in zip(choices, snaps):
        scores = c.logprobs_of([*(s.prompt_logprobs or ()), *s.logprobs.since(0)] if s.logprobs is not None else None)
        if kind == "completions":
            bodies.append(P.completion_choice(c.index, c.echo + s.text, s.finish_reason, s.spec, scores))
        else:
            message, _, finish = chat_message(c, s.text, s.finish_reason)
            bodies.append(P.chat_choice(c.index, message, finish, s.spec, scores))
    use = P.usage(prompt_tokens(choices), sum(s.num_tokens for s in snaps))
    return P.response_body(kind, rid, model, bodies, use, merged_spec(snaps))
