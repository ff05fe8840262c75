"""cann_llm.engine: several sequences in one batched forward per step on the default model.
Batch invariance (the same tokens alone or together, greedy and seeded sampling), chunked
prefill beside decodes, release of cells, and SamplingParams (llama.cpp's defaults, CLI flags)."""

import argparse
import dataclasses
import json

import pytest

import cann_llm
from cann_llm.engine import Engine
from cann_llm.model import Batch
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


def test_decode_steps_pick_what_the_sampler_picks_from_their_logits(smol):
    """Steps without a prefill chunk take the greedy pick from the logits check's scan
    (Model.decode_step): the same tokens as decode() of each token and Sampler.sample on its
    logits, with a ban that changes the first pick."""
    prompt = _requests(smol)[0][0]
    smol.kv.clear()
    smol._seq_tokens = []
    free = list(smol.generate(prompt, max_tokens=1, temperature=0))
    ban = {free[0]: float("-inf"), **{t: float("-inf") for t in smol.tokenizer.eog_ids}}
    smol.kv.clear()
    smol._seq_tokens = []
    got = list(smol.generate(prompt, max_tokens=6, temperature=0, logit_bias=ban))
    smol.kv.clear()
    sampler, want = Sampler(temperature=0, logit_bias=ban), []
    logits = smol.decode(Batch.sequence(prompt))[-1]
    for _ in range(6):
        want.append(sampler.sample(logits))
        logits = smol.decode(Batch.sequence(want[-1:], start_pos=len(prompt) + len(want) - 1))[-1]
    smol.kv.clear()
    smol._seq_tokens = []
    assert got == want and free[0] not in got


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
        # no weight cache: a load that misses it starts the delayed writer's timer thread, which
        # one run would count and the other (a hit) not
        r = run_python(_THREADS.replace("{n}", str(n)),
                       env={"CANN_LLM_THREADS": env, "CANN_LLM_WEIGHT_CACHE": "off"})
        assert r.returncode == 0, r.stderr
        out = dict(line.split(" ", 1) for line in r.stdout.splitlines())
        tasks[n] = int(out["tasks"])
        err = out["error"]
        assert f"n_threads={n + 1}" in err and f"already has {n} threads" in err
        assert "per process" in err
    assert tasks[3] - tasks[1] == 2              # the pool really has n threads (n - 1 workers)


_POLICIES = """
import os, cann_llm
from cann_llm.model_store import default_model_path
m = cann_llm.load(str(default_model_path()), n_ctx=256, n_batch=32, n_threads=3)
m.logits([1, 2, 3, 4])
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/stat") as f:
        policy = int(f.read().rsplit(")", 1)[1].split()[38])    # field 41 of stat
    print(int(tid) == os.getpid(), policy)
"""


def test_the_devices_threads_do_not_preempt_the_caller(default_model_path):
    """acl_host's stream worker and the pool's workers run SCHED_BATCH (no preemption when they
    wake, so a launch's wake does not take the caller's core); the caller's thread is untouched."""
    from cann_llm import backend as clm
    from conftest import run_python
    if clm.runtime_name() != "acl_host":
        pytest.skip("acl_host's threads (the toolkit build runs on a real NPU)")
    r = run_python(_POLICIES, env={"CANN_LLM_WEIGHT_CACHE": "off"})
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert [p for main, p in rows if main == "True"] == ["0"]      # SCHED_OTHER
    assert sum(p == "3" for _, p in rows) >= 3                       # 2 pool workers + a stream


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


def test_running_out_of_cells_preempts_the_newest_sequence(default_model_path):
    """Two sequences that together outgrow the cells: b (admitted last) is preempted back to the
    queue while a keeps decoding; once a is released, b recomputes its cells and gives the
    tokens it gives alone. A prompt that does not fit beside the running ones waits."""
    from cann_llm import ContextFullError
    with cann_llm.load(str(default_model_path), n_ctx=32, n_batch=32) as m:
        engine = Engine(m)
        a_prompt, b_prompt = list(range(10, 20)), list(range(40, 50))
        alone = []
        for p in (a_prompt, b_prompt):
            s = engine.add(p, SamplingParams(temperature=0), max_tokens=12)
            engine.run()
            engine.release(s)
            alone.append(s.generated)
        assert all(len(g) == 12 for g in alone)
        a = engine.add(a_prompt, SamplingParams(temperature=0), max_tokens=12)
        b = engine.add(b_prompt, SamplingParams(temperature=0), max_tokens=12)
        while not a.finished:
            engine.step()
        assert a.generated == alone[0] and engine.stats["preemptions"] >= 1
        assert b.state == "waiting" and b.n_past == 0 and m.kv.n_used() == 21
        assert 0 < len(b.generated) < 12              # b had started and keeps its tokens
        with pytest.raises(ContextFullError):          # 10 + its tokens do not fit beside a,
            engine.step()                             # which holds its cells until released
        assert b.state == "waiting"
        engine.release(a)
        engine.run()
        assert b.generated == alone[1] and b.finish_reason == "length"
        engine.release(b)
        assert m.kv.n_used() == 0


def test_prefix_cache_reuses_a_released_sequence_prefix(smol):
    smol.kv.clear()
    engine = Engine(smol, max_running=2, prefix_cache=True)
    prompt = _requests(smol)[1][0]
    first = engine.add(prompt, SamplingParams(temperature=0), max_tokens=6)
    engine.run()
    engine.release(first, keep=True)
    assert list(engine.cache.values()) == [prompt + first.generated[:5]]
    # a second turn re-sends the history: only the new tokens are prefilled
    turn2 = prompt + first.generated + [28, 29, 30]
    second = engine.add(turn2, SamplingParams(temperature=0), max_tokens=4)
    assert second.n_cached == len(prompt) + 5 and len(second.pending) == 4
    engine.run()
    fresh = Engine(smol)
    engine.release(second)
    engine._evict_one()
    assert smol.kv.n_used() == 0
    again = fresh.add(turn2, SamplingParams(temperature=0), max_tokens=4)
    fresh.run()
    assert again.generated == second.generated
    fresh.release(again)
    assert engine.stats["prefix_hits"] == 1 and engine.stats["prefix_tokens"] == len(prompt) + 5


def test_max_running_queues_the_rest(smol):
    smol.kv.clear()
    engine = Engine(smol, max_running=1)
    a = engine.add([1, 2, 3], SamplingParams(temperature=0), max_tokens=3)
    b = engine.add([4, 5, 6], SamplingParams(temperature=0), max_tokens=3)
    assert (a.state, b.state, engine.n_waiting) == ("running", "waiting", 1)
    while not a.finished:
        engine.step()
    assert b.state == "waiting"
    engine.release(a)
    engine.run()
    assert len(b.generated) == 3
    engine.release(b)
    assert smol.kv.n_used() == 0


def test_n_choices_fork_the_prompt_and_use_seed_plus_i(smol):
    smol.kv.clear()
    engine = Engine(smol)
    prompt = _requests(smol)[0][0]
    params = SamplingParams(temperature=1.0, seed=100)
    single = engine.add(prompt, params, max_tokens=6)
    assert not single.forks                         # n = 1: no other choices
    engine.release(single)
    parent = engine.add(prompt, params, max_tokens=6, n=3)
    choices = [parent] + parent.forks
    steps = 0
    while any(not c.finished for c in choices):
        engine.step()
        steps += 1
    # one prefill for all three (the prompt fits one chunk), then one token each per step
    assert steps <= 7 and all(c.n_prompt == len(prompt) for c in choices)
    for i, c in enumerate(choices):
        alone = engine.add(prompt, SamplingParams(temperature=1.0, seed=100 + i), max_tokens=6)
        engine.run()
        assert c.generated == alone.generated
        engine.release(alone)
    for c in choices:
        engine.release(c)
    assert smol.kv.n_used() == 0


def test_logprobs_are_the_raw_log_softmax(smol):
    import numpy as np
    smol.kv.clear()
    engine = Engine(smol)
    prompt = _requests(smol)[0][0]
    seq = engine.add(prompt, SamplingParams(temperature=0), max_tokens=3, logprobs=2)
    engine.run()
    lp = seq.token_logprobs
    assert [e.token for e in lp] == seq.generated
    assert all(e.top[0] == (e.token, e.logprob) and e.top[1][1] <= e.logprob and e.logprob < 0
               for e in lp)                          # greedy: the chosen token is the best one
    engine.release(seq)
    logits = smol.logits(prompt)[-1].astype(np.float64)
    expect = logits[seq.generated[0]] - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    assert abs(lp[0].logprob - expect) < 1e-6


def test_attention_does_not_depend_on_where_a_sequence_cells_are(smol):
    """A sequence whose later positions sit in lower cells than its earlier ones (as after
    preemption, frees by other sequences, or a shared cached prefix) gets the logits bits it
    gets in contiguous cells: acl_host's attention sums do not depend on the keys' order."""
    import numpy as np
    from cann_llm.model import Batch
    prompt = _requests(smol)[1][0]
    smol.kv.clear()
    alone = smol.decode(Batch.sequence(prompt, seq_id=0))
    smol.kv.clear()
    filler = list(range(100, 140))
    smol.decode(Batch.sequence(filler, seq_id=1))              # cells 0..39
    half = len(prompt) // 2
    smol.decode(Batch.sequence(prompt[:half], seq_id=0))       # cells 40..
    smol.kv.seq_rm(1)                                          # holes at 0..39
    scattered = smol.decode(Batch.sequence(prompt[half:], start_pos=half, seq_id=0))
    cells = np.flatnonzero(smol.kv.seq == 1)                   # seq 0's bit
    assert smol.kv.pos[cells[0]] > smol.kv.pos[cells[-1]]      # later positions, lower cells
    smol.kv.clear()
    assert np.array_equal(scattered, alone)


def test_a_queue_that_can_never_run_is_an_error_not_a_spin(default_model_path):
    from cann_llm import ContextFullError
    with cann_llm.load(str(default_model_path), n_ctx=32, n_batch=32) as m:
        engine = Engine(m)
        a = engine.add(list(range(10, 30)), SamplingParams(temperature=0), max_tokens=2)
        engine.run()                                  # finished, not released: holds 21 cells
        b = engine.add(list(range(40, 60)), SamplingParams(temperature=0), max_tokens=2)
        assert b.state == "waiting"
        with pytest.raises(ContextFullError, match="finished sequences still hold cells"):
            engine.step()
        engine.release(a)
        engine.run()
        assert len(b.generated) == 2
        engine.release(b)


def test_a_new_sequence_never_sees_cells_left_under_its_id(smol):
    """generate() keeps sequence 0's cells for its next call; an Engine sequence that later gets
    id 0 must not attend to them."""
    smol.kv.clear()
    smol._seq_tokens = []
    prompt = _requests(smol)[0][0]
    engine = Engine(smol)
    alone = engine.add(prompt, SamplingParams(temperature=0), max_tokens=12, logprobs=0)
    engine.run()
    engine.release(alone)
    list(smol.generate(list(range(1000, 1060)), max_tokens=3, temperature=0))   # keeps seq 0
    assert smol.kv.seq_pos_max(0) >= 0
    again = engine.add(prompt, SamplingParams(temperature=0), max_tokens=12, logprobs=0)
    assert again.id == 0
    engine.run()
    assert again.generated == alone.generated          # and the raw logits are the same bits:
    assert [e.logprob for e in again.token_logprobs] == [e.logprob for e in alone.token_logprobs]
    engine.release(again)
    smol.kv.clear()
