"""The profiler: per-node device times from the backend (clm_cann_profile), and the Chrome trace
that `--profile` / CANN_LLM_PROFILE write for run, bench and serve."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import run_python
from serve_util import Server


def _small_graph(clm, ctx):
    T = clm.TensorType
    a = ctx.new_tensor(T.F32, (64, 8), name="a")
    w = ctx.new_tensor(T.F32, (64, 16), name="w")
    y = ctx.mul_mat(w, a)
    y.name = "y"
    z = ctx.add(y, y)
    z.name = "z"
    return a, w, z


def test_node_times_come_in_graph_order_and_are_taken_once(clm, device, backend):
    with clm.Context() as ctx:
        a, w, z = _small_graph(clm, ctx)
        graph = ctx.new_graph().build_forward(z)
        with ctx.alloc_tensors(device.buffer_type):
            a.set(np.ones((8, 64), np.float32))
            w.set(np.ones((16, 64), np.float32))
            backend.set_profiling(True)
            try:
                backend.graph_compute(graph)
                backend.graph_compute(graph)
                nodes = backend.take_node_times()
                assert [(n["name"], n["op"].name, n["graph"]) for n in nodes] == [
                    ("y", "MUL_MAT", 0), ("z", "ADD", 0), ("y", "MUL_MAT", 1), ("z", "ADD", 1)]
                assert nodes[0]["ne"] == (16, 8, 1, 1) and nodes[1]["type"].name == "F32"
                assert all(n["ms"] >= 0 for n in nodes)
                # a node starts where the previous one of its graph ended
                assert nodes[0]["start_ms"] == 0 and nodes[2]["start_ms"] == 0
                assert nodes[1]["start_ms"] == pytest.approx(nodes[0]["ms"], abs=1e-3)
                assert backend.take_node_times() == []          # taken once
                assert np.array_equal(z.get(), np.full((8, 16), 128, np.float32))
            finally:
                backend.set_profiling(False)
        with pytest.raises(clm.CannError, match="profiling is off"):
            backend.take_node_times()


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "cann_llm.cli", *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def _trace(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    return events, names


def test_bench_profile_writes_a_trace_and_prints_the_top_ops(default_model_path, tmp_path):
    out = tmp_path / "trace.json"
    r = _cli("bench", str(default_model_path), "-p", "16", "-n", "4", "-r", "1", "-t", "2",
             "--llamacpp", "off", "--profile", str(out))
    assert r.returncode == 0, r.stderr
    assert "top ops by device time" in r.stdout
    table = r.stdout.split("top ops by device time:")[1]
    assert "| MUL_MAT |" in table and "| FLASH_ATTN_EXT |" in table
    events, names = _trace(out)
    assert "CANN0 stream" in names.values() and "MainThread" in names.values()
    ops = [e for e in events if e.get("cat") == "op"]
    host = {e["name"] for e in events if e.get("cat") == "host"}
    assert {"load model", "plan graph", "upload inputs", "launch CANN0", "download outputs",
            "engine step", "sample"} <= host
    assert ops and all(e["ph"] == "X" and e["dur"] >= 0 for e in ops)
    assert {"op", "type", "ne", "backend"} <= set(ops[0]["args"])
    assert all(names[e["tid"]] == "CANN0 stream" for e in ops)
    # each decode graph holds every layer's projections: 4 per layer (Q/K/V and gate/up fused at
    # load) and the output layer
    assert sum(e["args"]["op"] == "MUL_MAT" for e in ops) % (4 * 30 + 1) == 0


def test_profiled_generation_gives_the_same_tokens(default_model_path, tmp_path):
    """Profiled graphs run eagerly instead of captured: the tokens must not change."""
    args = ("run", str(default_model_path), "-p", "The capital of France is", "-n", "12",
            "--temp", "0", "-t", "2")
    plain = _cli(*args)
    profiled = _cli(*args, env={"CANN_LLM_PROFILE": str(tmp_path / "run.json")})
    assert plain.returncode == 0 and profiled.returncode == 0, profiled.stderr
    assert plain.stdout == profiled.stdout and plain.stdout.strip()
    events, _ = _trace(tmp_path / "run.json")
    assert any(e.get("cat") == "op" for e in events)


def test_a_profiler_started_after_the_load_records_host_spans_only(default_model_path, tmp_path):
    """The backends time their nodes only when the profiler was running at the load; one started
    later (the Python API) records the host's spans, and generation goes on."""
    trace = tmp_path / "late.json"
    code = f"""
import cann_llm
from cann_llm import profiler
m = cann_llm.load({str(default_model_path)!r}, n_ctx=256, n_threads=2)
profiler.start({str(trace)!r})
out = list(m.generate(m.tokenize("The capital of France is"), max_tokens=4, temperature=0.0))
profiler.stop()
print(len(out))
"""
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"
    events, _ = _trace(trace)
    names = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"engine step", "download outputs"} <= names
    assert not any(e.get("cat") == "op" for e in events)


def test_serve_profile_records_http_requests(default_model_path, tmp_path):
    out = tmp_path / "serve.json"
    server = Server(default_model_path, "--profile", str(out), threads=2)
    try:
        r = server.client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3})
        assert r.status_code == 200
    finally:
        assert server.stop() == 0
    events, _ = _trace(out)
    http = [e for e in events if e.get("cat") == "http"]
    assert any(e["name"] == "HTTP POST /v1/chat/completions" and e["args"]["status"] == 200
               for e in http)
    assert any(e.get("cat") == "op" for e in events)
