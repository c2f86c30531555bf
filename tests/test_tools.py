"""Tool calls: `<tool_call>` blocks parsed into OpenAI tool_calls (whole and streamed), tools and template switches
passed to the chat template."""
from __future__ import annotations

import json
import shutil

import pytest

from sparkdec.engine.llm_engine import DEFAULT_PAIR
from sparkdec.sampling import SamplingParams
from sparkdec.server import tools
from sparkdec.server.choices import Choice, response
from sparkdec.server.engine_loop import Snapshot
from sparkdec.server.streaming import _ChoiceStream
from sparkdec.tokenizer import Tokenizer

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
TEXT = "Let me check.\n" + CALL + "\n" + CALL.replace("Paris", "Oslo")


def test_parse_returns_calls_and_the_text_around_them():
    content, calls = tools.parse(TEXT)
    assert content == "Let me check.\n\n" and [c["function"]["name"] for c in calls] == ["get_weather"] * 2
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris", "days": 2},
                                                                       {"city": "Oslo", "days": 2}]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert len({c["id"] for c in calls}) == 2
    content, calls = tools.parse(CALL)
    assert content is None and len(calls) == 1  # nothing but a call: no content
    broken = "<tool_call>{not json}</tool_call> and <tool_call>[1, 2]</tool_call>"
    assert tools.parse(broken) == (broken, [])  # kept as written
    assert tools.parse("plain answer") == ("plain answer", [])


def test_streamable_holds_back_calls_and_a_tag_being_written():
    assert tools.streamable("Let me check.\n<tool_call>\n{") == "Let me check.\n"
    assert tools.streamable("Let me check.\n<tool_") == "Let me check.\n"
    assert tools.streamable("a < b") == "a < b"


def _choice(offered: bool) -> Choice:
    return Choice(0, "r-0", [1, 2], SamplingParams(max_tokens=50), tools=offered)


def test_responses_carry_tool_calls_whole_and_streamed():
    final = Snapshot(TEXT, 40, "stop", {"enabled": True})
    body = response("chat", "r", "m", [_choice(True)], [final])
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Let me check.\n\n"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather"] * 2
    plain = response("chat", "r", "m", [_choice(False)], [final])["choices"][0]  # no tools offered: text as is
    assert plain["message"] == {"role": "assistant", "content": TEXT} and plain["finish_reason"] == "stop"
    # streamed: the text before the first call as it comes, each call once its block closes, then the finish
    stream = _ChoiceStream(_choice(True), "r", "m", chat=True)
    events = []
    for k in range(1, len(TEXT), 7):
        events += stream.events(Snapshot(TEXT[:k], k, None))
    events += stream.events(final)
    chunks = [json.loads(e[len("data: "):]) for e in events]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == "Let me check.\n\n"
    streamed_calls = [t for d in deltas for t in d.get("tool_calls", [])]
    assert [t["index"] for t in streamed_calls] == [0, 1]
    first = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert first < len(deltas) - 3  # the first call went out before the output ended, the second later
    assert [t["function"]["arguments"] for t in streamed_calls] == [
        c["function"]["arguments"] for c in choice["message"]["tool_calls"]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


TEMPLATE = ("{%- if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}"
            "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
            "{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function.name }}</tool_call>{% endfor %}"
            "{%- endif %}<|im_end|>\n{% endfor %}"
            "{%- if add_generation_prompt %}<|im_start|>assistant\n"
            "{%- if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def test_chat_template_sees_tools_tool_calls_and_its_switches(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(DEFAULT_PAIR / "target" / "tokenizer.json", folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    tok = Tokenizer(folder)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    from sparkdec.server.protocol import ChatCompletionRequest

    req = ChatCompletionRequest.model_validate({"model": "m", "tools": [weather], "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                             "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "chat_template_kwargs": {"enable_thinking": False, "messages": "ignored"}})
    text = tok.apply_chat_template(req.template_messages(), True, req.tools, req.chat_template_kwargs)
    assert text.startswith("TOOLS:get_weather;<|im_start|>user") and "<tool_call>get_weather</tool_call>" in text
    assert "<|im_start|>tool\nsunny<|im_end|>" in text and text.endswith("<think>\n\n</think>\n\n")
    assert req.calls_tools


THINKING = "<think>\nThe user wants the weather.\n</think>\n\n" + CALL


def test_reasoning_comes_apart_from_content_and_calls_whole_and_streamed():
    from sparkdec.server.reasoning import split

    assert split(THINKING, True) == ("The user wants the weather.", CALL)
    assert split("<think>\nstill thinking", True) == ("still thinking", "")  # cut by max_tokens
    assert split("No thinking here.", True) == ("", "No thinking here.")
    for k in range(len(THINKING) + 1):  # a running text's parts are prefixes of the final ones
        r, c = split(THINKING[:k], False)
        assert "The user wants the weather.".startswith(r) and CALL.startswith(c), k
    c = Choice(0, "r-0", [1], SamplingParams(max_tokens=50), tools=True, reasoning=True)
    final = Snapshot(THINKING, 30, "stop")
    message = response("chat", "r", "m", [c], [final])["choices"][0]["message"]
    assert message["reasoning_content"] == "The user wants the weather." and message["content"] is None
    assert [t["function"]["name"] for t in message["tool_calls"]] == ["get_weather"]
    stream = _ChoiceStream(c, "r", "m", chat=True)
    events = [e for k in range(1, len(THINKING), 5) for e in stream.events(Snapshot(THINKING[:k], k, None))]
    deltas = [json.loads(e[len("data: "):])["choices"][0]["delta"] for e in events + stream.events(final)]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "The user wants the weather."
    assert "".join(d.get("content", "") for d in deltas) == ""
    assert [t["function"]["name"] for d in deltas for t in d.get("tool_calls", [])] == ["get_weather"]


def test_structured_output_lets_the_model_think_first():
    """With a reasoning parser, a chat's structured output may begin with a <think> block (grammar_matcher.py), when
    the tokenizer has both tokens."""
    from types import SimpleNamespace

    from sparkdec import Guided, SamplingParams
    from sparkdec.server.choices import _guided_after_thinking

    def engine(has_tokens: bool):
        return SimpleNamespace(tokenizer=SimpleNamespace(token_to_id=lambda t: 7 if has_tokens else None))

    params = SamplingParams(guided=Guided(json=True))
    assert _guided_after_thinking(engine(True), params, True).guided.thinking == ("<think>", "</think>")
    assert _guided_after_thinking(engine(False), params, True).guided.thinking is None
    assert _guided_after_thinking(engine(True), params, False).guided.thinking is None
    assert _guided_after_thinking(engine(True), SamplingParams(), True).guided is None


def test_a_prompt_that_opened_the_thinking_block():
    """A chat template that opens <think> in the prompt (Qwen3 thinking-only models): the output's text up to
    </think> is reasoning_content, whole and streamed."""
    choice = Choice(0, "r-0", [1], SamplingParams(), reasoning=True, thinking_open=True)
    text = "let me think\n</think>\n\nIt is 4."
    message = response("chat", "r", "m", [choice], [Snapshot(text, 9, "stop", {"enabled": True})])["choices"][0]
    assert message["message"]["reasoning_content"] == "let me think" and message["message"]["content"] == "It is 4."
    stream = _ChoiceStream(choice, "r", "m", chat=True)
    events = [e for k in range(1, len(text)) for e in stream.events(Snapshot(text[:k], k, None))]
    events += stream.events(Snapshot(text, 9, "stop", {"enabled": True}))
    deltas = [json.loads(e[len("data: "):])["choices"][0]["delta"] for e in events]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "let me think"
    assert "".join(d.get("content", "") for d in deltas) == "It is 4."


def test_written_call_reads_a_call_as_far_as_it_is_written():
    body = '{"name": "get_weather", "arguments": {"city": "Paris", "when": {"day": 2}}}'
    assert tools.written_call(body) == ("get_weather", '{"city": "Paris", "when": {"day": 2}}', True)
    assert tools.written_call(body[:12]) == (None, "", False)  # the name not closed yet
    assert tools.written_call(body[:50]) == ("get_weather", body[37:50], False)  # the arguments so far
    for k in range(len(body)):  # the arguments so far are a prefix of the whole
        assert '{"city": "Paris", "when": {"day": 2}}'.startswith(tools.written_call(body[:k])[1]), k
    assert tools.written_call('{"arguments": {"a": 1}, "name": "f"}') == ("f", '{"a": 1}', True)
    assert tools.written_call('{"name": "f", "arguments": "{\\"a\\": 1}"}') == ("f", "", False)  # a string: whole
    assert tools.parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')[1][0]["function"][
        "arguments"] == '{"a": 1}'


def _forced() -> Choice:
    from sparkdec import Guided

    guided = Guided(tool_calls=(("get_weather", '{"type": "object"}'),), max_calls=2)
    return Choice(0, "r-0", [1, 2], SamplingParams(max_tokens=50, guided=guided), tools=True)


def _stream(choice: Choice, text: str, final: Snapshot, step: int = 3) -> list[dict]:
    stream = _ChoiceStream(choice, "r", "m", chat=True)
    events = [e for k in range(1, len(text), step) for e in stream.events(Snapshot(text[:k], k, None))]
    return [json.loads(e[len("data: "):])["choices"][0] for e in events + stream.events(final)]


def test_forced_calls_stream_their_name_then_their_arguments_as_written():
    """A grammar-forced call goes out once its name is written, then its arguments piece by piece; the pieces add up
    to the whole response's arguments, and a call cut by max_tokens is a call with the arguments written so far."""
    text = CALL + "\n" + CALL.replace("Paris", "Oslo")
    final = Snapshot(text, 40, "stop")
    whole = response("chat", "r", "m", [_forced()], [final])["choices"][0]["message"]["tool_calls"]
    chunks = _stream(_forced(), text, final)
    pieces = [t for c in chunks for t in c["delta"].get("tool_calls", [])]
    for k, call in enumerate(whole):
        mine = [t for t in pieces if t["index"] == k]
        assert mine[0]["function"]["name"] == "get_weather" and mine[0]["id"].startswith("call_")
        assert all("id" not in t and "name" not in t["function"] for t in mine[1:])
        assert len(mine) > 3 and "".join(t["function"]["arguments"] for t in mine) == call["function"]["arguments"]
    assert chunks[-1]["finish_reason"] == "tool_calls"
    first_piece = next(i for i, c in enumerate(chunks) if c["delta"].get("tool_calls"))
    assert first_piece < len(chunks) / 4  # the first call started long before its block closed
    unforced = [t for c in _stream(_choice(True), text, final) for t in c["delta"].get("tool_calls", [])]
    assert [t["index"] for t in unforced] == [0, 1]  # without the grammar: each call whole once its block closes
    cut = CALL[:CALL.index("Paris") + 3]
    message = response("chat", "r", "m", [_forced()], [Snapshot(cut, 20, "length")])["choices"][0]
    assert message["finish_reason"] == "length" and message["message"]["content"] is None
    assert [c["function"]["arguments"] for c in message["message"]["tool_calls"]] == ['{"city": "Par']
    chunks = _stream(_forced(), cut, Snapshot(cut, 20, "length"), step=1)
    assert "".join(t["function"]["arguments"] for c in chunks for t in c["delta"].get("tool_calls", [])) == \
        '{"city": "Par'
    assert chunks[-1]["finish_reason"] == "length" and not any(c["delta"].get("content") for c in chunks)


def test_a_closing_tag_inside_a_string_and_calls_cut_by_a_stop():
    """A call's JSON is read whole before its closing tag (a tag inside a string does not end it), streamed and not;
    a forced call cut by a stop string keeps the engine's finish reason, not tool_calls; the arguments are those
    JSON reads ("arguments" before "parameters", the last duplicate)."""
    text = ('<tool_call>\n{"name": "write", "arguments": {"s": "a</tool_call>b"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {"b": 2}}\n</tool_call>')
    text = "\n\n" + text  # (whitespace before calls: no content, whole or streamed)
    for choice in (_forced(), _choice(True)):
        final = Snapshot(text, 40, "stop")
        body = response("chat", "r", "m", [choice], [final])["choices"][0]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in body["message"]["tool_calls"]]
        assert calls == [("write", '{"s": "a</tool_call>b"}'), ("get_weather", '{"b": 2}')]
        assert body["message"]["content"] is None and body["finish_reason"] == "tool_calls"
        chunks = _stream(choice, text, final, step=1)
        joined = {}
        for t in (t for c in chunks for t in c["delta"].get("tool_calls", [])):
            joined.setdefault(t["index"], [t["function"].get("name"), ""])[1] += t["function"]["arguments"]
        assert [tuple(joined[k]) for k in sorted(joined)] == calls
        assert not any(c["delta"].get("content") for c in chunks)
    cut = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "'  # stop=["Oslo"] ended it here
    body = response("chat", "r", "m", [_forced()], [Snapshot(cut, 12, "stop")])["choices"][0]
    assert body["finish_reason"] == "stop" and body["message"]["tool_calls"][0]["function"]["arguments"] == '{"city": "'
    assert response("chat", "r", "m", [_choice(True)], [Snapshot(cut, 12, "stop")])["choices"][0]["message"] == {
        "role": "assistant", "content": cut}  # unforced: an unfinished block is content
    for body, args in (('{"name": "f", "arguments": {"a": 1}, "parameters": {"b": 2}}', '{"a": 1}'),
                       ('{"name": "f", "arguments": {"a": 1}, "arguments": [1]}', "[1]"),
                       ('{"name": "f", "parameters": {"b": 2}, "arguments": null}', "null")):
        assert tools.parse(tools.OPEN + body + tools.CLOSE)[1][0]["function"]["arguments"] == args, body


def test_chat_templates_render_as_hugging_face_renders_them_and_sandboxed(tmp_path):
    """Tools listed through `tojson` come out as Hugging Face writes them (keys in order, no HTML escapes: jinja's
    own tojson does both), loop controls work, and a template cannot reach Python's internals (a request may bring
    its own template)."""
    import jinja2
    from transformers import PreTrainedTokenizerFast

    template = ("{%- if tools %}<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>{% endif %}"
                "{%- for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}<|im_start|>{{ m.role }}\n"
                "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    shutil.copy(DEFAULT_PAIR / "target" / "tokenizer.json", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    tools_ = [{"type": "function", "function": {"name": "w", "description": "a < b & c's \"x\" é",
                                                "parameters": {"type": "object", "z": 1, "a": 2}}}]
    messages = [{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]
    ours = Tokenizer(tmp_path).apply_chat_template(messages, True, tools_)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"), chat_template=template)
    assert ours == hf.apply_chat_template(messages, tools=tools_, tokenize=False, add_generation_prompt=True)
    assert '"z": 1, "a": 2' in ours and "again" not in ours
    with pytest.raises(jinja2.exceptions.SecurityError):
        Tokenizer(tmp_path).apply_chat_template(messages, True, None, None, "{{ ''.__class__.__mro__ }}")
