"""A request's structured-output fields (OpenAI's response_format; vLLM's guided_* and structured_outputs) -> the one
sparkdec.guided.Guided they ask for, or a 400 that names the problem."""
from __future__ import annotations

from sparkdec.guided import Guided

KINDS = ("json", "regex", "choice", "grammar")
MAX_FORCED_CALLS = 4  # tool_choice "required" with parallel calls: up to this many <tool_call> blocks
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
    forced = forced_tools(body)
    if forced is not None:
        asked.append(("tool_choice", forced))
    if len(asked) > 1:
        raise RequestError(400, f"{' and '.join(f for f, _ in asked)} each ask for a structured output; send one",
                           param=asked[1][0])
    if not asked:
        return None
    if body.ignore_eos:
        raise RequestError(400, "ignore_eos cannot be combined with a structured output (the grammar ends the "
                                "output)", param="ignore_eos")
    return Guided(**asked[0][1])


def forced_tools(body) -> dict | None:
    """tool_choice "required" (one or more calls of the offered tools) or {"type": "function", "function": {"name":
    ...}} (one call of that tool) -> Guided's tool_calls fields; None for auto / none / no tool_choice."""
    from sparkdec.server.protocol import RequestError

    if "tools" not in type(body).model_fields:  # (completions: a stray tool_choice field is ignored)
        return None
    choice = body.tool_choice
    if choice in (None, "auto", "none"):
        return None
    offered = {}
    for tool in body.tools or ():
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            offered[fn["name"]] = fn.get("parameters") or {"type": "object"}
    if not offered:
        raise RequestError(400, "tool_choice forces a call but the request offers no tools; add tools or drop "
                                "tool_choice", param="tool_choice")
    if choice == "required":
        many = body.parallel_tool_calls is not False
        return {"tool_calls": tuple(offered.items()), "max_calls": MAX_FORCED_CALLS if many else 1}
    name = ((choice.get("function") or {}).get("name") if isinstance(choice, dict) and choice.get("type") == "function"
            else None)
    if name is None:
        raise RequestError(400, 'tool_choice must be "auto", "none", "required" or {"type": "function", "function": '
                                '{"name": ...}}', param="tool_choice")
    if name not in offered:
        raise RequestError(400, f"tool_choice names {name!r}, which is not among the offered tools "
                                f"({', '.join(offered)})", param="tool_choice")
    return {"tool_calls": ((name, offered[name]),), "max_calls": 1}


def _response_format(rf: dict) -> dict | None:
    from sparkdec.server.protocol import RequestError

    kind = rf.get("type") if isinstance(rf, dict) else None
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"json": True}
    if kind == "json_schema":
        spec = rf.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise RequestError(400, "response_format json_schema needs json_schema.schema, a JSON schema object",
                               param="response_format")
        return {"json": schema}
    raise RequestError(400, f"response_format type must be text, json_object or json_schema, got {kind!r}",
                       param="response_format")


def _structured_outputs(so: dict) -> dict:
    from sparkdec.server.protocol import RequestError

    so = {k: v for k, v in so.items() if v not in (None, False)}  # (fields left at "off")
    whitespace = not so.pop("disable_any_whitespace", False)
    so.pop("disable_fallback", None)  # (a backend switch: there is one backend)
    if so.pop("json_object", None):
        if "json" in so:
            raise RequestError(400, "structured_outputs gives both json and json_object; send one",
                               param="structured_outputs")
        so["json"] = True
    unknown = [k for k, v in so.items() if k not in KINDS and v not in (None, False)]
    if unknown:
        raise RequestError(400, f"structured_outputs does not support {', '.join(unknown)}; use one of "
                                f"{', '.join(KINDS)}", param="structured_outputs")
    return {**{k: v for k, v in so.items() if k in KINDS and v is not None}, "any_whitespace": whitespace}
