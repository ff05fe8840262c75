"""Structured outputs through the official openai client on a real `cann-llm serve` with the
default model: response_format json_schema over fifty varied schemas (every answer validates,
answers cut by max_tokens counted apart), json_object, the GBNF grammar field, a schema the
engine cannot compile (400), and greedy output under a schema: the same twice and the same alone
or batched with other requests."""

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from conftest import REPO_ROOT
from serve_util import Server
from structured_schemas import schemas


@pytest.fixture(scope="module")
def server(default_model_path):
    s = Server(default_model_path, "-c", "1024", "--parallel", "8", "--model-alias", "smol",
               threads=2)
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _fmt(schema, name="answer"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": True}}


def _ask(client, text, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 160)
    return client.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": text}], **kw)


def test_fifty_schemas_all_give_valid_json(client):
    cases = schemas(50)

    def one(i):
        text, schema = cases[i]
        # half greedy, half sampled: the mask holds either way
        kw = {"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "seed": i}
        return _ask(client, text, response_format=_fmt(schema, f"s{i}"), **kw)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(len(cases))))
    valid, cut, invalid = 0, 0, []
    for (text, schema), r in zip(cases, answers):
        c = r.choices[0]
        if c.finish_reason == "length":
            cut += 1
            continue
        assert c.finish_reason == "stop"
        try:
            jsonschema.validate(json.loads(c.message.content), schema)
            valid += 1
        except (ValueError, jsonschema.ValidationError) as e:
            invalid.append((c.message.content, schema, str(e)[:200]))
    print(f"json_schema: {valid} valid, {cut} cut by max_tokens, {len(invalid)} invalid")
    assert not invalid, invalid[:3]
    assert cut <= 5


def test_json_object_and_compact_output(client):
    r = _ask(client, "Describe a cat as JSON.", response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert isinstance(json.loads(text), dict) and r.choices[0].finish_reason == "stop"
    assert "\n" not in text and ": " not in text.replace('": "', "")


def test_a_response_cut_by_max_tokens_ends_with_length(client):
    r = _ask(client, "Describe a cat as JSON.", response_format={"type": "json_object"},
             max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


def test_streamed_json_schema_is_the_same_text(client):
    fmt = _fmt(schemas(4)[3][1])
    whole = _ask(client, "Describe a book as JSON.", response_format=fmt)
    chunks = _ask(client, "Describe a book as JSON.", response_format=fmt, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content


def test_completions_take_response_format_too(client):
    schema = schemas(4)[3][1]
    r = client.completions.create(model="smol", prompt="A famous book, as JSON:", max_tokens=120,
                                  temperature=0, extra_body={"response_format": _fmt(schema)})
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].text), schema)


def test_gbnf_grammar_field(client, server):
    grammar = 'root ::= "The answer is " ("yes" | "no") "."'
    r = _ask(client, "Is water wet?", extra_body={"grammar": grammar})
    assert r.choices[0].message.content in ("The answer is yes.", "The answer is no.")
    r = server.client.post("/v1/completions", json={"prompt": "Count: 1, 2,", "max_tokens": 12,
                                                    "temperature": 0,
                                                    "grammar": 'root ::= " " [0-9]+ ","'})
    assert r.status_code == 200
    text = r.json()["choices"][0]["text"]
    assert text.startswith(" ") and text.endswith(",") and text[1:-1].isdigit()


def test_a_schema_the_engine_cannot_compile_is_a_400(client, server):
    bad = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5,
                                                  "maximum": 1}}, "required": ["a"]}
    for schema in (bad, {"type": "nonsense"}):
        with pytest.raises(openai.BadRequestError) as e:
            _ask(client, "hi", response_format=_fmt(schema))
        assert e.value.status_code == 400
        err = e.value.body
        assert err["param"] == "response_format" and "JSON schema" in err["message"]
    r = server.client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= ("})
    assert r.status_code == 400 and r.json()["error"]["param"] == "grammar"
    assert "GBNF" in r.json()["error"]["message"]


def test_greedy_under_a_schema_is_deterministic_and_batch_invariant(client):
    text, schema = schemas(10)[9]
    alone = [_ask(client, text, response_format=_fmt(schema)).choices[0].message.content
             for _ in range(2)]
    assert alone[0] == alone[1]
    jsonschema.validate(json.loads(alone[0]), schema)

    def one(i):
        if i == 0:
            return _ask(client, text, response_format=_fmt(schema)).choices[0].message.content
        if i % 2:
            return _ask(client, "Write a poem about the sea.", max_tokens=40)
        return _ask(client, schemas(i + 1)[i][0], response_format=_fmt(schemas(i + 1)[i][1]),
                    temperature=1.0, seed=i)
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(one, range(6)))
    assert together[0] == alone[0]


def test_the_curl_examples_in_server_md_work(server):
    text = (REPO_ROOT / "docs" / "server.md").read_text()
    section = text.split("### Structured outputs", 1)[1].split("\n### Streaming", 1)[0]
    examples = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert len(examples) == 4
    for sh in examples:
        sh = sh.replace("127.0.0.1:8080", f"127.0.0.1:{server.port}")
        out = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert "error" not in answer, answer
        content = answer["choices"][0]["message"]["content"]
        if '"tools"' in sh:
            call = answer["choices"][0]["message"]["tool_calls"][0]["function"]
            assert call["name"] == "get_weather" and answer["choices"][0]["finish_reason"] == \
                "tool_calls"
            assert set(json.loads(call["arguments"])) == {"city", "unit"}
        elif "json_object" in sh or "json_schema" in sh:
            assert isinstance(json.loads(content), dict)
        else:
            assert content in ("yes.", "no.")


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {
        "type": "integer", "minimum": -12, "maximum": 14}}, "required": ["zone"],
        "additionalProperties": False}}}
WEATHER_Q = [{"role": "user", "content": "What is the weather like in Paris today?"}]


def test_a_named_tool_choice_gives_a_call_whose_arguments_validate(client):
    for name, tool in (("get_weather", WEATHER), ("get_time", TIME)):
        r = client.chat.completions.create(
            model="smol", messages=WEATHER_Q, tools=[WEATHER, TIME], temperature=0,
            max_tokens=120, tool_choice={"type": "function", "function": {"name": name}})
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert len(c.message.tool_calls) == 1 and not c.message.content
        call = c.message.tool_calls[0]
        assert call.type == "function" and call.function.name == name and call.id
        jsonschema.validate(json.loads(call.function.arguments),
                            tool["function"]["parameters"])


def test_required_tool_choice_streams_calls_as_openai_does(client):
    kw = dict(model="smol", messages=WEATHER_Q, tools=[WEATHER, TIME], temperature=0,
              max_tokens=200, tool_choice="required", parallel_tool_calls=False)
    whole = client.chat.completions.create(**kw).choices[0]
    assert whole.finish_reason == "tool_calls" and len(whole.message.tool_calls) == 1
    chunks = list(client.chat.completions.create(stream=True, **kw))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    parts = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert {tc.index for tc in parts} == {0} and len(parts) > 2    # name, then arguments
    assert parts[0].id and parts[0].function.name == whole.message.tool_calls[0].function.name
    assert all(tc.id is None and tc.function.name is None for tc in parts[1:])
    assert "".join(tc.function.arguments for tc in parts) == \
        whole.message.tool_calls[0].function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    # the call and its result go back to the model as the next turn's history
    call = whole.message.tool_calls[0]
    history = WEATHER_Q + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {
                "name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": "21 degrees and sunny"}]
    r = client.chat.completions.create(model="smol", messages=history, tools=[WEATHER, TIME],
                                       tool_choice="none", temperature=0, max_tokens=30)
    assert r.choices[0].finish_reason in ("stop", "length") and r.choices[0].message.content


def test_tool_requests_that_cannot_work_are_400(server):
    for body, param in (
            ({"tool_choice": "required"}, "tool_choice"),
            ({"tools": [WEATHER], "tool_choice": {"type": "function",
                                                  "function": {"name": "nope"}}}, "tool_choice"),
            ({"tools": [WEATHER, WEATHER]}, "tools"),
            ({"tools": [{"type": "function", "function": {
                "name": "f", "parameters": {"type": "nonsense"}}}], "tool_choice": "required"},
             "tools")):
        r = server.client.post("/v1/chat/completions", json={"messages": WEATHER_Q, **body})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
