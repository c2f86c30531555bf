"""OpenAI-shaped request bodies (pydantic) and the JSON shapes of responses, stream chunks and errors."""
from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkdec.errors import SparkdecError
from sparkdec.sampling import SamplingParams
from sparkdec.server.defaults import pick
from sparkdec.server.structured import forced_tools, guided_of


class RequestError(SparkdecError):
    """A request the server refuses; carries the HTTP status and the OpenAI error fields."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class StreamOptions(BaseModel):
    include_usage: bool = False


# OpenAI / vLLM fields that change what is generated, which sparkdec does not implement: accepted only at a value that
# changes nothing (the first is the one the error suggests); any other field it does not know is ignored
UNSUPPORTED = {"guided_whitespace_pattern": (None,), "continue_final_message": (False, None),
               "spaces_between_special_tokens": (True, None), "use_beam_search": (False, None),
               "length_penalty": (1.0, None), "return_tokens_as_token_ids": (False, None), "prompt_embeds": (None,),
               "logits_processors": (None,), "echo": (False, None),  # (chat's echo; completions implement theirs)
               "functions": (None,), "function_call": (None, "none", "auto")}
UNSUPPORTED_HINTS = {"functions": "; offer them as tools instead", "function_call": "; use tool_choice instead"}


class _Common(BaseModel):
    """Fields shared by both endpoints, including sparkdec's extra body fields."""

    model_config = ConfigDict(extra="allow")  # unknown fields are ignored (those in UNSUPPORTED are checked)

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    # sparkdec / vLLM extra body fields
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_p: float | None = None
    min_tokens: int | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = None
    logit_bias: dict[str, float] | None = None  # token id (as a string, as OpenAI sends it) -> added to its logit
    # structured outputs (server/structured.py): at most one of these
    response_format: dict | None = None
    guided_json: dict | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: dict | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    truncate_prompt_tokens: int | None = None  # keep only the prompt's last k tokens (vLLM's)
    speculative: bool | None = None
    verify_len: int | None = None
    min_confidence: float | None = None

    def check_supported(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise RequestError(400, f"n must be a positive integer (the number of choices per prompt), got {self.n!r}",
                               param="n")
        if self.truncate_prompt_tokens is not None and self.truncate_prompt_tokens not in range(1, 1 << 62) \
                and self.truncate_prompt_tokens != -1:
            raise RequestError(400, f"truncate_prompt_tokens must be a positive integer (the prompt tokens kept, its "
                                    f"last ones) or -1 (as many as the context window holds), got "
                                    f"{self.truncate_prompt_tokens!r}", param="truncate_prompt_tokens")
        for name, value in (self.model_extra or {}).items():  # fields that would change the output if honoured
            if name in UNSUPPORTED and value not in UNSUPPORTED[name]:
                raise RequestError(400, f"{name} is not supported by this server (the output would not follow it); "
                                        f"drop the field or send {UNSUPPORTED[name][0]!r}"
                                        f"{UNSUPPORTED_HINTS.get(name, '')}", param=name)

    def sampling_params(self, default_max_tokens: int, defaults: dict | None = None) -> SamplingParams:
        """defaults: the model's sampling defaults (server/defaults.py) for the fields the request leaves out."""
        return SamplingParams(
            temperature=pick(self.temperature, "temperature", defaults), top_p=pick(self.top_p, "top_p", defaults),
            top_k=pick(self.top_k, "top_k", defaults),
            max_tokens=default_max_tokens if self.max_tokens is None else self.max_tokens,
            seed=self.seed, stop=self.stop, stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos, include_stop_str_in_output=self.include_stop_str_in_output,
            skip_special_tokens=self.skip_special_tokens, speculative=self.speculative, verify_len=self.verify_len,
            min_confidence=self.min_confidence, logprobs=self.logprob_count(),
            prompt_logprobs=self.prompt_logprob_count(), logit_bias=self.token_biases(),
            presence_penalty=self.presence_penalty or 0.0, frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=pick(self.repetition_penalty, "repetition_penalty", defaults),
            min_p=pick(self.min_p, "min_p", defaults), min_tokens=self.min_tokens or 0, guided=guided_of(self),
            bad_words=tuple(self.bad_words or ()), allowed_token_ids=self.allowed_token_ids)

    def token_biases(self) -> dict[int, float]:
        """logit_bias with its keys read as token ids."""
        out = {}
        for key, bias in (self.logit_bias or {}).items():
            try:
                out[int(key)] = bias
            except ValueError:
                raise RequestError(400, f"logit_bias keys must be token ids (e.g. \"50256\"), got {key!r}",
                                   param="logit_bias") from None
        return out

    def logprob_count(self) -> int | None:
        """None: no log-probabilities; k: each output token's and its k most likely alternatives' (the endpoints
        spell it differently)."""
        return None

    def prompt_logprob_count(self) -> int | None:
        return None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Common):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None
    logprobs: int | None = None

    def logprob_count(self) -> int | None:
        return self.logprobs

    def prompt_logprob_count(self) -> int | None:
        """echo with logprobs scores the echoed prompt too (its first token has none), as evaluation harnesses ask."""
        return self.logprobs if self.echo else None

    def check_supported(self) -> None:
        super().check_supported()
        if self.best_of not in (None, self.n):
            raise RequestError(400, f"best_of must equal n ({self.n}): this server returns every choice it generates",
                               param="best_of")
        if self.suffix:
            raise RequestError(400, "suffix is not supported by this server; drop the field", param="suffix")

    def prompts(self) -> list[str | list[int]]:
        """The request's prompts: a string, a list of token ids, or a list of either (one choice set each)."""
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            return list(p)
        return [p]


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        if any(p.type != "text" for p in self.content):
            raise RequestError(400, "only text content parts are supported", param="messages")
        return "".join(p.text or "" for p in self.content)


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    add_generation_prompt: bool = True
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[dict] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict | None = None  # the template's own switches, e.g. {"enable_thinking": false}
    chat_template: str | None = None  # a Jinja template for this request instead of the model's (vLLM's)

    def check_supported(self) -> None:
        super().check_supported()
        if self.top_logprobs is not None and not self.logprobs:
            raise RequestError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
        forced_tools(self)  # (a tool_choice that names no offered tool is refused here)

    @property
    def calls_tools(self) -> bool:
        """Are `<tool_call>` blocks in the output returned as tool_calls?"""
        return bool(self.tools) and self.tool_choice != "none"

    def logprob_count(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def sampling_params(self, default_max_tokens: int, defaults: dict | None = None) -> SamplingParams:
        if self.max_tokens is None and self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return super().sampling_params(default_max_tokens, defaults)

    def template_messages(self) -> list[dict]:
        """The messages as the chat template reads them: text content, and the other fields (tool_calls,
        tool_call_id, name) as sent."""
        return template_messages(self.messages)


def template_messages(messages: list[ChatMessage]) -> list[dict]:
    """Messages as the chat template reads them: text content, the other fields (tool_calls, tool_call_id, name) as
    sent."""
    return [{**m.model_dump(exclude_none=True, exclude={"content"}), "content": m.text()} for m in messages]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_choice(index: int, text: str, finish: str | None, spec: dict | None, logprobs: dict | None) -> dict:
    return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish, "speculative": spec}


def chat_choice(index: int, message: dict, finish: str | None, spec: dict | None, logprobs: dict | None) -> dict:
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish, "speculative": spec}


def response_body(kind: str, rid: str, model: str, choices: list[dict], use: dict, spec: dict | None) -> dict:
    """A whole (non-streamed) response; spec: the speculative statistics of all its choices together."""
    obj = "text_completion" if kind == "completions" else "chat.completion"
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model, "choices": choices,
            "usage": use, "speculative": spec}


def completion_chunk(rid: str, model: str, text: str | None, finish: str | None = None, index: int = 0,
                     logprobs: dict | None = None, **extra) -> dict:
    choices = [] if text is None else [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}]
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": choices, **extra}


def chat_chunk(rid: str, model: str, delta: dict | None, finish: str | None = None, index: int = 0,
               logprobs: dict | None = None, **extra) -> dict:
    choices = [] if delta is None else [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]
    return {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "choices": choices, **extra}


Endpoint = Literal["completions", "chat"]
