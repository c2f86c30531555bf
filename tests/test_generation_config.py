"""`serve --generation-config` (server/defaults.py): a model's generation_config.json gives the sampling fields a
request leaves out (vLLM's rule), a bad file is refused at start-up naming the field, and requests that set a field
keep their own value."""
from __future__ import annotations

import json

import pytest

from sparkdec.server.defaults import load_defaults
from sparkdec.server.protocol import ChatCompletionRequest, CompletionRequest

QWEN3 = {"bos_token_id": 151643, "do_sample": True, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
         "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}  # (Qwen3-4B's file)


def _folder(tmp_path, config: dict, name: str = "model"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "generation_config.json").write_text(json.dumps(config))
    return folder


def test_the_model_folders_sampling_fields_are_read(tmp_path):
    folder = _folder(tmp_path, QWEN3)
    want = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    assert load_defaults("auto", folder) == (want, folder / "generation_config.json")
    assert load_defaults(str(folder), None)[0] == want  # (a folder given)
    assert load_defaults(str(folder / "generation_config.json"), None)[0] == want  # (a file given)
    assert load_defaults("none", folder) == ({}, None)
    assert load_defaults("auto", tmp_path) == ({}, None)  # (no file: OpenAI's defaults)
    other = _folder(tmp_path, {"top_k": -1, "repetition_penalty": 1.05, "min_p": 0.0, "temperature": None}, "other")
    assert load_defaults("auto", other)[0] == {"top_k": 0, "repetition_penalty": 1.05, "min_p": 0.0}


@pytest.mark.parametrize("config, named", [({"top_p": 1.5}, "top_p"), ({"temperature": "hot"}, "temperature"),
                                           ({"top_k": 2.5}, "top_k")])
def test_a_bad_file_is_refused_naming_its_field(tmp_path, config, named):
    folder = _folder(tmp_path, config)
    with pytest.raises(SystemExit, match=named) as err:
        load_defaults("auto", folder)
    assert "generation_config.json" in str(err.value) and "--generation-config none" in str(err.value)


def test_missing_or_unreadable_files_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="no such file"):
        load_defaults(str(tmp_path / "nowhere"), None)
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(SystemExit, match="not readable JSON"):
        load_defaults("auto", tmp_path)


def test_requests_take_the_defaults_only_for_what_they_leave_out():
    defaults = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    left_out = CompletionRequest(model="m", prompt="x").sampling_params(16, defaults)
    assert (left_out.temperature, left_out.top_p, left_out.top_k, left_out.min_p) == (0.6, 0.95, 20, 0.0)
    own = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], temperature=0.0,
                                top_k=-1).sampling_params(16, defaults)
    assert (own.temperature, own.top_p, own.top_k) == (0.0, 0.95, 0)  # (vLLM's -1: every token kept)
    openai = CompletionRequest(model="m", prompt="x").sampling_params(16)
    assert (openai.temperature, openai.top_p, openai.top_k, openai.repetition_penalty) == (1.0, 1.0, 0, 1.0)


def test_a_server_with_greedy_defaults_answers_unset_requests_greedily():
    """End to end in one process (the shipped pair): with temperature 0 as the model's default, a request that sets
    no temperature gets the greedy completion; one that sets its own gets its own."""
    from fastapi.testclient import TestClient

    from sparkdec import LLM
    from sparkdec.engine.llm_engine import DEFAULT_PAIR
    from sparkdec.server.app import create_app

    if not (DEFAULT_PAIR / "target" / "tokenizer.json").is_file():
        pytest.skip("no shipped pair")
    engine = LLM(draft=None, speculative=False).engine
    body = {"model": "tiny", "prompt": "def parse(line):", "max_tokens": 24}
    with TestClient(create_app(engine, "tiny", sampling_defaults={"temperature": 0.0})) as client:
        unset = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
        greedy = client.post("/v1/completions", json={**body, "temperature": 0.0}).json()["choices"][0]["text"]
        hot = [client.post("/v1/completions", json={**body, "temperature": 1.5, "seed": s}).json()["choices"][0]["text"]
               for s in range(3)]
    assert unset == greedy and any(text != greedy for text in hot)
