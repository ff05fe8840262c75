"""cann_llm.engine: several sequences in one batched forward per step on the default model.
Batch invariance (the same tokens alone or together, greedy and seeded sampling), chunked
prefill beside decodes, release of cells, and SamplingParams (llama.cpp's defaults, CLI flags)."""

import argparse
import dataclasses
import json

import pytest

import cann_llm
from cann_llm.engine import Engine
from cann_llm.sampler import Sampler, SamplingParams

from conftest import GOLDEN_Q4_1 as GOLDEN


@pytest.fixture(scope="module")
def smol(default_model_path):
    m = cann_llm.load(str(default_model_path), n_ctx=512, n_batch=32)
    yield m
    m.close()


def _requests(model):
    golden = json.loads(GOLDEN.read_text())["greedy"]
    long_prompt = model.tokenize("Once upon a time, in a small village by the sea, there lived "
                                 "an old fisherman who told stories to the children every "
                                 "evening. One of those stories was about")
    assert len(long_prompt) > 32          # prefilled in chunks beside the others' decodes
    return [
        (golden[0]["prompt_ids"], SamplingParams(temperature=0)),
        (long_prompt, SamplingParams(seed=1234)),
        (golden[3]["prompt_ids"], SamplingParams(temperature=1.0, top_k=0, top_p=1.0,
                                                 min_p=0.0, seed=7)),
    ]


def _run_alone(engine, prompt, params, n):
    seq = engine.add(prompt, params, max_tokens=n)
    engine.run()
    engine.release(seq)
    return seq.generated, seq.finish_reason


def test_three_sequences_together_give_the_tokens_each_gives_alone(smol):
    engine = Engine(smol)
    smol.kv.clear()
    n = 12
    reqs = _requests(smol)
    alone = [_run_alone(engine, p, sp, n) for p, sp in reqs]
    assert smol.kv.n_used() == 0                      # release freed the cells
    assert all(len(a) >= 5 for a, _ in alone) and len({tuple(a) for a, _ in alone}) == 3

    # together: two start at once, the third joins while they decode (its prefill chunks
    # share steps with their decodes)
    seqs = [engine.add(p, sp, max_tokens=n) for p, sp in reqs[:2]]
    sizes = []
    for _ in range(3):
        engine.step()
    seqs.append(engine.add(*reqs[2], max_tokens=n))
    while any(not s.finished for s in seqs):
        before = sum(s.n_past for s in seqs)
        engine.step()
        sizes.append(sum(s.n_past for s in seqs) - before)
    assert max(sizes) > 2                             # some step mixed a prefill chunk in
    assert [(s.generated, s.finish_reason) for s in seqs] == alone
    for s in seqs:
        engine.release(s)
    assert smol.kv.n_used() == 0 and not engine.seqs


def test_generate_is_the_engine_alone(smol):
    prompt, params = _requests(smol)[1]
    engine = Engine(smol)
    smol.kv.clear()
    smol._seq_tokens = []
    got, _ = _run_alone(engine, prompt, params, 8)
    kw = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    assert list(smol.generate(prompt, max_tokens=8, **kw)) == got


def test_generate_reuses_the_previous_prompt(smol):
    prompt = _requests(smol)[1][0]
    smol.kv.clear()
    smol._seq_tokens = []
    first = list(smol.generate(prompt, max_tokens=4, temperature=0))
    assert smol.kv.seq_pos_max(0) == len(prompt) + 2    # the last token is sampled, not decoded
    again = list(smol.generate(prompt + first[:2], max_tokens=2, temperature=0))
    assert smol.timings()["prompt_ms"] >= 0 and again == first[2:4]


def test_cancel_releases_the_cells(smol):
    engine = Engine(smol)
    smol.kv.clear()
    a = engine.add([1, 2, 3, 4], SamplingParams(temperature=0), max_tokens=50)
    b = engine.add([5, 6, 7], SamplingParams(temperature=0), max_tokens=50)
    assert (a.id, b.id) == (0, 1)
    engine.step()
    engine.step()
    engine.release(a)
    assert a.finish_reason == "cancelled" and smol.kv.seq_pos_max(0) == -1
    assert smol.kv.seq_pos_max(1) >= 0
    c = engine.add([8, 9], SamplingParams(temperature=0), max_tokens=2)
    assert c.id == 0                                  # the freed id is reused
    while not c.finished:
        engine.step()
    assert len(c.generated) == 2 and not b.finished
    engine.release(b)
    engine.release(c)
    assert smol.kv.n_used() == 0


def test_a_running_sequence_id_is_refused(smol):
    engine = Engine(smol)
    s = engine.add([1, 2], seq_id=3)
    with pytest.raises(ValueError, match="already running"):
        engine.add([1, 2], seq_id=3)
    engine.release(s)


def test_sampling_params_have_llama_cpp_defaults():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p) == (0.8, 40, 0.95, 0.05)
    assert (p.repeat_penalty, p.repeat_last_n) == (1.0, 64)
    assert (p.presence_penalty, p.frequency_penalty, p.seed, p.logit_bias) == (0.0, 0.0, -1, {})
    s = Sampler()                                       # the sampler's defaults are the same
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.repeat_last_n) == \
        (p.temperature, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n)


def test_sampling_params_make_cli_flags():
    parser = argparse.ArgumentParser()
    SamplingParams.add_arguments(parser)
    assert SamplingParams.from_args(parser.parse_args([])) == SamplingParams()
    args = parser.parse_args(["--temp", "0", "--top-k", "5", "--repeat-last-n", "-1", "-s", "9",
                              "--min-p", "0.1"])
    assert args.temp == 0.0 and args.top_k == 5 and args.seed == 9    # the run command's dest names
    p = SamplingParams.from_args(args)
    assert (p.temperature, p.top_k, p.repeat_last_n, p.seed, p.min_p) == (0.0, 5, -1, 9, 0.1)
    assert "temperature" in parser.format_help()
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=2.0).sampler()


_THREADS = """
import os, cann_llm
from cann_llm.model_store import default_model_path
path = str(default_model_path())
m = cann_llm.load(path, n_ctx=256, n_batch=32, n_threads={n})
m.logits([1, 2, 3, 4])
print("tasks", len(os.listdir("/proc/self/task")))
with cann_llm.load(path, n_ctx=256, n_batch=32, n_threads={n}):     # the same size: fine
    pass
with cann_llm.load(path, n_ctx=256, n_batch=32):                    # None: the pool as it is
    pass
try:
    cann_llm.load(path, n_ctx=256, n_batch=32, n_threads={n} + 1)
except ValueError as e:
    print("error", e)
"""


def test_a_second_thread_count_in_one_process_is_a_clear_error(default_model_path):
    from conftest import run_python
    tasks = {}
    for n, env in ((1, "3"), (3, "1")):          # n_threads wins over CANN_LLM_THREADS
        r = run_python(_THREADS.replace("{n}", str(n)), env={"CANN_LLM_THREADS": env})
        assert r.returncode == 0, r.stderr
        out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        tasks[n] = int(out["tasks"])
        err = out["error"]
        assert f"n_threads={n + 1}" in err and f"already has {n} threads" in err
        assert "per process" in err
    assert tasks[3] - tasks[1] == 2              # the pool really has n threads (n - 1 workers)


def test_a_sampler_error_ends_only_its_sequence(smol):
    engine = Engine(smol)
    smol.kv.clear()
    banned = {t: float("-inf") for t in range(smol.hparams.n_vocab)}
    a = engine.add([1, 2, 3], SamplingParams(temperature=0), max_tokens=3)
    b = engine.add([4, 5, 6], SamplingParams(temperature=0, logit_bias=banned), max_tokens=3)
    engine.run()
    assert (a.finish_reason, len(a.generated)) == ("length", 3)
    assert b.finish_reason == "error" and "banned" in str(b.error)
    with pytest.raises(ValueError, match="banned"):
        list(smol.generate([4, 5, 6], max_tokens=2, temperature=0, logit_bias=banned))
    engine.release(a)
    engine.release(b)


def test_a_full_context_fails_the_step_and_keeps_the_cells_consistent(default_model_path):
    from cann_llm import ContextFullError
    with cann_llm.load(str(default_model_path), n_ctx=32, n_batch=32) as m:
        engine = Engine(m)
        a = engine.add(list(range(10, 30)), SamplingParams(temperature=0), max_tokens=8)
        engine.step()                                    # a's prompt: 20 cells
        assert m.kv.n_used() == 20
        b = engine.add(list(range(40, 60)), SamplingParams(temperature=0), max_tokens=8)
        with pytest.raises(ContextFullError):
            engine.step()                                # a's token + b's 20 do not fit
        assert m.kv.n_used() == 20 and a.n_past == 20 and b.n_past == 0
        engine.release(b)
        while not a.finished:
            engine.step()
        assert len(a.generated) == 8 and m.kv.n_used() == 27
