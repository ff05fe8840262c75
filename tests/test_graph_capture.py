"""ACL graph mode (GGML_CANN_ACL_GRAPH, read when a backend is created): a multi-node graph
computed through capture/replay gives the same bytes as eager execution, a repeated graph is a
replay, any change of a node's op_params, shape or data address forces a recapture, and the LRU
of captured graphs (GGML_CANN_GRAPH_CACHE_CAPACITY) evicts the least recently used one.
Shapes passed to new_tensor are ggml order; numpy arrays are the reverse.
"""

import os

import numpy as np
import pytest


def _backend(device, graph: bool, capacity: int | None = None, pool: str | None = None,
             mul_mat_id: str | None = None):
    saved = {k: os.environ.get(k) for k in ("GGML_CANN_ACL_GRAPH", "GGML_CANN_GRAPH_CACHE_CAPACITY",
                                            "GGML_CANN_MEM_POOL", "CANN_LLM_MUL_MAT_ID")}
    os.environ["GGML_CANN_ACL_GRAPH"] = "1" if graph else "0"
    if capacity is not None:
        os.environ["GGML_CANN_GRAPH_CACHE_CAPACITY"] = str(capacity)
    if pool is not None:
        os.environ["GGML_CANN_MEM_POOL"] = pool
    if mul_mat_id is not None:
        os.environ["CANN_LLM_MUL_MAT_ID"] = mul_mat_id
    try:
        return device.init_backend()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Chain:
    """x, y [n0, n1] F32 -> h = F16(((x + y) * x) + y): ADD, MUL, ADD, CPY."""

    def __init__(self, clm, device, n0=64, n1=8):
        self.ctx = clm.Context(64)
        self.x = self.ctx.new_tensor(clm.TensorType.F32, [n0, n1], name="x")
        self.y = self.ctx.new_tensor(clm.TensorType.F32, [n0, n1], name="y")
        a = self.ctx.add(self.x, self.y)
        b = self.ctx.mul(a, self.x)
        self.c = self.ctx.add(b, self.y)
        self.h = self.ctx.new_tensor(clm.TensorType.F16, [n0, n1], name="h")
        self.out = self.ctx.cpy(self.c, self.h)
        self.graph = self.ctx.new_graph().build_forward(self.out)
        self.buffer = self.ctx.alloc_tensors(device.buffer_type)
        self.shape = (n1, n0)

    def run(self, backend, seed: int) -> bytes:
        rng = np.random.default_rng(seed)
        self.x.set(rng.standard_normal(self.shape).astype(np.float32))
        self.y.set(rng.standard_normal(self.shape).astype(np.float32))
        backend.graph_compute(self.graph)
        backend.synchronize()
        return self.h.get().tobytes()

    def close(self):
        self.buffer.close()
        self.ctx.close()


@pytest.fixture
def chain(clm, device):
    c = Chain(clm, device)
    yield c
    c.close()


def test_capture_replay_matches_eager(clm, device, chain):
    with _backend(device, graph=False) as eager, _backend(device, graph=True) as graph:
        want = [chain.run(eager, seed) for seed in range(4)]
        assert eager.stats()["graph_captures"] == 0
        got = [chain.run(graph, seed) for seed in range(4)]
        assert got == want
        stats = graph.stats()
        assert stats["pool_kind"] == "vmm"          # acl_host reports a VMM granularity
        assert stats["graph_captures"] == 1          # the first compute captured
        assert stats["graph_replays"] == 3           # ... and the others replayed it
        assert stats["graph_cached"] == 1


def test_graph_mode_off_with_the_slot_pool(clm, device, chain):
    with _backend(device, graph=True, pool="leg") as backend:
        chain.run(backend, 0)
        chain.run(backend, 1)
        stats = backend.stats()
        assert stats["pool_kind"] == "legacy"
        assert stats["graph_captures"] == stats["graph_replays"] == stats["graph_cached"] == 0


def _vmm_graph_backend(device, **kwargs):
    backend = _backend(device, graph=True, **kwargs)
    kind = backend.stats()["pool_kind"]
    if kind != "vmm":
        backend.close()
        raise AssertionError(f"graph mode needs the VMM pool, the backend chose {kind!r}")
    return backend


def test_changed_node_forces_recapture(clm, device, chain):
    with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as backend:
        chain.run(backend, 0)
        chain.run(backend, 1)
        assert (backend.stats()["graph_captures"], backend.stats()["graph_replays"]) == (1, 1)

        # different op_params on one node (ADD ignores them, but the key must not)
        chain.c.c.op_params[0] = 7
        assert chain.run(backend, 2) == chain.run(eager, 2)
        assert (backend.stats()["graph_captures"], backend.stats()["graph_replays"]) == (2, 1)
        chain.run(backend, 3)
        assert backend.stats()["graph_replays"] == 2

        # different data addresses: the same graph built again in another buffer
        twin = Chain(clm, device)
        twin.c.c.op_params[0] = 7
        try:
            assert twin.run(backend, 4) == chain.run(eager, 4)
            assert (backend.stats()["graph_captures"], backend.stats()["graph_replays"]) == (3, 2)
            assert twin.run(backend, 5) == chain.run(eager, 5)
            assert backend.stats()["graph_replays"] == 3
        finally:
            twin.close()

    # different shape: another graph with the same ops
    with _vmm_graph_backend(device) as backend:
        small, large = Chain(clm, device, 32, 4), Chain(clm, device, 32, 5)
        try:
            small.run(backend, 0)
            large.run(backend, 0)
            small.run(backend, 1)
            stats = backend.stats()
            assert (stats["graph_captures"], stats["graph_replays"], stats["graph_cached"]) == (2, 1, 2)
        finally:
            small.close()
            large.close()


def test_lru_eviction(clm, device):
    with _vmm_graph_backend(device, capacity=2) as backend:
        chains = [Chain(clm, device, 16 * (i + 1), 2) for i in range(3)]
        try:
            for c in chains:
                c.run(backend, 0)
            stats = backend.stats()
            assert stats["graph_captures"] == 3 and stats["graph_cached"] == 2
            chains[2].run(backend, 1)                 # most recent: replay
            assert backend.stats()["graph_replays"] == 1
            chains[0].run(backend, 1)                 # evicted: captured again (evicts chains[1])
            assert backend.stats()["graph_captures"] == 4
            chains[2].run(backend, 2)
            assert backend.stats()["graph_replays"] == 2
            chains[1].run(backend, 2)
            assert backend.stats()["graph_captures"] == 5
        finally:
            for c in chains:
                c.close()


def test_bad_cache_capacity_is_an_error(clm, device):
    with pytest.raises(clm.CannError, match="GGML_CANN_GRAPH_CACHE_CAPACITY"):
        _backend(device, graph=True, capacity=0)


def test_capture_with_pool_temporaries(clm, device):
    """rms_norm, mul_mat and soft_max take pool temporaries: captured at the warm-up's addresses,
    replays give the eager bytes."""
    T = clm.TensorType

    def run(graph: bool):
        with _backend(device, graph=graph) as backend, clm.Context(64) as ctx:
            x = ctx.new_tensor(T.F32, [256, 8], name="x")
            w = ctx.new_tensor(T.F16, [256, 128], name="w")
            g = ctx.new_tensor(T.F32, [256], name="g")
            s = ctx.soft_max_ext(ctx.mul_mat(w, ctx.mul(ctx.rms_norm(x, 1e-6), g)), None, 0.125)
            graph_ = ctx.new_graph().build_forward(s)
            assert all(device.supports_op(n) for n in graph_.nodes)
            with ctx.alloc_tensors(device.buffer_type):
                rng = np.random.default_rng(3)
                w.set(rng.standard_normal((128, 256)).astype(np.float16))
                g.set(rng.standard_normal(256).astype(np.float32))
                outs = []
                for _ in range(3):
                    x.set(rng.standard_normal((8, 256)).astype(np.float32))
                    backend.graph_compute(graph_)
                    backend.synchronize()
                    outs.append(s.get().tobytes())
                return outs, backend.stats()

    eager, _ = run(False)
    captured, stats = run(True)
    assert captured == eager
    if stats["pool_kind"] == "vmm":
        assert (stats["graph_captures"], stats["graph_replays"]) == (1, 2)


class Rope:
    """x [64, 4, n_tokens] F32 rotated at positions pos [n_tokens] (ROPE's sin/cos table is an op
    constant cache sized by the token count)."""

    def __init__(self, clm, device, n_tokens: int):
        self.ctx = clm.Context(16)
        self.x = self.ctx.new_tensor(clm.TensorType.F32, [64, 4, n_tokens], name="x")
        self.pos = self.ctx.new_tensor(clm.TensorType.I32, [n_tokens], name="pos")
        self.out = self.ctx.rope_ext(self.x, self.pos, None, 64)
        self.graph = self.ctx.new_graph().build_forward(self.out)
        self.buffer = self.ctx.alloc_tensors(device.buffer_type)
        self.n_tokens = n_tokens

    def run(self, backend, seed: int) -> bytes:
        rng = np.random.default_rng(seed)
        self.x.set(rng.standard_normal((self.n_tokens, 4, 64)).astype(np.float32))
        self.pos.set(rng.integers(0, 4096, self.n_tokens).astype(np.int32))
        backend.graph_compute(self.graph)
        backend.synchronize()
        return self.out.get().tobytes()

    def close(self):
        self.buffer.close()
        self.ctx.close()


def test_replay_after_an_op_cache_grows(clm, device):
    """A bigger graph regrows ROPE's table; graphs captured against the old table must not replay
    into freed memory (the acl_host sanitizer would report a use after free)."""
    small, big = Rope(clm, device, 4), Rope(clm, device, 512)
    try:
        with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as graph:
            want = [small.run(eager, 1), big.run(eager, 2), small.run(eager, 3)]
            got = [small.run(graph, 1), big.run(graph, 2), small.run(graph, 3)]
            assert got == want
            assert graph.stats()["graph_captures"] >= 2
    finally:
        small.close()
        big.close()


def test_replays_without_the_pre_pass_interleaved_with_misses(clm, device):
    """A replay skips the pre-pass (the ops' prepare hooks): its captured launches rebuild ROPE's
    sin/cos for the new positions, and the eager runs of new graphs in between (misses, which run
    the pre-pass and may reuse the same sin/cos slots) do not make it replay stale tables."""
    a, b = Rope(clm, device, 4), Rope(clm, device, 4)
    fresh = []
    try:
        with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as graph:
            for seed in range(1, 5):
                fresh.append(Rope(clm, device, 4))
                want = [a.run(eager, seed), fresh[-1].run(eager, seed + 50), b.run(eager, seed + 100)]
                got = [a.run(graph, seed), fresh[-1].run(graph, seed + 50), b.run(graph, seed + 100)]
                assert got == want
            stats = graph.stats()
            assert stats["graph_replays"] == 6 and stats["graph_captures"] == 6
    finally:
        for rope in (a, b, *fresh):
            rope.close()


# (composition, tokens) -> the graph's two MUL_MAT_IDs (up Q4_0, down F16) as (routed, gathered):
# the F16 experts are always routed, the Q4_0 ones once 3 experts x n_tokens cover the 8 experts
MOE_PATHS = {("auto", 5): (2, 0), ("auto", 1): (1, 1), ("routed", 1): (2, 0), ("gather", 5): (0, 2)}


@pytest.mark.parametrize("path,n_tokens", list(MOE_PATHS))
def test_moe_ops_replay_with_new_expert_ids(clm, device, path, n_tokens):
    """Qwen3-MoE's router and experts (ARGSORT top-k, SUM_ROWS, CLAMP, DIV, MUL_MAT_ID on Q4_0 and
    F16 experts): the ids stay on the device, so a replay with other router logits (other experts
    chosen, repeated within and across tokens) gives the eager bytes; nothing is copied from the
    host or synchronized inside the captured graph (acl_host refuses that during capture). Both
    MUL_MAT_ID compositions (CANN_LLM_MUL_MAT_ID; counted per captured launch) capture, and they
    agree: the Q4_0 experts bit for bit (same dequantized weights, same fused multiply-adds), the
    F16 ones to F16 rounding (the grouped product takes F16 activations and gives F16 rows)."""
    n_embd, n_ff, n_expert, n_used = 64, 32, 8, 3
    ctx = clm.Context(64)
    x = ctx.new_tensor(clm.TensorType.F32, [n_embd, n_tokens], name="x")
    logits = ctx.new_tensor(clm.TensorType.F32, [n_expert, n_tokens], name="logits")
    up = ctx.new_tensor(clm.TensorType.Q4_0, [n_embd, n_ff, n_expert], name="up")
    down = ctx.new_tensor(clm.TensorType.F16, [n_ff, n_embd, n_expert], name="down")
    ids = ctx.argsort_top_k(logits, n_used)                                      # [n_used, n_tokens]
    order = ids.src[0]                                                           # the whole ARGSORT
    h = ctx.mul_mat_id(up, ctx.reshape(x, [n_embd, 1, n_tokens]), ids)          # [n_ff, n_used, n_tokens]
    y = ctx.mul_mat_id(down, h, ids)                                             # [n_embd, n_used, n_tokens]
    total = ctx.clamp(ctx.sum_rows(y), -4.0, 4.0)                                # [1, n_used, n_tokens]
    out = ctx.div(y, ctx.add(ctx.scale(ctx.clamp(total, 0.5, 1.0), 1.0, 0.0), total))
    graph = ctx.new_graph().build_forward(out)
    buffer = ctx.alloc_tensors(device.buffer_type)
    rng = np.random.default_rng(3)
    up.set(clm.quantize_f32(clm.TensorType.Q4_0, rng.standard_normal((n_expert, n_ff, n_embd))
                            .astype(np.float32)).reshape(n_expert, n_ff, -1))
    down.set((0.3 * rng.standard_normal((n_expert, n_embd, n_ff))).astype(np.float16))

    def run(backend, seed):
        r = np.random.default_rng(seed)
        x.set(r.standard_normal((n_tokens, n_embd)).astype(np.float32))
        # a permutation per token, some tokens sharing their top experts
        rows = [r.permutation(n_expert) for _ in range(n_tokens)]
        rows[-1] = rows[0]
        logits.set(np.array(rows, dtype=np.float32))
        backend.graph_compute(graph)
        backend.synchronize()
        return out.get().tobytes(), order.get().tobytes(), h.get().tobytes(), y.get()

    try:
        with _backend(device, graph=False, mul_mat_id="gather") as eager, \
                _vmm_graph_backend(device, mul_mat_id=path) as captured:
            want = [run(eager, seed) for seed in range(4)]
            got = [run(captured, seed) for seed in range(4)]
            assert len({w[1] for w in want}) == 4             # other experts each time
            for g, w in zip(got, want):
                assert g[1:3] == w[1:3]                       # ids, and the Q4_0 experts' bits
                np.testing.assert_allclose(g[3], w[3], rtol=2e-3, atol=2e-3 * np.abs(w[3]).max())
            again = [run(captured, seed) for seed in range(4)]
            assert [a[0] for a in again] == [g[0] for g in got]
            stats = captured.stats()
            assert (stats["graph_captures"], stats["graph_replays"]) == (1, 7)
            routed, gathered = stats["mul_mat_id_routed"], stats["mul_mat_id_gathered"]
            want_routed, want_gathered = MOE_PATHS[path, n_tokens]   # per graph launch
            launches = (routed + gathered) // 2
            assert launches >= 1 and (routed, gathered) == (want_routed * launches, want_gathered * launches)
    finally:
        buffer.close()
        ctx.close()


def test_mul_mat_id_composition_must_be_named(device):
    with pytest.raises(Exception, match="CANN_LLM_MUL_MAT_ID=grouped: expected auto, gather or routed"):
        _backend(device, graph=False, mul_mat_id="grouped")


def _alias(clm, ctx, t):
    """A second tensor with t's type, shape, strides and memory (another address, same fields)."""
    a = ctx.new_tensor(t.type, t.ne, name=t.name + "-alias")
    a.set_strides(t.nb)
    a.alias_storage(t.data, t)
    return a


# Changes to the same graph object between two runs (the kept decode graph's case, which the
# backend compares in its pointer form): each must either recapture (fields of the full key) or
# replay an equal key; a stale replay gives the wrong bytes or misses a capture.
GRAPH_EDITS = {
    "node op": lambda clm, ch, spare: setattr(ch.c.c, "op", int(clm.Op.MUL)),
    "node flags": lambda clm, ch, spare: setattr(ch.c.c, "flags", ch.c.c.flags | int(clm.TensorFlag.OUTPUT)),
    "node data": lambda clm, ch, spare: ch.c.alias_storage(spare.data, spare),
    "node stride of a unit dim": lambda clm, ch, spare: ch.c.c.nb.__setitem__(3, ch.c.c.nb[3] * 2),
    "source rewired": lambda clm, ch, spare: ch.c.src[0].set_src(1, ch.y),
    "outside source data": lambda clm, ch, spare: setattr(ch.y.c, "data", ch.x.c.data),
    "outside source stride": lambda clm, ch, spare: ch.x.c.nb.__setitem__(3, ch.x.c.nb[3] * 2),
}


@pytest.mark.parametrize("edit", list(GRAPH_EDITS))
def test_edited_graph_object_is_not_replayed_stale(clm, device, edit):
    chain = Chain(clm, device)
    spare_ctx = clm.Context(4)
    spare = spare_ctx.new_tensor(clm.TensorType.F32, list(chain.c.ne), name="spare")
    spare_buf = spare_ctx.alloc_tensors(device.buffer_type)
    try:
        with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as backend:
            chain.run(backend, 0)
            chain.run(backend, 1)
            assert (backend.stats()["graph_captures"], backend.stats()["graph_replays"]) == (1, 1)
            GRAPH_EDITS[edit](clm, chain, spare)
            assert chain.run(backend, 2) == chain.run(eager, 2)
            assert chain.run(backend, 3) == chain.run(eager, 3)
            stats = backend.stats()
            assert (stats["graph_captures"], stats["graph_replays"]) == (2, 2)
    finally:
        chain.close()
        spare_buf.close()
        spare_ctx.close()


def test_empty_graph_is_kept_and_released(clm, device, chain):
    """A graph with no nodes (the ggml plugin passes them) gets an entry like any other: computed
    again, then beside a real graph, then the backend closed (its entries freed) without a
    crash; the real graph still replays."""
    with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as backend:
        with clm.Context(2) as ctx:
            empty = ctx.new_graph()
            for _ in range(3):
                backend.graph_compute(empty)
                backend.synchronize()
        for seed in (0, 1):
            assert chain.run(backend, seed) == chain.run(eager, seed)
        assert backend.stats()["graph_replays"] >= 1


def test_same_fields_at_new_addresses_replay(clm, device, chain):
    """A source rewired to another tensor with the same fields (the scheduler's aliases) has the
    same full key: a replay, and the graph's pointer form is remade (later runs replay too)."""
    with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as backend:
        chain.run(backend, 0)
        b = chain.c.src[0]
        b.set_src(1, _alias(clm, chain.ctx, chain.x))
        for seed in (1, 2, 3):
            assert chain.run(backend, seed) == chain.run(eager, seed)
        stats = backend.stats()
        assert (stats["graph_captures"], stats["graph_replays"]) == (1, 3)


def test_raw_reads_beside_captures(clm, device, chain):
    """Buffer.read_raw from another thread (the weight cache's writer) while this thread captures
    graph after graph: the reads succeed and no capture is invalidated (captures begin in
    THREAD_LOCAL mode; in GLOBAL mode a read during a capture would fail and spoil it)."""
    import threading
    with _backend(device, graph=False) as eager, _vmm_graph_backend(device) as backend:
        want = [chain.run(eager, seed) for seed in range(2)]
        stop, errors, reads = threading.Event(), [], [0]

        def reader():
            out = np.empty(chain.buffer.size, dtype=np.uint8)
            try:
                while not stop.is_set():
                    chain.buffer.read_raw(0, out)
                    reads[0] += 1
            except Exception as exc:   # noqa: BLE001 (reported by the assertion below)
                errors.append(exc)
        thread = threading.Thread(target=reader)
        thread.start()
        try:
            for i in range(100):
                chain.c.c.op_params[0] = i + 1      # a new key: a capture every time
                assert chain.run(backend, i % 2) == want[i % 2]
        finally:
            stop.set()
            thread.join()
        assert errors == [] and reads[0] > 100
        assert backend.stats()["graph_captures"] == 100
