"""`sparkdec serve` end to end: a real server process on a free loopback port, driven by the official openai
client (and httpx for raw bodies, disconnects and SIGTERM). Uses models/sparkdec-tiny when it is shipped,
otherwise a small random target + drafter with a freshly trained byte-level BPE tokenizer."""
from __future__ import annotations

import asyncio
import builtins
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

openai = pytest.importorskip("openai")

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "models" / "sparkdec-tiny"
MODEL = "tiny"
GREEDY = dict(temperature=0.0)
LONG = {"ignore_eos": True}


def _build_random_pair(root: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers import GEOMETRIES, make_draft, make_target
    from tokenizers import pre_tokenizers, trainers

    import json.decoder
    import json.encoder
    from sparkdec.train.tokenizer import SPECIAL_TOKENS, new_tokenizer, save_tokenizer, special_token_ids

    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=512, min_frequency=2, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = [Path(m.__file__).read_text() for m in (json.decoder, json.encoder, threading)]
    tok.train_from_iterator(texts, trainer=trainer)
    # untied weights: a tied random target only repeats its input token, which would make equality tests vacuous
    geometry = dict(GEOMETRIES["untied_mha"], vocab_size=tok.get_vocab_size())
    target = make_target(root / "target", **geometry)
    save_tokenizer(tok, target)
    draft = make_draft(root / "draft", target, mask_token_id=special_token_ids(tok).mask, num_layers=1)
    return target, draft


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path]:
    if (TINY / "target" / "tokenizer.json").is_file() and (TINY / "draft" / "config.json").is_file():
        return TINY / "target", TINY / "draft"
    return _build_random_pair(tmp_path_factory.mktemp("pair"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, pair, log_path: Path, *extra: str):
        self.log_path = log_path
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sparkdec", "serve", "--model", str(pair[0]), "--draft", str(pair[1]),
               "--device", "cpu", "--port", str(self.port), "--served-model-name", MODEL, "--log-level", "warning",
               *extra]
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")  # tiny ops: threads only contend
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server did not come up:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log_path.read_text()[-4000:]

    def client(self, **kw) -> "openai.OpenAI":
        return openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=120, **kw)

    def metric(self, name: str, labels: str = "") -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.log.close()


@pytest.fixture(scope="module")
def server(pair, tmp_path_factory):
    srv = Server(pair, tmp_path_factory.mktemp("log") / "server.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def small_server(pair, tmp_path_factory):
    """A function returning a live server with one running slot and no queue (the second request gets 503);
    it starts a new one when the last has exited (the SIGTERM test ends it)."""
    started: list[Server] = []

    def live() -> Server:
        if not started or started[-1].proc.poll() is not None:
            log = tmp_path_factory.mktemp("log") / "small-server.log"
            started.append(Server(pair, log, "--max-num-seqs", "1", "--max-queue", "0"))
        return started[-1]

    yield live
    for srv in started:
        srv.stop()


def _spec(resp) -> dict:
    return resp.model_extra["speculative"]


def _stream_text(create, chat: bool = False, **kw) -> tuple[str, list]:
    chunks = list(create(model=MODEL, stream=True, **kw))
    if chat:
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks
    return "".join(c.choices[0].text for c in chunks if c.choices), chunks


def test_models_health_and_completion(server, pair):
    client = server.client()
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}
    resp = client.completions.create(model=MODEL, prompt="def fibonacci(n):", max_tokens=12, extra_body=LONG, **GREEDY)
    choice = resp.choices[0]
    assert choice.finish_reason == "length" and resp.usage.completion_tokens == 12
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(pair[0] / "tokenizer.json"))
    assert resp.usage.prompt_tokens == len(tok.encode("def fibonacci(n):", add_special_tokens=False).ids)
    spec = _spec(resp)
    assert spec["enabled"] and spec["rounds"] > 0 and spec["num_draft_tokens"] >= spec["num_accepted_tokens"] >= 0
    assert len(spec["accepted_histogram"]) > 1 and sum(spec["accepted_histogram"]) == spec["rounds"]
    # token-id prompts give the same text as the string they encode
    ids = tok.encode("def fibonacci(n):", add_special_tokens=False).ids
    again = client.completions.create(model=MODEL, prompt=ids, max_tokens=12, extra_body=LONG, **GREEDY)
    assert again.choices[0].text == choice.text


def test_chat_equals_completion_of_the_template(server, pair):
    client = server.client()
    messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": "Sort a list."}]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, extra_body=LONG, **GREEDY)
    msg = chat.choices[0].message
    assert msg.role == "assistant" and chat.choices[0].finish_reason == "length"
    assert chat.usage.completion_tokens == 10 and _spec(chat)["rounds"] > 0
    from sparkdec.tokenizer import Tokenizer

    rendered = Tokenizer(pair[0]).apply_chat_template(messages)
    comp = client.completions.create(model=MODEL, prompt=rendered, max_tokens=10, extra_body=LONG, **GREEDY)
    assert comp.choices[0].text == msg.content
    assert comp.usage.prompt_tokens == chat.usage.prompt_tokens


@pytest.mark.parametrize("endpoint", ["completions", "chat.completions"])
def test_stream_equals_non_stream(server, endpoint):
    client = server.client()
    kw = dict(max_tokens=20, extra_body=LONG, **GREEDY)
    if endpoint == "completions":
        create, kw["prompt"] = client.completions.create, "import os\nimport sys\n"
    else:
        create, kw["messages"] = client.chat.completions.create, [{"role": "user", "content": "Hello there"}]
    full = create(model=MODEL, **kw)
    chat = endpoint != "completions"
    full_text = full.choices[0].message.content if chat else full.choices[0].text
    text, chunks = _stream_text(create, chat, stream_options={"include_usage": True}, **kw)
    assert text == full_text
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert finals[0].model_extra["speculative"] == _spec(full)  # same rounds and acceptance, greedy
    assert chunks[-1].usage.completion_tokens == 20 and not chunks[-1].choices


def test_stream_with_stop_string_equals_non_stream(server):
    client = server.client()
    kw = dict(model=MODEL, prompt="class Stack:\n    def push(self, x):", max_tokens=24, extra_body=LONG, **GREEDY)
    free = client.completions.create(**kw).choices[0].text
    # a stop string that first occurs after the start, with no U+FFFD (a transient incomplete character)
    start = next(i for i in range(6, len(free) - 3) if "\ufffd" not in free[i:i + 3])
    stop = free[start:start + 3]
    expected = free[:free.find(stop)]
    stopped = client.completions.create(stop=[stop], **kw).choices[0]
    assert stopped.text == expected and stopped.finish_reason == "stop"
    text, _ = _stream_text(client.completions.create, stop=[stop], **{k: v for k, v in kw.items() if k != "model"})
    assert text == expected


def test_greedy_identical_with_speculation_on_and_off(server):
    client = server.client()
    prompts = ["def add(a, b):", "for i in range(10):\n"]
    for prompt in prompts:
        outs = {}
        for name, extra in [("off", {"speculative": False}), ("on", {"speculative": True}),
                            ("len1", {"speculative": True, "verify_len": 1}),
                            ("conf", {"speculative": True, "min_confidence": 0.5})]:
            outs[name] = client.completions.create(model=MODEL, prompt=prompt, max_tokens=16,
                                                   extra_body={**LONG, **extra}, **GREEDY)
        texts = {name: r.choices[0].text for name, r in outs.items()}
        assert len(set(texts.values())) == 1, texts
        assert _spec(outs["off"])["rounds"] == 0 and not _spec(outs["off"])["enabled"]
        assert _spec(outs["on"])["rounds"] > 0
        assert _spec(outs["len1"])["num_draft_tokens"] <= _spec(outs["len1"])["rounds"]


def test_seeded_sampling_is_reproducible_and_streams_the_same(server):
    client = server.client()
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=16, temperature=0.9, top_p=0.95, seed=1234,
              extra_body=LONG)
    a = client.completions.create(**kw).choices[0].text
    assert client.completions.create(**kw).choices[0].text == a
    assert _stream_text(client.completions.create, **{k: v for k, v in kw.items() if k != "model"})[0] == a


def test_64_concurrent_streams_equal_their_single_request_outputs(server):
    client = server.client()
    names = [n for n in dir(builtins) if n.islower()]
    prompts = [f"value = {names[i * 7 % len(names)]}({i}) and {names[i]}" for i in range(64)]
    kw = dict(max_tokens=8, extra_body=LONG, **GREEDY)
    single = [client.completions.create(model=MODEL, prompt=p, **kw).choices[0].text for p in prompts]
    assert len(set(single)) > 16  # the outputs differ, so a mix-up between requests would show

    async def run_all():
        aclient = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)

        async def one(p):
            stream = await aclient.completions.create(model=MODEL, prompt=p, stream=True, **kw)
            parts, finish = [], None
            async for chunk in stream:
                if chunk.choices:
                    parts.append(chunk.choices[0].text)
                    finish = chunk.choices[0].finish_reason or finish
            return "".join(parts), finish

        try:
            return await asyncio.gather(*(one(p) for p in prompts))
        finally:
            await aclient.close()

    results = asyncio.run(run_all())
    assert [r[1] for r in results] == ["length"] * 64
    assert [r[0] for r in results] == single


def test_n_choices_and_prompt_lists_equal_their_single_requests(server):
    client = server.client()
    kw = dict(model=MODEL, max_tokens=10, extra_body=LONG)
    # seeded sampling: choice i samples with seed + i, so each choice equals a single request with that seed
    many = client.completions.create(prompt="def area(r):", n=3, temperature=1.0, seed=77, **kw)
    assert [c.index for c in many.choices] == [0, 1, 2]
    single = [client.completions.create(prompt="def area(r):", temperature=1.0, seed=77 + i, **kw).choices[0].text
              for i in range(3)]
    assert [c.text for c in many.choices] == single and len(set(single)) > 1
    assert many.usage.completion_tokens == 30 and many.usage.prompt_tokens == client.completions.create(
        prompt="def area(r):", **kw).usage.prompt_tokens
    per_choice = [c.model_extra["speculative"] for c in many.choices]
    assert _spec(many)["rounds"] == sum(s["rounds"] for s in per_choice) > 0
    assert sum(_spec(many)["accepted_histogram"]) == _spec(many)["rounds"]
    # a list of prompts, n of each: index = prompt * n + i; greedy choices equal the prompt's single output
    prompts = ["import json\n", "class Node:"]
    batch = client.completions.create(prompt=prompts, n=2, **GREEDY, **kw)
    alone = [client.completions.create(prompt=p, **GREEDY, **kw).choices[0].text for p in prompts]
    assert [c.index for c in batch.choices] == [0, 1, 2, 3]
    assert [c.text for c in batch.choices] == [alone[0], alone[0], alone[1], alone[1]]
    # streamed: each index's pieces join to its non-streamed text; one finish per choice; usage over all
    chunks = list(client.completions.create(prompt=prompts, n=2, stream=True, stream_options={"include_usage": True},
                                            **GREEDY, **kw))
    texts, finishes = {}, {}
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                finishes[c.index] = c.finish_reason
    assert texts == {c.index: c.text for c in batch.choices} and finishes == {i: "length" for i in range(4)}
    assert chunks[-1].usage.completion_tokens == 40
    # chat with n, and echo
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], n=2,
                                          max_tokens=6, seed=5, temperature=0.8, extra_body=LONG)
    assert [c.index for c in chat.choices] == [0, 1] and chat.usage.completion_tokens == 12
    echoed = client.completions.create(prompt="x = [", echo=True, **GREEDY, **kw).choices[0].text
    assert echoed == "x = [" + client.completions.create(prompt="x = [", **GREEDY, **kw).choices[0].text
    streamed = _stream_text(client.completions.create, prompt="x = [", echo=True, **GREEDY,
                            **{k: v for k, v in kw.items() if k != "model"})[0]
    assert streamed == echoed


def test_logprobs_completions_and_chat_streamed_or_not(server):
    client = server.client()
    kw = dict(model=MODEL, prompt="def parse(line):\n", max_tokens=12, logprobs=3, extra_body=LONG, **GREEDY)
    on = client.completions.create(**kw).choices[0]
    off = client.completions.create(**{**kw, "extra_body": {**LONG, "speculative": False}}).choices[0]
    lp = on.logprobs
    assert lp.tokens == off.logprobs.tokens and lp.token_logprobs == off.logprobs.token_logprobs  # speculation on/off
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 12
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:k]) for k in range(12)]
    for tok, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 3 <= len(top) <= 4 and value <= 0 and top[tok] == value == max(top.values())  # greedy: the best
    chunks = list(client.completions.create(stream=True, **{k: v for k, v in kw.items()}))
    streamed = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
    assert sum((s.tokens for s in streamed), []) == lp.tokens
    assert sum((s.token_logprobs for s in streamed), []) == lp.token_logprobs
    assert sum((s.text_offset for s in streamed), []) == lp.text_offset
    # chat: content entries with bytes that spell the message, top_logprobs alternatives
    ckw = dict(model=MODEL, messages=[{"role": "user", "content": "Write a loop."}], max_tokens=10, logprobs=True,
               top_logprobs=2, extra_body=LONG, temperature=0.7, seed=9)
    chat = client.chat.completions.create(**ckw).choices[0]
    content = chat.logprobs.content
    assert len(content) == 10 and all(len(e.top_logprobs) == 2 for e in content)
    assert b"".join(bytes(e.bytes) for e in content).decode(errors="replace") == chat.message.content
    parts = [c.choices[0].logprobs.content for c in client.chat.completions.create(stream=True, **ckw)
             if c.choices and c.choices[0].logprobs]
    assert [e.model_dump() for part in parts for e in part] == [e.model_dump() for e in content]
    assert client.chat.completions.create(**{**ckw, "logprobs": False, "top_logprobs": None}).choices[0].logprobs is None
    # echo with logprobs (how evaluation harnesses score a text): the prompt's tokens first, the first one unscored
    ekw = dict(model=MODEL, prompt="def parse(line):\n", max_tokens=1, logprobs=1, echo=True, **GREEDY)
    echoed = client.completions.create(**ekw).choices[0]
    n_prompt = client.completions.create(**{**ekw, "echo": False}).usage.prompt_tokens
    elp = echoed.logprobs
    assert len(elp.tokens) == n_prompt + 1 and elp.token_logprobs[0] is None and elp.top_logprobs[0] is None
    assert "".join(elp.tokens[:n_prompt]) == "def parse(line):\n" and echoed.text.startswith("def parse(line):\n")
    assert all(v < 0 for v in elp.token_logprobs[1:]) and elp.tokens[-1] == lp.tokens[0]
    assert elp.token_logprobs[-1] == lp.token_logprobs[0]
    parts = [c.choices[0].logprobs for c in client.completions.create(stream=True, **ekw)
             if c.choices and c.choices[0].logprobs]
    assert sum((p.token_logprobs for p in parts), []) == elp.token_logprobs


def test_penalties_and_logit_bias(server, pair):
    """Penalties and logit_bias reach the sampler: a bias of -100 on the greedy first token moves it; penalties change
    a greedy text."""
    from sparkdec.tokenizer import Tokenizer

    client = server.client()
    kw = dict(model=MODEL, prompt="def parse(line):\n", max_tokens=40, temperature=0)
    plain = client.completions.create(**kw).choices[0].text
    first = Tokenizer(pair[0]).encode(plain)[0]  # byte-level BPE: the text's first token is the first one generated
    moved = client.completions.create(**kw, logit_bias={str(first): -100}).choices[0].text
    assert moved and Tokenizer(pair[0]).encode(moved)[0] != first
    assert client.completions.create(**kw, logit_bias={}).choices[0].text == plain
    penalized = client.completions.create(**kw, frequency_penalty=2.0, presence_penalty=2.0).choices[0].text
    assert penalized != plain
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                          temperature=0.7, seed=1, extra_body={"repetition_penalty": 1.2, "min_p": 0.1})
    assert chat.choices[0].message.content is not None


def test_structured_outputs(server):
    """response_format (json_object, json_schema), guided_choice / guided_regex and structured_outputs shape the
    output: JSON that parses and follows the schema, one of the choices, a regex match."""
    client = server.client()
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 30}},
              "required": ["city", "days"]}
    messages = [{"role": "user", "content": "Plan a trip. Reply in JSON."}]
    for fmt in ({"type": "json_schema", "json_schema": {"name": "trip", "schema": schema, "strict": True}},
                {"type": "json_object"}):
        out = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=200, temperature=0,
                                             response_format=fmt).choices[0]
        assert out.finish_reason == "stop", out.message.content
        value = json.loads(out.message.content)
        if fmt["type"] == "json_schema":
            assert set(value) == {"city", "days"} and 1 <= value["days"] <= 30 and isinstance(value["city"], str)
    kw = dict(model=MODEL, prompt="def parse(line):\n", max_tokens=40, temperature=0.9, seed=4)
    choice = client.completions.create(**kw, extra_body={"guided_choice": ["red", "green", "blue"]}).choices[0]
    assert choice.text in ("red", "green", "blue") and choice.finish_reason == "stop"
    regex = client.completions.create(**kw, extra_body={"guided_regex": r"[a-z]{2,8}=\d{1,2}"}).choices[0].text
    assert re.fullmatch(r"[a-z]{2,8}=\d{1,2}", regex), regex
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        **kw, stream=True, extra_body={"structured_outputs": {"regex": r"[a-z]{2,8}=\d{1,2}"}}) if c.choices)
    assert streamed == regex  # the same seed and the same guide, streamed


def test_forced_tool_calls(server):
    """tool_choice "required" and a named function: the output is Qwen3 <tool_call> blocks whose arguments follow the
    tool's schema, returned as tool_calls, the same whole and streamed."""
    client = server.client()
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 16}}, "required": ["city"]}}}
    clock = {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["tz"]}}}
    messages = [{"role": "user", "content": "What is the weather in Paris, and the time?"}]
    for choice, names in (("required", {"get_weather", "get_time"}),
                          ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"})):
        kw = dict(model=MODEL, messages=messages, tools=[weather, clock], tool_choice=choice, max_tokens=400,
                  temperature=0.8, seed=3)
        out = client.chat.completions.create(**kw).choices[0]
        assert out.finish_reason == "tool_calls" and out.message.content is None
        calls = out.message.tool_calls
        assert calls and all(c.function.name in names for c in calls)
        for c in calls:
            args = json.loads(c.function.arguments)
            assert set(args) == ({"city"} if c.function.name == "get_weather" else {"tz"})
        streamed = [t for c in client.chat.completions.create(**kw, stream=True)
                    if c.choices and c.choices[0].delta.tool_calls for t in c.choices[0].delta.tool_calls]
        joined = {}  # index -> [name, arguments]: the name in a call's first piece, its arguments in pieces
        for t in streamed:
            joined.setdefault(t.index, [t.function.name, ""])[1] += t.function.arguments or ""
        assert [tuple(joined[k]) for k in sorted(joined)] == [(c.function.name, c.function.arguments) for c in calls]
        assert len(streamed) > len(calls)  # (arguments streamed in pieces as they were written)


def test_tokenize_and_detokenize(server, pair):
    """/tokenize counts a prompt's or a chat's tokens as generation would see them; /detokenize turns ids back."""
    from sparkdec.tokenizer import Tokenizer

    tok = Tokenizer(pair[0])
    r = httpx.post(server.url + "/tokenize", json={"model": MODEL, "prompt": "def parse(line):"}, timeout=30).json()
    assert r["tokens"] == tok.encode("def parse(line):") and r["count"] == len(r["tokens"]) and r["max_model_len"] > 0
    messages = [{"role": "user", "content": "hi"}]
    chat = httpx.post(server.url + "/tokenize", json={"messages": messages}, timeout=30).json()
    assert chat["tokens"] == tok.encode(tok.apply_chat_template(messages))
    back = httpx.post(server.url + "/detokenize", json={"model": MODEL, "tokens": r["tokens"]}, timeout=30).json()
    assert back == {"prompt": "def parse(line):"}
    for path, body, status, words in [("/tokenize", {"prompt": "x", "messages": messages}, 400, "exactly one of"),
                                      ("/tokenize", {"model": "gpt-4", "prompt": "x"}, 404, "does not exist"),
                                      ("/detokenize", {"tokens": [10 ** 8]}, 400, "outside the vocabulary")]:
        resp = httpx.post(server.url + path, json=body, timeout=30)
        assert resp.status_code == status and words in _error_of(resp)["message"], resp.text


def test_api_key_and_chat_template_options(pair, tmp_path):
    """--api-key: every route but /health and /metrics wants the key (401 in OpenAI's shape without it);
    --chat-template: a template file replaces the tokenizer's, for generation and /tokenize alike."""
    template = tmp_path / "template.jinja"
    template.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] ")
    srv = Server(pair, tmp_path / "server.log", "--api-key", "sekret-1", "--chat-template", str(template),
                 "--trust-request-chat-template")
    try:
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
        assert httpx.get(srv.url + "/metrics", timeout=10).status_code == 200
        for headers, words in (({}, "no API key was sent"), ({"Authorization": "Bearer nope"}, "not this server's")):
            resp = httpx.get(srv.url + "/v1/models", headers=headers, timeout=10)
            assert resp.status_code == 401 and words in _error_of(resp)["message"]
            assert _error_of(resp)["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            srv.client().models.list()
        client = srv.client(default_headers={"Authorization": "Bearer sekret-1"})
        assert [m.id for m in client.models.list().data] == [MODEL]
        messages = [{"role": "user", "content": "hi"}]
        resp = httpx.post(srv.url + "/tokenize", json={"messages": messages},
                          headers={"Authorization": "Bearer sekret-1"}, timeout=30)
        from sparkdec.tokenizer import Tokenizer

        assert resp.json()["tokens"] == Tokenizer(pair[0]).encode("[user] hi\n[assistant] ")
        out = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, **GREEDY)
        alone = client.completions.create(model=MODEL, prompt="[user] hi\n[assistant] ", max_tokens=4, **GREEDY)
        assert out.choices[0].message.content == alone.choices[0].text  # the chat rendered with the new template
        # a request's own template (this server trusts them), for generation and /tokenize alike; a bad one: 400
        own = "{% for m in messages %}<{{ m.content }}>{% endfor %}"
        chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                              extra_body={"chat_template": own}, **GREEDY)
        assert chat.choices[0].message.content == client.completions.create(
            model=MODEL, prompt="<hi>", max_tokens=4, **GREEDY).choices[0].text
        counted = httpx.post(srv.url + "/tokenize", json={"messages": messages, "chat_template": own},
                             headers={"Authorization": "Bearer sekret-1"}, timeout=30)
        assert counted.json()["tokens"] == Tokenizer(pair[0]).encode("<hi>")
        for bad in ("{% for %}", "{{ 1 / 0 }}", "{{ ''.__class__.__mro__ }}"):  # syntax, runtime, sandbox
            resp = httpx.post(srv.url + "/v1/chat/completions", headers={"Authorization": "Bearer sekret-1"},
                              json={"model": MODEL, "messages": messages, "chat_template": bad}, timeout=30)
            assert resp.status_code == 400 and "chat_template does not render" in _error_of(resp)["message"], bad
    finally:
        srv.stop()
    from sparkdec.server.serve import chat_template

    assert chat_template("{{ messages[0].content }}") == "{{ messages[0].content }}"  # a template given inline
    with pytest.raises(SystemExit, match="neither a file nor a Jinja template"):
        chat_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(SystemExit, match="does not compile"):
        chat_template("{% for m in %}")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from sparkdec.server.auth import require_key

    app = FastAPI()
    app.get("/v1/models")(lambda: {"data": []})
    require_key(app, "kö-1")  # (a key beyond ASCII, sent as its UTF-8 bytes)
    local = TestClient(app)
    assert local.get("/v1/models", headers={"Authorization": "Bearer kö-1".encode()}).status_code == 200
    assert local.get("/v1/models", headers={"Authorization": "Bearer ko-1"}).status_code == 401


def test_vllm_output_fields(server, pair):
    """truncate_prompt_tokens keeps the prompt's last tokens; include_stop_str_in_output and skip_special_tokens reach
    the engine; continue_final_message, which is not implemented, is refused rather than ignored."""
    from sparkdec.tokenizer import Tokenizer

    client, tok = server.client(), Tokenizer(pair[0])
    prompt = "import sys\nimport os\n\n\ndef main(argv):\n    "
    ids = tok.encode(prompt)
    kw = dict(model=MODEL, max_tokens=12, **GREEDY)
    cut = client.completions.create(prompt=prompt, extra_body={"truncate_prompt_tokens": 5}, **kw)
    alone = client.completions.create(prompt=ids[-5:], **kw)
    assert cut.choices[0].text == alone.choices[0].text and cut.usage.prompt_tokens == 5
    text = alone.choices[0].text
    stop = text[2:5]
    kept = client.completions.create(prompt=ids[-5:], stop=[stop], extra_body={"include_stop_str_in_output": True}, **kw)
    assert kept.choices[0].text == text[:text.index(stop) + len(stop)]
    echoed = client.completions.create(prompt=prompt, echo=True, extra_body={"truncate_prompt_tokens": 5}, **kw)
    assert echoed.choices[0].text == tok.decode(ids[-5:], False) + text  # the kept tokens echoed
    whole = client.completions.create(prompt=prompt, extra_body={"truncate_prompt_tokens": -1,
                                                                 "continue_final_message": None}, **kw)
    assert whole.usage.prompt_tokens == len(ids)  # -1: as much as the window holds (all of this one)
    for body, words in (({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens must be a positive integer"),
                        ({"continue_final_message": True}, "continue_final_message is not supported"),
                        ({"use_beam_search": True}, "use_beam_search is not supported"),
                        ({"allowed_token_ids": [10 ** 7]}, "allowed_token_ids names token ids")):
        resp = httpx.post(server.url + "/v1/completions", json={"model": MODEL, "prompt": "x", **body}, timeout=30)
        assert resp.status_code == 400 and words in _error_of(resp)["message"], resp.text
    only = tok.encode("a")
    limited = client.completions.create(prompt=ids[-5:], extra_body={"allowed_token_ids": only}, **kw)
    assert len(only) == 1 and limited.choices[0].text == "a" * 12  # (one token allowed: it, every time)
    messages = [{"role": "user", "content": "hi"}]  # a request's own template (untrusted), legacy functions, chat echo
    url = server.url + "/v1/chat/completions"
    for body, words in (({"chat_template": "{{ 1 }}"}, "--trust-request-chat-template"),
                        ({"functions": [{"name": "f"}]}, "offer them as tools instead"),
                        ({"echo": True}, "echo is not supported")):
        resp = httpx.post(url, json={"model": MODEL, "messages": messages, **body}, timeout=30)
        assert resp.status_code == 400 and words in _error_of(resp)["message"], resp.text


def _error_of(resp: httpx.Response) -> dict:
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def test_bad_inputs_get_status_and_message(server):
    url = server.url + "/v1/completions"
    ok = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    cases = [
        (b'{"model": "tiny", "prompt": ', 400, "not valid JSON"),
        (b'["a list"]', 400, "JSON object"),
        ({**ok, "model": "gpt-4"}, 404, "does not exist"),
        ({**ok, "n": 0}, 400, "n must be a positive integer"),
        ({**ok, "n": 10**6}, 400, "lower n"),
        ({**ok, "best_of": 3}, 400, "best_of must equal n"),
        ({**ok, "prompt": ["fine", ""]}, 400, "empty"),
        ({**ok, "logprobs": 21}, 400, "logprobs must be an integer from 0 to 20"),
        ({**ok, "presence_penalty": 2.5}, 400, "presence_penalty must be in [-2, 2]"),
        ({**ok, "logit_bias": {"the": 1}}, 400, "logit_bias keys must be token ids"),
        ({**ok, "logit_bias": {"99999999": 1}}, 400, "outside the vocabulary"),
        ({**ok, "bad_words": [""]}, 400, "bad_words must be non-empty strings"),
        ({**ok, "guided_whitespace_pattern": " *"}, 400, "guided_whitespace_pattern is not supported"),
        ({**ok, "min_tokens": 5}, 400, "min_tokens must be an integer from 0 to max_tokens (2)"),
        ({**ok, "response_format": {"type": "xml"}}, 400, "response_format type must be"),
        ({**ok, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 400, "json_schema.schema"),
        ({**ok, "guided_regex": "(ab"}, 400, "the guided regex does not compile"),
        ({**ok, "guided_regex": "a+", "guided_choice": ["a"]}, 400, "each ask for a structured output; send one"),
        ({**ok, "guided_choice": ["a"], "ignore_eos": True}, 400, "ignore_eos cannot be combined"),
        ({**ok, "structured_outputs": {"xml": "<a/>"}}, 400, "structured_outputs does not support xml"),
        ({**ok, "structured_outputs": {"json": 5}}, 400, "guided json must be true"),
        ({**ok, "structured_outputs": {"json": {"type": "object"}, "json_object": True}}, 400, "send one"),
        ({**ok, "structured_outputs": {"json": False, "regex": "a+"}}, 200, ""),  # a kind left "off"
        ({**ok, "response_format": {"type": "json_schema", "json_schema": "{}"}}, 400, "json_schema.schema"),
        ({**ok, "max_tokens": 8, "guided_regex": "ab[^\\s\\S]"}, 400, "no token can follow"),  # a dead end
        ({**ok, "tool_choice": "required"}, 200, ""),  # completions: a stray field, ignored
        ({**ok, "stop_token_ids": [-3]}, 400, "stop_token_ids must be token ids"),
        ({**ok, "min_tokens": 0, "some_future_field": 3}, 200, ""),  # no effect: accepted
        ({**ok, "temperature": -1}, 400, "temperature"),
        ({**ok, "top_p": 0}, 400, "top_p"),
        ({**ok, "max_tokens": 0}, 400, "max_tokens"),
        ({**ok, "min_confidence": 2.0}, 400, "min_confidence"),
        ({**ok, "prompt": ""}, 400, "empty"),
        ({**ok, "prompt": [10**9]}, 400, "vocabulary"),
        ({**ok, "prompt": "hello world " * 2000}, 400, "context window"),
        ({**ok, "max_tokens": "many"}, 422, "max_tokens"),
        ({"model": MODEL}, 422, "prompt"),
    ]
    for body, status, words in cases:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        resp = httpx.post(url, content=content, headers={"content-type": "application/json"}, timeout=30)
        assert resp.status_code == status, (body if isinstance(body, bytes) else str(body)[:80], resp.text)
        assert status == 200 or words in _error_of(resp)["message"], resp.text
    chat = httpx.post(server.url + "/v1/chat/completions", json={"model": MODEL, "messages": []}, timeout=30)
    assert chat.status_code == 422 and "messages" in _error_of(chat)["message"]
    chat = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                      json={"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})
    assert chat.status_code == 400 and "needs logprobs: true" in _error_of(chat)["message"]
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    for extra, words in [({"tool_choice": "required"}, "offers no tools"),
                         ({"tools": [weather], "tool_choice": {"type": "function", "function": {"name": "f"}}},
                          "'f', which is not among the offered tools (get_weather)"),
                         ({"tools": [weather], "tool_choice": "always"}, 'tool_choice must be "auto", "none"'),
                         ({"tools": [weather], "tool_choice": "required", "response_format": {"type": "json_object"}},
                          "send one")]:
        chat = httpx.post(server.url + "/v1/chat/completions", timeout=30, json={
            "model": MODEL, "messages": [{"role": "user", "content": "x"}], **extra})
        assert chat.status_code == 400 and words in _error_of(chat)["message"], chat.text
    # tools, tool messages and template switches are accepted (this template ignores them)
    chat = httpx.post(server.url + "/v1/chat/completions", timeout=30, json={
        "model": MODEL, "max_tokens": 3, "tools": [weather], "chat_template_kwargs": {"enable_thinking": False},
        "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["role"] == "assistant"
    # the official client maps them to its exception types
    client = server.client()
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="context window"):
        client.completions.create(model=MODEL, prompt="x " * 3000)
    with pytest.raises(openai.BadRequestError, match="n must be a positive integer"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], n=-1)
    # the server still serves after all of that
    assert client.completions.create(model=MODEL, prompt="hi", max_tokens=2).usage.completion_tokens == 2


def _poll(predicate, timeout: float = 60.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_disconnect_mid_stream_aborts_and_frees_pages(server):
    assert _poll(lambda: server.metric("sparkdec:kv_cache_pages_used") == 0)
    aborted = server.metric("sparkdec:request_success_total", '{finished_reason="abort"}')
    body = {"model": MODEL, "prompt": "while True:", "max_tokens": 900, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", server.url + "/v1/completions", json=body) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            got = []
            for line in lines:  # NOTE: break, not a dropped generator: that would close the stream itself
                if line.startswith("data: "):
                    got.append(line)
                    if len(got) == 3:
                        break
            assert len(got) == 3 and server.metric("sparkdec:kv_cache_pages_used") > 0
        # leaving the block closes the connection mid-stream
    assert _poll(lambda: server.metric("sparkdec:kv_cache_pages_used") == 0), server.log_tail()
    assert _poll(lambda: server.metric("sparkdec:request_success_total", '{finished_reason="abort"}') == aborted + 1)
    # a non-streaming client that gives up is aborted too
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server.url + "/v1/completions", json={**body, "stream": False}, timeout=0.3)
    assert _poll(lambda: server.metric("sparkdec:request_success_total", '{finished_reason="abort"}') == aborted + 2)
    assert _poll(lambda: server.metric("sparkdec:kv_cache_pages_used") == 0)
    assert server.metric("sparkdec:kv_cache_pages_total") > 0
    assert "\nsparkdec:num_preemptions_total " in httpx.get(server.url + "/metrics").text
    assert server.metric("sparkdec:spec_decode_num_drafts_total") > 0
    assert server.metric("sparkdec:spec_decode_bypassed_tokens_total") >= 0  # (spec/bypass.py, on in the server)
    assert server.metric("sparkdec:spec_decode_num_accepted_tokens_per_pos_total", '{position="0"}') >= 0
    assert server.metric("sparkdec:time_to_first_token_seconds_count") > 0


def test_full_server_gets_503_then_recovers(small_server):
    small_server = small_server()
    body = {"model": MODEL, "prompt": "x = 1", "max_tokens": 900, "stream": True, "ignore_eos": True}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", small_server.url + "/v1/completions", json=body) as resp:
            lines = resp.iter_lines()  # NOTE: keep it referenced: a dropped httpx line iterator closes the stream
            assert next(lines).startswith("data: ")
            busy = httpx.post(small_server.url + "/v1/completions", json={"model": MODEL, "prompt": "y"}, timeout=30)
            assert busy.status_code == 503 and _error_of(busy)["code"] == "server_overloaded"
            with pytest.raises(openai.APIStatusError) as info:
                small_server.client().completions.create(model=MODEL, prompt="y", max_tokens=2)
            assert info.value.status_code == 503
    client = small_server.client()
    assert _poll(lambda: httpx.post(small_server.url + "/v1/completions", json={"model": MODEL, "prompt": "y",
                                                                                "max_tokens": 2}).status_code == 200)
    assert client.completions.create(model=MODEL, prompt="z", max_tokens=3).usage.completion_tokens == 3


def test_sigterm_drains_in_flight_requests_then_exits(small_server):
    small_server = small_server()
    body = {"model": MODEL, "prompt": "def main():", "max_tokens": 400, "stream": True, "ignore_eos": True,
            "temperature": 0}
    events: list[str] = []
    started = threading.Event()

    def consume():
        with httpx.stream("POST", small_server.url + "/v1/completions", json=body, timeout=120) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    started.set()

    reader = threading.Thread(target=consume)
    reader.start()
    assert started.wait(60)
    small_server.proc.send_signal(signal.SIGTERM)
    assert _poll(lambda: httpx.get(small_server.url + "/health").status_code == 503, 30)
    late = httpx.post(small_server.url + "/v1/completions", json={"model": MODEL, "prompt": "late"}, timeout=30)
    assert late.status_code == 503 and _error_of(late)["code"] == "server_draining"
    reader.join(120)
    assert events[-1] == "[DONE]"
    final = json.loads(events[-2])
    assert final["choices"][0]["finish_reason"] == "length"
    text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert small_server.proc.wait(60) == 0, small_server.log_tail()
    assert text  # the whole answer came through before the exit


def test_stable_prefix_holds_back_what_may_still_change():
    from sparkdec.spec.commit import stable_prefix

    assert stable_prefix("abc\ufffd", ()) == "abc"  # an incomplete UTF-8 character
    assert stable_prefix("x = 1\nEN", ("END",)) == "x = 1\n"  # may become the stop string
    assert stable_prefix("x = 1\nEX", ("END",)) == "x = 1\nEX"
    assert stable_prefix("ab", ("abc", "b")) == ""


def test_concurrent_requests_beyond_the_cache_are_preempted_and_finish_whole(pair, tmp_path):
    """A cache that holds about four of these requests' whole lives serves eight at once: pages are handed out as
    they grow, the newest gives its pages back when they run out, and every stream still ends with the text the
    request gets alone."""
    srv = Server(pair, tmp_path / "server.log", "--kv-cache-tokens", str(64 * 16), "--reasoning-parser", "qwen3")
    try:
        client = srv.client()
        prompts = [f"def f{i}(x):\n    return" for i in range(8)]
        kw = dict(max_tokens=200, extra_body=LONG, **GREEDY)
        alone = [client.completions.create(model=MODEL, prompt=p, **kw).choices[0].text for p in prompts]

        async def run_all():
            aclient = openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=300)

            async def one(p):
                stream = await aclient.completions.create(model=MODEL, prompt=p, stream=True, **kw)
                return "".join([c.choices[0].text async for c in stream if c.choices])

            try:
                return await asyncio.gather(*(one(p) for p in prompts))
            finally:
                await aclient.close()

        assert asyncio.run(run_all()) == alone
        # (this server also splits chat thinking; the tiny model does not think, so all of it is content)
        chat = httpx.post(srv.url + "/v1/chat/completions", timeout=60, json={
            "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}).json()
        assert chat["choices"][0]["message"]["reasoning_content"] is None and chat["choices"][0]["message"]["content"]
        assert srv.metric("sparkdec:num_preemptions_total") > 0, srv.log_tail()
        assert _poll(lambda: srv.metric("sparkdec:kv_cache_pages_used") == 0)
    finally:
        srv.stop()
