"""cann-llm serve's refusals over plain HTTP: every error is OpenAI's JSON shape with the right
status (400 malformed or unsupported, 401 auth, 404 unknown model or route, 405, 413 body size,
503 queue), nothing asked for is silently ignored, and routine client defaults are accepted."""

import openai
import pytest

from serve_util import Server

CHAT = "/v1/chat/completions"
MSG = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(default_model_path):
    s = Server(default_model_path, "-c", "256", "--parallel", "2", "--max-body-size", "4096")
    yield s
    assert s.stop() == 0, s.log()


def _error(r, status, param=None):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param, body
    return body["error"]


def test_malformed_json_is_400(server):
    r = server.client.post(CHAT, content=b'{"messages": [', headers={
        "content-type": "application/json"})
    assert "malformed JSON" in _error(r, 400)["message"]
    _error(server.client.post(CHAT, content=b"[1, 2]", headers={
        "content-type": "application/json"}), 400)
    _error(server.client.post(CHAT), 400)


@pytest.mark.parametrize("body, param", [
    ({"messages": MSG, "frobnicate": 1}, "frobnicate"),
    ({"messages": MSG, "temperature": -1}, "temperature"),
    ({"messages": MSG, "temperature": "hot"}, "temperature"),
    ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
    ({"messages": MSG, "n": 3}, "n"),                          # more than the 2 slots
    ({"messages": MSG, "top_p": 1.5}, "top_p"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": "x", "mood": "happy"}]}, "messages.0.mood"),
    ({"messages": MSG, "logit_bias": {"999999": 1}}, "logit_bias"),
    ({"messages": MSG, "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"messages": MSG, "response_format": {"type": "json_schema"}}, "response_format"),
    ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {}}},
     "response_format.json_schema.name"),
    ({"messages": MSG, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nonsense"}}}}, "response_format"),
    ({"messages": MSG, "grammar": "root ::= ("}, "grammar"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}] * 2}, "tools"),
    ({"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    ({"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ({"messages": MSG, "store": True}, "store"),
    ({"messages": MSG, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": MSG, "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
])
def test_invalid_or_unsupported_fields_are_400_naming_the_field(server, body, param):
    _error(server.client.post(CHAT, json=body), 400, param)


def test_routine_client_defaults_are_accepted(server):
    r = server.client.post(CHAT, json={
        "messages": MSG, "max_tokens": 2, "response_format": {"type": "text"}, "tools": [],
        "tool_choice": "none", "store": False, "metadata": {"k": "v"},
        "parallel_tool_calls": True, "user": "someone", "stream": False, "logprobs": False,
        "stream_options": None, "seed": None, "stop": None, "n": 1})
    assert r.status_code == 200, r.text
    again = [{"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello!", "refusal": None, "tool_calls": None,
              "function_call": None, "audio": None, "annotations": []},
             {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
             {"role": "user", "content": "Again"}]
    assert server.client.post(CHAT, json={"messages": again, "max_tokens": 2}).status_code == 200


def test_completion_fields(server):
    url = "/v1/completions"
    _error(server.client.post(url, json={"prompt": "x", "suffix": "y"}), 400, "suffix")
    _error(server.client.post(url, json={"prompt": [1, 2, 10**7]}), 400, "prompt")
    _error(server.client.post(url, json={"prompt": "x", "echo": True, "logprobs": 1}), 400,
           "logprobs")
    _error(server.client.post(url, json={"prompt": "x", "best_of": 2}), 400, "best_of")
    _error(server.client.post(url, json={"prompt": []}), 400)


def test_context_overflow_is_400_with_the_counts(server):
    long = "word " * 400
    e = _error(server.client.post(CHAT, json={"messages": [{"role": "user", "content": long}]}),
               400, "messages")
    assert e["code"] == "context_length_exceeded" and "256" in e["message"]
    n = int(e["message"].split("has ")[1].split(" ")[0])
    assert n > 256
    e2 = _error(server.client.post("/v1/completions", json={"prompt": long}), 400, "prompt")
    assert "tokens" in e2["message"]


def test_unknown_model_and_route_are_404(server):
    e = _error(server.client.post(CHAT, json={"messages": MSG, "model": "gpt-9"}), 404, "model")
    assert e["code"] == "model_not_found"
    _error(server.client.get("/v1/models/gpt-9"), 404)
    _error(server.client.get("/v1/nothing"), 404)
    _error(server.client.get(CHAT), 405)
    _error(server.client.post("/v1/embeddings", json={"input": "x"}), 404)   # no --embeddings


def test_a_body_over_the_limit_is_413(server):
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    _error(server.client.post(CHAT, json=big), 413)

    def chunks():                                   # no Content-Length: counted as it arrives
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'
    _error(server.client.post(CHAT, content=chunks(), headers={
        "content-type": "application/json"}), 413)


def test_the_openai_client_sees_typed_errors(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", messages=MSG,
                                  response_format={"type": "json_schema", "json_schema": {
                                      "name": "x", "schema": {"type": "nonsense"}}})
    assert e.value.body["param"] == "response_format"
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="gpt-9", messages=MSG)


def test_an_api_key_server_refuses_requests_without_the_key(default_model_path):
    s = Server(default_model_path, "-c", "128", "--parallel", "1", "--api-key", "s3cret",
               "--cors-origin", "http://app.example")
    try:
        pre = s.client.options(CHAT, headers={"Origin": "http://app.example",
                                              "Access-Control-Request-Method": "POST",
                                              "Access-Control-Request-Headers": "authorization"})
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "http://app.example"
        other = s.client.options(CHAT, headers={"Origin": "http://evil.example",
                                                "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in other.headers
        assert s.client.get("/health").status_code == 200            # public
        assert s.client.get("/").status_code == 200                  # the chat page
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            e = _error(s.client.get("/v1/models", headers=headers), 401)
            assert e["type"] == "authentication_error"
        _error(s.client.post(CHAT, json={"messages": MSG}), 401)
        _error(s.client.get("/metrics"), 401)
        ok = s.client.post(CHAT, json={"messages": MSG, "max_tokens": 2},
                           headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="s3cret", max_retries=0)
        assert c.models.list().data[0].id
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.url + "/v1", api_key="nope", max_retries=0).models.list()
    finally:
        assert s.stop() == 0


def test_bad_flags_are_one_line_errors(default_model_path):
    import subprocess
    import sys
    for args, text in ((["--kv-size", "10", "-c", "64"], "--kv-size"),
                       (["--parallel", "0"], "--parallel"), (["-c", "0"], "-c")):
        p = subprocess.run([sys.executable, "-m", "cann_llm.cli", "serve",
                            str(default_model_path), *args], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 1 and text in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "cann_llm.cli", "serve", "/nonexistent.gguf"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "nonexistent" in p.stderr and "Traceback" not in p.stderr
