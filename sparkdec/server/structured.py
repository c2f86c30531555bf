"""A request's structured-output fields (OpenAI's response_format; vLLM's guided_* and structured_outputs) -> the one
sparkdec.guided.Guided they ask for, or a 400 that names the problem."""
from __future__ import annotations

from sparkdec.guided import Guided

KINDS = ("json", "regex", "choice", "grammar")
GUIDED_FIELDS = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}


def guided_of(body) -> Guided | None:
    from sparkdec.server.protocol import RequestError

    asked: list[tuple[str, dict]] = []
    if body.response_format is not None:
        spec = _response_format(body.response_format)
        if spec is not None:
            asked.append(("response_format", spec))
    for field, kind in GUIDED_FIELDS.items():
        if getattr(body, field) is not None:
            asked.append((field, {kind: getattr(body, field)}))
    if body.structured_outputs is not None:
        asked.append(("structured_outputs", _structured_outputs(body.structured_outputs)))
    if len(asked) > 1:
        raise RequestError(400, f"{' and '.join(f for f, _ in asked)} each ask for a structured output; send one",
                           param=asked[1][0])
    if not asked:
        return None
    if body.ignore_eos:
        raise RequestError(400, "ignore_eos cannot be combined with a structured output (the grammar ends the "
                                "output)", param="ignore_eos")
    return Guided(**asked[0][1])


def _response_format(rf: dict) -> dict | None:
    from sparkdec.server.protocol import RequestError

    kind = rf.get("type") if isinstance(rf, dict) else None
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"json": True}
    if kind == "json_schema":
        schema = (rf.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise RequestError(400, "response_format json_schema needs json_schema.schema, a JSON schema object",
                               param="response_format")
        return {"json": schema}
    raise RequestError(400, f"response_format type must be text, json_object or json_schema, got {kind!r}",
                       param="response_format")


def _structured_outputs(so: dict) -> dict:
    from sparkdec.server.protocol import RequestError

    so = dict(so)
    whitespace = not so.pop("disable_any_whitespace", False)
    unknown = [k for k, v in so.items() if k not in KINDS and v not in (None, False)]
    if unknown:
        raise RequestError(400, f"structured_outputs does not support {', '.join(unknown)}; use one of "
                                f"{', '.join(KINDS)}", param="structured_outputs")
    return {**{k: v for k, v in so.items() if k in KINDS and v is not None}, "any_whitespace": whitespace}
