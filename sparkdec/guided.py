"""Guided decoding (structured outputs): JSON (any object, or following a schema), a regex, one of given strings, an
EBNF grammar or forced tool calls, compiled by xgrammar. A request's matcher (grammar_matcher.py) follows its committed
tokens; a round asks it which tokens each verify row allows, advancing it through the drafts before that row and
rolling back, so a verify row gets the very mask plain decoding gets at that position (penalties.processed_rows
applies it)."""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass

from sparkdec.errors import InvalidSamplingParamsError
from sparkdec.grammar_matcher import Matcher


KINDS = ("json", "regex", "choice", "grammar", "tool_calls")
CACHE_BYTES = 256 << 20  # compiled grammars xgrammar keeps (least recently used go first)


@dataclass(frozen=True)
class Guided:
    """Exactly one of: json (True: any JSON object; a schema as a dict or JSON text), regex, choice (the
    output is one of these strings), grammar (EBNF in xgrammar's dialect, rule `root`), tool_calls ((name, JSON
    schema of its arguments) per tool: the output is one or more Qwen3 `<tool_call>` blocks, each calling one of them,
    at most max_calls). thinking: (open, close) tokens as the tokenizer spells them (Qwen3's `<think>`, `</think>`) of
    a block the output may begin with, free of the grammar, which applies after it (grammar_matcher.py). any_whitespace
    (JSON only):
    whitespace may be any run between JSON's tokens, as vLLM's default; False: `, ` and `: ` only, for models that
    loop on whitespace (vLLM's disable_any_whitespace)."""
    json: bool | str | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    tool_calls: tuple[tuple[str, str], ...] | None = None
    max_calls: int = 1
    any_whitespace: bool = True
    thinking: tuple[str, str] | None = None

    def __post_init__(self):
        def bad(message: str):
            raise InvalidSamplingParamsError(message)

        if isinstance(self.json, dict):
            # hashable; keys keep their order (the grammar emits properties in the schema's order)
            object.__setattr__(self, "json", json.dumps(self.json))
        given = [name for name in KINDS if getattr(self, name) not in (None, False)]
        if len(given) != 1:
            bad(f"guided decoding takes exactly one of {', '.join(KINDS)}; got {', '.join(given) or 'none'}")
        if self.json is not None and not isinstance(self.json, (bool, str)):
            bad(f"guided json must be true (any JSON object) or a JSON schema object, got {self.json!r}")
        for name in ("regex", "grammar"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                bad(f"guided {name} must be a string, got {getattr(self, name)!r}")
        if self.choice is not None:
            if not isinstance(self.choice, (list, tuple)) or not self.choice or not all(
                    isinstance(c, str) and c for c in self.choice):
                bad("guided choice must be a non-empty list of non-empty strings")
            object.__setattr__(self, "choice", tuple(self.choice))
        if self.tool_calls is not None:
            object.__setattr__(self, "tool_calls", _tools(self.tool_calls, bad))
        if self.json is False:
            object.__setattr__(self, "json", None)
        if self.thinking is not None:
            if not (isinstance(self.thinking, (list, tuple)) and len(self.thinking) == 2
                    and all(isinstance(t, str) and t for t in self.thinking)):
                bad(f"guided thinking must be (open, close) tokens, got {self.thinking!r}")
            object.__setattr__(self, "thinking", tuple(self.thinking))
        if not isinstance(self.max_calls, int) or self.max_calls < 1:
            bad(f"max_calls must be a positive integer, got {self.max_calls!r}")


def _tools(tools, bad) -> tuple[tuple[str, str], ...]:
    """tool_calls as ((name, parameters schema as JSON text), ...), checked."""
    if not isinstance(tools, (list, tuple)) or not tools:
        bad("guided tool_calls must be a non-empty list of (name, parameters schema)")
    out = []
    for name, schema in tools:
        if not isinstance(name, str) or not name:
            bad(f"a tool's name must be a non-empty string, got {name!r}")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError:
                bad(f"tool {name}'s parameters are not JSON: {schema[:80]!r}")
        if not isinstance(schema, dict):
            bad(f"tool {name}'s parameters must be a JSON schema object, got {schema!r}")
        out.append((name, json.dumps(schema)))
    return tuple(out)


class GuideCompiler:
    """One engine's grammar compiler (xgrammar, built on first use from its tokenizer), with compiled grammars
    cached by xgrammar."""

    def __init__(self, tokenizer, vocab_size: int):
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self._compiler = None
        self._lock = threading.Lock()  # (compiles run on the server's worker threads; xgrammar's compiler is shared)

    def matcher(self, guided: Guided, stop_ids: tuple[int, ...], prompt_ids: list[int] = ()) -> Matcher:
        """A request's matcher; prompt_ids: whether its prompt already opened the thinking block."""
        compiled = self.compile(guided)
        if guided.thinking is None:
            return Matcher(compiled, stop_ids, self.vocab_size, encode=self.tokenizer.encode)
        ids = [self.tokenizer.token_to_id(t) for t in guided.thinking]
        if None in ids or max(ids) >= self.vocab_size:
            raise InvalidSamplingParamsError(f"guided thinking must name two tokens of this model's tokenizer; "
                                             f"{guided.thinking!r} are not")
        return Matcher(compiled, stop_ids, self.vocab_size, (*ids, self.compile(guided, newlines_first=True)),
                       self.opened(prompt_ids, ids[0]), self.tokenizer.encode)

    def opened(self, prompt_ids: list[int], open_id: int) -> bool:
        """Does the prompt end with the open token (whitespace tokens after it aside)?"""
        for t in reversed(prompt_ids):
            if t == open_id:
                return True
            if self.tokenizer.decode([t], skip_special_tokens=False).strip():
                return False
        return False

    def compile(self, guided: Guided, newlines_first: bool = False):
        """The compiled grammar; newlines_first: newlines may come before it (after a thinking block)."""
        import xgrammar as xgr

        compiler = self._get()
        try:
            grammar = _grammar(guided)
            if newlines_first:
                grammar = xgr.Grammar.concat(xgr.Grammar.from_ebnf('root ::= "\\n"*'), grammar)
            return compiler.compile_grammar(grammar)
        except (RuntimeError, ValueError, TypeError, KeyError) as e:  # xgrammar: "[time] file.cc:line: message"
            kind = next(k for k in KINDS if getattr(guided, k) not in (None, False))
            message = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", str(e).strip())
            raise InvalidSamplingParamsError(f"the guided {kind} does not compile: {message}") from None

    def _get(self):
        with self._lock:
            return self._compiler or self._build()

    def _build(self):
        if self.tokenizer is None:
            raise InvalidSamplingParamsError("guided decoding needs the model's tokenizer (tokenizer.json)")
        try:
            import xgrammar as xgr
        except ImportError:
            raise InvalidSamplingParamsError("guided decoding needs xgrammar: pip install xgrammar") from None
        self._compiler = xgr.GrammarCompiler(token_info(self.tokenizer, self.vocab_size), max_threads=1,
                                             cache_limit_bytes=CACHE_BYTES)
        return self._compiler


def _grammar(guided: Guided):
    """The xgrammar Grammar a Guided asks for."""
    import xgrammar as xgr

    if guided.json is not None:
        schema = '{"type": "object"}' if guided.json is True else guided.json
        return xgr.Grammar.from_json_schema(schema, any_whitespace=guided.any_whitespace)
    if guided.regex is not None:
        return xgr.Grammar.from_regex(guided.regex)
    if guided.tool_calls is not None:
        return tool_calls_grammar(guided.tool_calls, guided.max_calls)
    if guided.choice is not None:
        alternatives = " | ".join(json.dumps(c, ensure_ascii=False) for c in guided.choice)
        return xgr.Grammar.from_ebnf("root ::= " + alternatives)
    return xgr.Grammar.from_ebnf(guided.grammar)


def tool_calls_grammar(tools: tuple[tuple[str, str], ...], max_calls: int):
    """One to max_calls Qwen3 tool-call blocks, `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, joined
    by newlines, each naming one of the tools with arguments that follow its schema (compact JSON, as Qwen3's chat
    template writes calls)."""
    import xgrammar as xgr

    def literal(text: str):
        return xgr.Grammar.from_ebnf("root ::= " + json.dumps(text))

    bodies = [xgr.Grammar.from_json_schema(_call_schema(name, json.loads(schema)), any_whitespace=False)
              for name, schema in tools]
    call = xgr.Grammar.concat(literal("<tool_call>\n"), xgr.Grammar.union(*bodies) if len(bodies) > 1 else bodies[0],
                              literal("\n</tool_call>"))
    calls = call
    for _ in range(max_calls - 1):  # call ("\n" call ("\n" call ...)?)?, nested from the last
        calls = xgr.Grammar.concat(call, xgr.Grammar.union(literal(""), xgr.Grammar.concat(literal("\n"), calls)))
    return calls


def _call_schema(name: str, parameters: dict) -> dict:
    """The schema of one call's JSON: {"name": name, "arguments": parameters}; the parameters' definitions ($defs,
    definitions) lifted to the root, where their "#/$defs/..." references point."""
    parameters = dict(parameters)
    lifted = {key: parameters.pop(key) for key in ("$defs", "definitions") if key in parameters}
    return {"type": "object", "properties": {"name": {"const": name}, "arguments": parameters},
            "required": ["name", "arguments"], "additionalProperties": False, **lifted}


def token_info(tokenizer, vocab_size: int):
    """xgrammar's view of the vocabulary: each id's piece (byte-level pieces as the tokenizer stores them); special
    tokens and ids past the tokenizer's vocabulary as empty pieces, which xgrammar never lets a grammar emit."""
    import xgrammar as xgr

    vocab = tokenizer.vocab()
    pieces = [""] * vocab_size
    for piece, i in vocab.items():
        if i < vocab_size:
            pieces[i] = piece
    for i in tokenizer.special_ids():
        if i < vocab_size:
            pieces[i] = ""
    kind = (xgr.VocabType.BYTE_LEVEL if tokenizer.byte_level else
            xgr.VocabType.BYTE_FALLBACK if "<0x0A>" in vocab else xgr.VocabType.RAW)  # (SentencePiece's byte pieces)
    return xgr.TokenizerInfo(pieces, kind, vocab_size=vocab_size, stop_token_ids=list(tokenizer.eos_token_ids) or None)
