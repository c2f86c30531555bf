"""vLLM's /tokenize and /detokenize: a prompt (text, or chat messages through the chat template) to token ids and
back, so a client can count tokens against the context window without generating."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from sparkdec.server import protocol as P


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: str | None = None
    messages: list[P.ChatMessage] | None = None
    add_generation_prompt: bool = True
    tools: list[dict] | None = None
    chat_template_kwargs: dict | None = None
    chat_template: str | None = None


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str | None = None
    tokens: list[int]


def tokenize(engine, body: TokenizeRequest, trust_templates: bool = False) -> dict:
    tok = _tokenizer(engine)
    if (body.prompt is None) == (body.messages is None):
        raise P.RequestError(400, "send exactly one of prompt (text) or messages (a chat)", param="prompt")
    if body.messages is not None:
        text = render_chat(tok, P.template_messages(body.messages), body, trust_templates)
    else:
        text = body.prompt
    ids = tok.encode(text)
    return {"count": len(ids), "max_model_len": engine.max_model_len, "tokens": ids}


def render_chat(tok, messages: list[dict], body, trust_templates: bool) -> str:
    """A chat's prompt text through the model's chat template, or the request's own when the server trusts them
    (`serve --trust-request-chat-template`: even sandboxed, a template can loop or allocate without bound); a
    request's template that does not render is a 400 naming the field."""
    if body.chat_template is not None and not trust_templates:
        raise P.RequestError(400, "this server does not render a request's own chat_template (start it with "
                                  "--trust-request-chat-template to allow them); drop the field", param="chat_template")
    try:
        return tok.apply_chat_template(messages, body.add_generation_prompt, body.tools, body.chat_template_kwargs,
                                       body.chat_template)
    except Exception as exc:
        if body.chat_template is None or isinstance(exc, P.RequestError):
            raise
        raise P.RequestError(400, f"the request's chat_template does not render: {type(exc).__name__}: {exc}",
                             param="chat_template") from None


def detokenize(engine, body: DetokenizeRequest) -> dict:
    tok = _tokenizer(engine)
    vocab = engine.target_cfg.vocab_size
    bad = [t for t in body.tokens if not 0 <= t < vocab]
    if bad:
        raise P.RequestError(400, f"tokens {bad[:5]} are outside the vocabulary (0..{vocab - 1})", param="tokens")
    return {"prompt": tok.decode(body.tokens, skip_special_tokens=False)}


def check_model(body, names: set[str], model_name: str) -> None:
    if body.model is not None and body.model not in names:
        raise P.RequestError(404, f"the model `{body.model}` does not exist; this server serves {model_name!r}",
                             param="model", code="model_not_found")


def _tokenizer(engine):
    if engine.tokenizer is None:
        raise P.RequestError(400, "this model has no tokenizer.json, so it cannot tokenize text")
    return engine.tokenizer
