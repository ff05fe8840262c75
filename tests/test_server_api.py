"""cann-llm serve through the official openai client and plain HTTP, on a real process and
socket with the default model: chat, completions, streaming, usage, stops, seeds, logprobs,
n > 1, determinism under load and under preemption, cancellation, prefix caching, embeddings,
tokenize, metrics, and a drain on SIGTERM."""

import base64
import json
import signal
import threading
import time

import httpx
import numpy as np
import openai
import pytest

from serve_util import Server

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(default_model_path):
    s = Server(default_model_path, "-c", "1024", "--parallel", "4", "--embeddings",
               "--model-alias", "smol")
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def _chat(client, **kw):
    kw.setdefault("messages", QUESTION)
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 24)
    return client.chat.completions.create(model="smol", **kw)


def test_startup_answers_503_until_the_model_is_loaded(server):
    assert server.health_seen[-1] == 200 and 503 in server.health_seen
    assert all(s in (503, 200) for s in server.health_seen)
    assert "listening on http://127.0.0.1:" in server.log() and "4 slots" in server.log()


def test_chat_completion(client):
    r = _chat(client)
    c = r.choices[0]
    assert "Paris" in c.message.content and c.message.role == "assistant"
    assert c.finish_reason == "stop" and r.model == "smol" and r.object == "chat.completion"
    assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 10
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_max_tokens_ends_with_length(client):
    r = _chat(client, max_tokens=3, messages=[{"role": "user", "content": "Write a poem."}])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    r2 = _chat(client, max_tokens=None, max_completion_tokens=3,
               messages=[{"role": "user", "content": "Write a poem."}])
    assert r2.choices[0].message.content == r.choices[0].message.content


def test_streaming_gives_the_same_text_with_role_first_and_usage(client):
    whole = _chat(client).choices[0].message.content
    chunks = list(_chat(client, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    # without include_usage there is no usage chunk, but the chunk that ends the response
    # carries usage anyway (many clients never ask for it)
    plain = list(_chat(client, stream=True))
    assert all(c.choices for c in plain)
    assert plain[-1].choices[0].finish_reason == "stop"
    assert plain[-1].usage.completion_tokens == chunks[-1].usage.completion_tokens
    assert all(c.usage is None for c in plain[:-1])


def test_stream_is_server_sent_events_ending_in_done(server):
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 4, "stream": True}
    with server.client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert all(ln.startswith("data: ") for ln in lines) and lines[-1] == "data: [DONE]"
    for ln in lines[:-1]:
        json.loads(ln[6:])


def test_stop_strings_are_matched_across_tokens_and_never_emitted(client):
    whole = _chat(client).choices[0].message.content          # "The capital of France is Paris."
    assert "capital of" in whole
    r = _chat(client, stop=["al of"])                          # spans token boundaries
    assert r.choices[0].message.content == whole[:whole.index("al of")]
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in
                       _chat(client, stop="al of", stream=True) if c.choices)
    assert streamed == r.choices[0].message.content


def test_a_seed_reproduces_a_sampled_answer(client):
    kw = dict(temperature=1.0, seed=1234, max_tokens=16,
              messages=[{"role": "user", "content": "Tell me a story."}])
    a, b = _chat(client, **kw), _chat(client, **kw)
    assert a.choices[0].message.content == b.choices[0].message.content
    others = {_chat(client, **{**kw, "seed": s}).choices[0].message.content for s in (1, 2, 3)}
    assert len(others | {a.choices[0].message.content}) > 1


def test_logprobs(client):
    r = _chat(client, logprobs=True, top_logprobs=3, max_tokens=5)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:                 # greedy: the chosen token is the most likely one
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token
        assert t.logprob <= 0 and t.top_logprobs[0].logprob == t.logprob
        assert bytes(t.bytes).decode() == t.token
    assert _chat(client, max_tokens=5).choices[0].logprobs is None


def test_n_choices_fork_one_prefill_and_use_seed_plus_i(client, server):
    kw = dict(temperature=1.0, max_tokens=8, messages=[{"role": "user", "content": "Say hi."}])
    r = _chat(client, n=2, seed=77, logprobs=True, **kw)
    assert [c.index for c in r.choices] == [0, 1]
    alone = [_chat(client, seed=77 + i, **kw).choices[0].message.content for i in range(2)]
    assert [c.message.content for c in r.choices] == alone
    # usage counts both choices' tokens, and the prompt once
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) for c in r.choices)
    assert r.usage.prompt_tokens == _chat(client, seed=77, **kw).usage.prompt_tokens


def test_text_completion_with_echo_and_logprobs_and_lists(client):
    r = client.completions.create(model="smol", prompt="The capital of France is",
                                  max_tokens=4, temperature=0, logprobs=2)
    c = r.choices[0]
    assert c.text and c.finish_reason == "length" and r.usage.completion_tokens == 4
    assert "".join(c.logprobs.tokens) == c.text and len(c.logprobs.top_logprobs[0]) == 2
    assert c.logprobs.text_offset[0] == 0
    e = client.completions.create(model="smol", prompt="The capital of France is",
                                  max_tokens=4, temperature=0, echo=True)
    assert e.choices[0].text == "The capital of France is" + c.text
    many = client.completions.create(model="smol", prompt=["The capital of France is",
                                                           "One, two,"], max_tokens=4,
                                     temperature=0)
    assert [ch.index for ch in many.choices] == [0, 1] and many.choices[0].text == c.text
    ids = client.completions.create(model="smol", prompt=[504, 3575, 282], max_tokens=2,
                                    temperature=0)
    assert ids.usage.prompt_tokens == 3
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model="smol", prompt="The capital of France is", max_tokens=4, temperature=0,
        stream=True))
    assert streamed == c.text


def test_eight_concurrent_requests_give_the_tokens_each_gives_alone(client):
    prompts = [f"Count from {i} to {i + 5}." for i in range(8)]

    def ask(p):
        return _chat(client, max_tokens=20, messages=[{"role": "user", "content": p}]
                     ).choices[0].message.content
    alone = [ask(p) for p in prompts]
    results = [None] * 8

    def worker(i):
        results[i] = ask(prompts[i])
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == alone


def test_preemption_keeps_the_tokens(default_model_path):
    """A KV cache too small for 4 sequences at once: some are preempted and recompute, and
    every answer is still the one it gives alone."""
    s = Server(default_model_path, "-c", "160", "--kv-size", "200", "--parallel", "4")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        prompts = [f"Write a long story about a {w}." for w in ("cat", "dog", "fox", "owl")]

        def ask(p):
            return c.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1",
                                             messages=[{"role": "user", "content": p}],
                                             temperature=0, max_tokens=100
                                             ).choices[0].message.content
        alone = [ask(p) for p in prompts]
        results = [None] * 4
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, ask(prompts[i])))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == alone
        assert s.metric("cann_llm_preemptions_total") > 0
    finally:
        assert s.stop() == 0


def test_a_cancelled_stream_frees_its_slot(default_model_path):
    s = Server(default_model_path, "-c", "512", "--parallel", "1", "--queue-size", "0")
    try:
        body = {"messages": [{"role": "user", "content": "Write a very long story."}],
                "max_tokens": 400, "temperature": 0, "stream": True}
        with s.client.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()   # held: a dropped iterator closes the response (a cancel)
            for _ in range(7):
                next(lines)
            # the only slot is busy and the queue holds nothing: a second request is refused
            busy = s.client.post("/v1/chat/completions", json={**body, "stream": False,
                                                               "max_tokens": 2})
            assert busy.status_code == 503 and "Retry-After" in busy.headers
            assert busy.json()["error"]["code"] == "queue_full"
        deadline = time.monotonic() + 10
        while s.metric("cann_llm_requests_running") > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.metric("cann_llm_requests_running") == 0
        ok = s.client.post("/v1/chat/completions", json={**body, "stream": False,
                                                         "max_tokens": 2})
        assert ok.status_code == 200
        # a non-streamed request whose client gives up is cancelled too
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(s.url + "/v1/chat/completions", json={**body, "stream": False},
                       timeout=httpx.Timeout(60, read=1.0))
        deadline = time.monotonic() + 10
        while s.metric("cann_llm_requests_running") > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.metric("cann_llm_requests_running") == 0
        assert s.metric("cann_llm_generation_tokens_total") < 300   # 400 were asked for
    finally:
        assert s.stop() == 0


def test_prefix_cache_makes_a_second_turn_pay_only_for_new_tokens(client, server):
    first = [{"role": "user", "content": "Name a colour."}]
    r1 = _chat(client, messages=first, max_tokens=8)
    hits_before = server.metric("cann_llm_prefix_cache_hit_tokens_total")
    turn2 = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "And another one?"}]
    r2 = _chat(client, messages=turn2, max_tokens=8)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    # the first turn's prompt and answer are reused: only the new message is computed
    assert cached >= r1.usage.prompt_tokens + r1.usage.completion_tokens - 2
    assert r2.usage.prompt_tokens - cached < 20
    assert server.metric("cann_llm_prefix_cache_hit_tokens_total") - hits_before == cached


def test_embeddings_are_normalised_and_batch_invariant(client):
    one = client.embeddings.create(model="smol", input="The cat sat on the mat.")
    v = np.array(one.data[0].embedding)
    assert abs(np.linalg.norm(v) - 1) < 1e-5 and one.usage.prompt_tokens > 3
    many = client.embeddings.create(model="smol", input=["Hello there.",
                                                         "The cat sat on the mat."])
    assert [d.index for d in many.data] == [0, 1]
    assert np.array_equal(np.array(many.data[1].embedding), v)
    b64 = client.embeddings.create(model="smol", input="The cat sat on the mat.",
                                   encoding_format="base64")
    raw = np.frombuffer(base64.b64decode(b64.data[0].embedding), dtype="<f4")
    assert np.array_equal(raw, v.astype(np.float32))


def test_models_tokenize_detokenize(server, client):
    assert [m.id for m in client.models.list().data] == ["smol"]
    assert client.models.retrieve("smol").id == "smol"
    ids = server.client.post("/tokenize", json={"content": "Hello world"}).json()["tokens"]
    assert server.client.post("/detokenize", json={"tokens": ids}).json()["content"] \
        == "Hello world"
    pieces = server.client.post("/tokenize", json={"content": "Hello world",
                                                   "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) \
        == "Hello world"


def test_metrics_count_requests_and_tokens(server, client):
    before = server.metric("cann_llm_generation_tokens_total")
    r = _chat(client, max_tokens=3, messages=[{"role": "user", "content": "Write a poem."}])
    assert server.metric("cann_llm_generation_tokens_total") - before == 3
    text = server.client.get("/metrics").text
    for name in ("cann_llm_requests_total{route=\"/v1/chat/completions\",status=\"200\"}",
                 "cann_llm_time_to_first_token_seconds_bucket",
                 "cann_llm_inter_token_latency_seconds_bucket", "cann_llm_kv_cells_used",
                 "cann_llm_requests_waiting", "cann_llm_prefix_cache_hits_total"):
        assert name in text
    assert r.usage.completion_tokens == 3


def test_sigterm_drains_a_stream_in_flight_then_exits_0(default_model_path):
    s = Server(default_model_path, "-c", "256", "--parallel", "2")
    body = {"messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": 40, "temperature": 0, "stream": True}
    lines = []
    with s.client.stream("POST", "/v1/chat/completions", json=body) as r:
        it = r.iter_lines()
        lines.append(next(it))
        s.proc.send_signal(signal.SIGTERM)
        lines += [ln for ln in it if ln]
    assert lines[-1] == "data: [DONE]"
    finish = [json.loads(ln[6:])["choices"][0]["finish_reason"] for ln in lines[:-1]]
    assert finish[-1] == "length"
    assert s.proc.wait(30) == 0
    with pytest.raises(httpx.TransportError):
        httpx.get(s.url + "/health", timeout=2)


THINKING_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking %}{{ '<think>\\n' }}{% endif %}{% endif %}")


def test_thinking_text_is_reasoning_content(default_model_path, tmp_path):
    """A template that opens a think block (chat_template_kwargs enable_thinking): the model's
    text until </think> is reasoning_content, never content; without it, all is content."""
    path = tmp_path / "thinking.jinja"
    path.write_text(THINKING_TEMPLATE)
    s = Server(default_model_path, "-c", "256", "--parallel", "1", "--chat-template-file",
               str(path))
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        kw = dict(model="SmolLM2-135M-Instruct.Q4_1", temperature=0, max_tokens=12,
                  messages=[{"role": "user", "content": "What is 2 + 2?"}])
        think = c.chat.completions.create(
            extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kw)
        msg = think.choices[0].message
        assert msg.reasoning_content and not msg.content           # no </think> in 12 tokens
        plain = c.chat.completions.create(**kw).choices[0].message
        assert plain.content and plain.reasoning_content is None
        chunks = list(c.chat.completions.create(
            stream=True, extra_body={"chat_template_kwargs": {"enable_thinking": True}}, **kw))
        streamed = "".join(getattr(ch.choices[0].delta, "reasoning_content", None) or ""
                           for ch in chunks if ch.choices)
        assert streamed == msg.reasoning_content
    finally:
        assert s.stop() == 0
