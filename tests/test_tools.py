"""server/tools.py: the <tool_call> parser on recorded outputs (Qwen2.5, Qwen3 with thinking,
SmolLM2 through the fallback prompt), split at every character as a stream would split it; the
tool list and past calls rendered by a Qwen2.5-style template and by Qwen3's real template in
GGUFs written with them; the grammar that forces a call."""

import json

import jsonschema
import numpy as np
import pytest

from cann_llm import grammar as G
from cann_llm.chat_template import ChatTemplate
from cann_llm.server.output import ChoiceOutput
from cann_llm.server.tools import (ToolCallParser, call_grammar, prepare_messages,
                                   template_takes_tools)
from cann_llm.tokenizer import Tokenizer
from llama_cpp_data import vocab_dir
from tiny_models import write_tiny_model

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "integer", "minimum": -12,
                                              "maximum": 14}}, "required": ["zone"]}}}

# a Qwen2.5-style template, written for these tests: tools in <tools>, calls in <tool_call>
QWEN25_STYLE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}{% else %}You are a helpful \
assistant.{% endif %}

# Tools

You may call one or more functions. Their signatures are inside <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>

For each call, return <tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}{%- for m in messages %}{% if m.role == 'user' or (m.role == 'system' and not \
loop.first) %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content or '' }}{% for c in m.tool_calls or [] %}{% set f = c.function or c %}
<tool_call>
{"name": "{{ f.name }}", "arguments": {{ f.arguments | tojson }}}
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

RECORDED = {
    # Qwen2.5-7B-Instruct answering "weather in Paris?" with the tools above
    "qwen25": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": '
               '"celsius"}}\n</tool_call>', None),
    # two parallel calls
    "qwen25_two": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                   '"unit": "celsius"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", '
                   '"arguments": {"zone": 1}}\n</tool_call>', None),
    # Qwen3 thinks first (the thinking goes to reasoning_content), then calls
    "qwen3": ('<think>\nThe user wants the weather. I should call get_weather.\n</think>\n\n'
              '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": '
              '"celsius"}}\n</tool_call>', None),
    # text before the call is content
    "text_then_call": ('Let me check that for you.\n<tool_call>\n{"name": "get_time", '
                       '"arguments": {"zone": 2}}\n</tool_call>', "Let me check that for you."),
    # a call never closed before EOS
    "unclosed": ('<tool_call>\n{"name": "get_time", "arguments": {"zone": 3}}', None),
}


def _run(text, split, tools=("get_weather", "get_time"), thinking=False):
    """Feed `text` in pieces of `split` characters through a chat ChoiceOutput with tools."""
    class Tok:                  # one "token" per piece: the output only sees texts
        pieces = []

        def token_to_piece(self, t, special=False):
            return self.pieces[t].encode()

        def incremental(self, **kw):
            outer = self

            class D:
                def add(self, t):
                    return outer.pieces[t]

                def flush(self):
                    return ""
            return D()
    tok = Tok()
    tok.pieces = [text[i:i + split] for i in range(0, len(text), split)]
    o = ChoiceOutput(0, tok, None, chat=True, thinking=thinking, tools=list(tools))
    content, reasoning, calls = "", "", []
    for t in range(len(tok.pieces)):
        r, c, _ = o.add(t)
        content, reasoning = content + c, reasoning + r
        calls += o.take_calls()
    r, c = o.finish("stop")
    content, reasoning = content + c, reasoning + r
    calls += o.take_calls()
    assert assemble(calls) == o.tool_calls
    return content, reasoning, o.tool_calls


def assemble(deltas):
    """Calls from streamed tool_calls deltas, as a client puts them together: the first delta
    of an index has its id, type and name, the others add to its arguments."""
    calls = []
    for d in deltas:
        if d["index"] == len(calls):
            assert {"id", "type"} <= set(d) and d["function"]["name"], d
            calls.append({"id": d["id"], "type": d["type"],
                          "function": {"name": d["function"]["name"], "arguments": ""}})
        else:
            assert d["index"] == len(calls) - 1 and set(d) == {"index", "function"}, d
        calls[-1]["function"]["arguments"] += d["function"]["arguments"]
    return calls


@pytest.mark.parametrize("name", sorted(RECORDED))
@pytest.mark.parametrize("split", [1, 3, 7, 1000])
def test_recorded_outputs_parse_into_calls_however_they_are_split(name, split):
    text, content = RECORDED[name]
    got_content, reasoning, calls = _run(text, split)
    assert (got_content or None) == content
    assert ("should call" in reasoning) == (name == "qwen3")
    n = 2 if name == "qwen25_two" else 1
    assert len(calls) == n and all(c["type"] == "function" and c["id"].startswith("call_")
                                   for c in calls)
    tools = {"get_weather": WEATHER, "get_time": TIME}
    for c in calls:
        assert c["function"]["arguments"] in text      # the model's own text, however split
        args = json.loads(c["function"]["arguments"])
        jsonschema.validate(args, tools[c["function"]["name"]]["function"]["parameters"])
    assert len({c["id"] for c in calls}) == n


@pytest.mark.parametrize("split", [1, 4])
def test_text_that_only_looks_like_a_call_stays_content(split):
    for text in ("I use <tool_call> tags sometimes.", "Call <tool_call>\nnot json\n</tool_call>",
                 '<tool_call>\n{"name": "unknown_fn", "arguments": {}}\n</tool_call>',
                 "Plain answer.  \n", "<tool"):
        content, _, calls = _run(text, split)
        assert calls == [] and content == text.rstrip(), (text, content)


def test_arguments_stream_as_they_arrive():
    p = ToolCallParser(["get_time"])
    assert p.add('<tool_call>\n{"name": "get_time", "arguments": ') == ("", [
        {"index": 0, "id": p._call["id"], "type": "function",
         "function": {"name": "get_time", "arguments": ""}}])
    assert p.add('{"zone"') == ("", [{"index": 0, "function": {"arguments": '{"zone"'}}])
    assert p.add(': 3}') == ("", [{"index": 0, "function": {"arguments": ": 3"}}])
    assert p.add('}\n</tool') == ("", [{"index": 0, "function": {"arguments": "}"}}])
    assert p.add('_call>') == ("", [])
    assert p.calls[0]["function"]["arguments"] == '{"zone": 3}'


def test_answers_without_tools_are_untouched():
    parser = ToolCallParser(["f"])
    assert parser.add("Hello ") == ("Hello", [])
    assert parser.add("world") == (" world", [])
    assert parser.finish() == ("", [])


@pytest.fixture(scope="module")
def qwen_vocab_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tools")
    qwen3 = (vocab_dir() / "Qwen-Qwen3-0.6B.jinja").read_text()
    # the vocabulary file brings its own template: kv overrides it
    return {"qwen25": write_tiny_model(d / "q25.gguf", arch="qwen2", vocab="qwen2",
                                       kv={"tokenizer.chat_template": QWEN25_STYLE}),
            "qwen3": write_tiny_model(d / "q3.gguf", arch="qwen3", vocab="qwen2",
                                      kv={"tokenizer.chat_template": qwen3})}


@pytest.mark.parametrize("which", ["qwen25", "qwen3"])
def test_templates_from_the_gguf_render_tools_and_past_calls(which, qwen_vocab_models):
    tok = Tokenizer.from_gguf(qwen_vocab_models[which])
    assert template_takes_tools(tok.chat_template)
    tmpl = ChatTemplate.from_tokenizer(tok)
    msgs = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21 C, sunny"}]
    text = tmpl.render(prepare_messages(msgs, [WEATHER], native=True),
                       add_generation_prompt=True, tools=[WEATHER])
    assert "<tools>" in text and '"get_weather"' in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": ' \
           '"celsius"}}\n</tool_call>' in text
    assert "<tool_response>\n21 C, sunny\n</tool_response>" in text
    # the recorded call, tokenized with this vocabulary and decoded token by token, parses
    ids = tok.tokenize(RECORDED["qwen25"][0], add_special=False, special=True)
    o = ChoiceOutput(0, tok, None, chat=True, tools=["get_weather"])
    for t in ids:
        o.add(t)
    o.finish("stop")
    assert [c["function"]["name"] for c in o.tool_calls] == ["get_weather"]
    assert o.full_content == ""


def test_a_template_without_tools_gets_them_in_a_system_message():
    msgs = prepare_messages([{"role": "user", "content": "hi"}], [WEATHER, TIME], native=False)
    assert msgs[0]["role"] == "system" and "<tools>" in msgs[0]["content"]
    assert '"get_time"' in msgs[0]["content"] and "<tool_call>" in msgs[0]["content"]
    past = prepare_messages([{"role": "system", "content": "Be brief."},
                             {"role": "assistant", "content": None, "tool_calls": [
                                 {"id": "c", "type": "function", "function": {
                                     "name": "get_time", "arguments": '{"zone": 1}'}}]},
                             {"role": "tool", "content": "12:00"}], [TIME], native=False)
    assert past[0]["content"].startswith("Be brief.\n\n")
    assert past[1]["content"] == ('<tool_call>\n{"name": "get_time", "arguments": {"zone": 1}}'
                                  '\n</tool_call>')
    assert past[2] == {"role": "user", "content": "<tool_response>\n12:00\n</tool_response>"}


@pytest.mark.parametrize("which", ["qwen25", "default"])
def test_the_call_grammar_accepts_valid_calls_only(which, qwen_vocab_models,
                                                   default_model_path):
    path = qwen_vocab_models[which] if which != "default" else default_model_path
    tok = Tokenizer.from_gguf(path)
    named = G.compile(tok, "lark", call_grammar([WEATHER, TIME], "get_time"))
    anyone = G.compile(tok, "lark", call_grammar([WEATHER, TIME], None))

    def accepts(g, text):
        m = g.matcher()
        for t in tok.tokenize(text, add_special=False, special=True):
            if not m.allowed()[t]:
                return False
            m.accept(t)
        return m.accepting
    call = '<tool_call>\n{"name":"get_time","arguments":{"zone":3}}\n</tool_call>'
    weather = '<tool_call>\n{"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}}' \
              '\n</tool_call>'
    assert accepts(named, call) and not accepts(named, weather)
    assert not accepts(named, call.replace("3", "30"))           # zone out of range
    assert accepts(anyone, weather) and accepts(anyone, call + "\n" + weather)
    assert not accepts(anyone, "Sure! " + call)
    m = named.matcher()
    for t in tok.tokenize(call, add_special=False, special=True):
        m.accept(t)
    assert m.done
    assert np.flatnonzero(m.allowed()).tolist() == sorted(tok.eog_ids)


def test_a_server_on_the_qwen_style_gguf_returns_forced_calls(qwen_vocab_models):
    """Random weights, so only the grammar makes the call: it goes through the template's tool
    list, the mask and the parser to OpenAI's shape."""
    import openai
    from serve_util import Server
    s = Server(qwen_vocab_models["qwen25"], "-c", "512", "--parallel", "2")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        r = client.chat.completions.create(
            model="q25", messages=[{"role": "user", "content": "What time is it in Oslo?"}],
            tools=[WEATHER, TIME], tool_choice={"type": "function",
                                                "function": {"name": "get_time"}},
            temperature=0, max_tokens=60)
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        call = c.message.tool_calls[0]
        assert call.function.name == "get_time"
        jsonschema.validate(json.loads(call.function.arguments),
                            TIME["function"]["parameters"])
        assert r.usage.prompt_tokens > 60       # the template rendered the tool list
    finally:
        assert s.stop() == 0, s.log()


def test_a_thinking_template_lets_the_model_reason_before_a_forced_answer(qwen_vocab_models):
    """Qwen3's template (it knows <think>): a forced call or JSON answer may follow a think
    block, which goes to reasoning_content; without one the answer comes at once."""
    tok = Tokenizer.from_gguf(qwen_vocab_models["qwen3"])
    schema = {**TIME["function"]["parameters"], "additionalProperties": False}
    g = G.compile(tok, "json_schema", schema, "t", think="optional")
    calls = G.compile(tok, "lark", call_grammar([TIME], "get_time"), think="optional")
    opened = G.compile(tok, "json_schema", schema, "t", think="open")

    def accepts(grammar, text):
        m = grammar.matcher()
        for t in tok.tokenize(text, add_special=False, special=True):
            if not m.allowed()[t]:
                return False
            m.accept(t)
        return m.done
    call = '<tool_call>\n{"name":"get_time","arguments":{"zone":2}}\n</tool_call>'
    assert accepts(g, '{"zone":2}') and accepts(g, '<think>\nOslo is UTC+1 < 2\n</think>\n\n'
                                                   '{"zone":2}')
    assert not accepts(g, 'Sure: {"zone":2}') and not accepts(g, '<think>x</think>{"zone":99}')
    assert accepts(calls, call) and accepts(calls, "<think>\nhm\n</think>\n\n" + call)
    assert accepts(opened, 'so UTC+2.\n</think>\n\n{"zone":2}') and not accepts(opened, '{"zone":2}')

    import openai
    from serve_util import Server
    s = Server(qwen_vocab_models["qwen3"], "-c", "512", "--parallel", "2")
    try:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        for kw in ({"tools": [WEATHER, TIME], "tool_choice": {
                        "type": "function", "function": {"name": "get_time"}}},
                   {"response_format": {"type": "json_schema", "json_schema": {
                       "name": "t", "schema": schema}}},
                   {"response_format": {"type": "json_schema", "json_schema": {
                       "name": "t", "schema": schema}},
                    "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}):
            r = client.chat.completions.create(
                model="q3", messages=[{"role": "user", "content": "Time in Oslo?"}],
                temperature=0, max_tokens=200, **kw)
            c = r.choices[0]
            if c.finish_reason == "length":       # random weights may think at length
                assert c.message.reasoning_content
                continue
            if "tools" in kw:
                assert c.finish_reason == "tool_calls"
                args = c.message.tool_calls[0].function.arguments
            else:
                assert c.finish_reason == "stop"
                args = c.message.content
            jsonschema.validate(json.loads(args), schema)
    finally:
        assert s.stop() == 0, s.log()
