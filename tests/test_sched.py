"""The scheduler: backend assignment passes, CPU fallback across splits, layer split over two
devices, the liveness allocator, -v text and the eval callback (no model needed)."""

import numpy as np
import pytest

from cann_llm import backend as be, reference as ref
from cann_llm.backend import Op, TensorType
from cann_llm.dtypes import bf16_bits
from cann_llm.sched import DeviceSlot, Scheduler, _Arena

RNG = np.random.default_rng(0)


def _weights(device, n_embd=64, n_ff=96):
    ctx = be.Context(64)
    w = {"norm": ctx.new_tensor(TensorType.F32, [n_embd], name="norm"),
         "up": ctx.new_tensor(TensorType.F16, [n_embd, n_ff], name="up"),
         "down": ctx.new_tensor(TensorType.F32, [n_ff, n_embd], name="down")}
    buf = ctx.alloc_tensors(device.buffer_type)
    buf.usage = be.BufferUsage.WEIGHTS
    w["norm"].set(1 + 0.1 * RNG.standard_normal(n_embd).astype(np.float32))
    w["up"].set((0.1 * RNG.standard_normal((n_ff, n_embd))).astype(np.float16))
    w["down"].set((0.1 * RNG.standard_normal((n_embd, n_ff))).astype(np.float32))
    return ctx, buf, w


def _graph(w, n_tokens=5, n_embd=64, layers=3):
    ctx = be.Context(256)
    x = ctx.new_tensor(TensorType.F32, [n_embd, n_tokens], name="x")
    x.c.flags |= int(be.TensorFlag.INPUT)
    cur = x
    for il in range(layers):
        h = ctx.mul(ctx.rms_norm(cur, 1e-5), w["norm"])
        h.name = f"attn_norm-{il}"
        u = ctx.silu(ctx.mul_mat(w["up"], h))
        u.name = f"ffn_up-{il}"
        d = ctx.mul_mat(w["down"], u)
        d.name = f"ffn_out-{il}"
        cur = ctx.add(d, cur)
        cur.name = f"l_out-{il}"
    g = ctx.new_graph(512)
    g.build_forward(cur)
    return ctx, g, x, cur


def _run(slots, w, x_val, **kw):
    sched = Scheduler(slots)
    ctx, g, x, out = _graph(w)
    plan = sched.plan(g, {"x": x}, {"out": out}, **kw)
    return sched, plan, plan.run({"x": x_val})["out"]


def test_arena_reuses_freed_blocks():
    a = _Arena(64)
    o1, o2 = a.alloc(100), a.alloc(100)
    a.release(o1, 100)
    assert a.alloc(64) == o1 and a.end == 256
    a.release(o2, 100)
    a.release(o1, 64)
    assert a.free == [[0, 256]]                 # the two holes merged back into one
    assert a.alloc(256) == 0 and a.end == 256


def test_graph_scan_matches_the_tensors_it_describes(device):
    """Graph.scan (one C call) gives what reading each node's attributes gives: op, view and
    memory flags, root and its buffer type, and per source the source, its root, the root's
    buffer type and usage; supports_graph is supports_op node by node."""
    wctx, wbuf, w = _weights(device)
    ctx, g, x, out = _graph(w)
    view = ctx.view_4d(out, [32, 5], [out.nb[1]], 0)       # a view node over a computed node
    g.build_forward(ctx.scale(view, 2.0))
    (words, sources), W = g.scan(), be.SCAN_WORDS
    nodes = g.nodes
    assert len(words) == W * len(nodes) and any(n.is_view for n in nodes)
    at = 0
    for i, n in enumerate(nodes):
        rec = words[i * W:(i + 1) * W]
        root = n.storage
        assert rec[be.SCAN_NODE] == n.address and rec[be.SCAN_OP] == n.op
        assert rec[be.SCAN_FLAGS] == ((be.SCAN_VIEW if n.is_view else 0)
                                      | (be.SCAN_HAS_DATA if n.has_data else 0)
                                      | (be.SCAN_ROOT_HAS_DATA if root.has_data else 0))
        assert rec[be.SCAN_ROOT] == root.address
        assert rec[be.SCAN_ROOT_BUFT] == (root.buffer_type_id or 0)
        srcs = n.sources
        assert rec[be.SCAN_N_SRC] == len(srcs) > 0
        for src in srcs:
            if src is None:
                assert sources[at] == (0, 0, 0, 0)
                at += 1
                continue
            sroot = src.storage
            usage = sroot.buffer_usage
            assert sources[at] == (src.address, sroot.address, sroot.buffer_type_id or 0,
                                   0 if usage is None else usage + 1)
            at += 1
    assert at == len(sources)
    assert be.BufferUsage.WEIGHTS + 1 in {usage for _, _, _, usage in sources}
    assert list(device.supports_graph(g)) == [int(device.supports_op(n)) for n in nodes]


def test_declined_ops_fall_back_to_cpu(device):
    wctx, wbuf, w = _weights(device)
    x_val = RNG.standard_normal((5, 64)).astype(np.float32)
    _, plan_dev, full = _run([DeviceSlot(device)], w, x_val)
    assert plan_dev.counts() == {device.name: len(plan_dev.splits[0].nodes)}
    assert len(plan_dev.splits) == 1
    sched, plan, mixed = _run([DeviceSlot(device, decline={Op.RMS_NORM, Op.UNARY})], w, x_val)
    counts = plan.counts()
    assert counts["CPU"] == 6 and len(plan.splits) > 2          # rms_norm + silu of 3 layers
    np.testing.assert_allclose(mixed, full, rtol=2e-3, atol=2e-3)
    text = plan.describe()
    assert "split 0" in text and "CPU" in text and "compute buffer" in text


def test_allocator_reuses_memory(device):
    wctx, wbuf, w = _weights(device)
    x_val = RNG.standard_normal((5, 64)).astype(np.float32)
    sched, plan, _ = _run([DeviceSlot(device)], w, x_val)
    alloc = device.buffer_type.alloc_size
    total = sum(alloc(n) for n in plan.nodes if n.op not in (Op.VIEW, Op.RESHAPE))
    assert 0 < plan.compute_sizes[0] < total / 2


def test_eval_callback_sees_nodes_and_stops(device):
    wctx, wbuf, w = _weights(device)
    x_val = RNG.standard_normal((5, 64)).astype(np.float32)
    sched = Scheduler([DeviceSlot(device)])
    ctx, g, x, out = _graph(w)
    plan = sched.plan(g, {"x": x}, {"out": out}, split_each_node=True)
    seen = []

    def cb(name, op, ttype, ne, data):
        seen.append((name, op, data.shape))
        return name != "ffn_out-1"

    assert plan.run({"x": x_val}, cb) is None
    names = [s[0] for s in seen]
    assert "attn_norm-0" in names
    assert names[-1] == "ffn_out-1" and "l_out-1" not in names
    assert dict((s[0], s[2]) for s in seen)["ffn_up-0"] == (5, 96)
    # the full run through the callback path equals the plain run
    res = plan.run({"x": x_val}, lambda *a: True)["out"]
    _, _, full = _run([DeviceSlot(device)], w, x_val)
    np.testing.assert_array_equal(res, full)
    # against the numpy reference
    ctx2, g2, x2, out2 = _graph(w)
    expect = ref.evaluate(g2, {x2: x_val, **{t: t.get() for t in w.values()}})[out2]
    np.testing.assert_allclose(full, expect.reshape(full.shape), rtol=2e-2, atol=2e-2)


def test_reference_refuses_a_planned_graph(device):
    """Planning rewires sources to the splits' copies: the numpy reference says so rather than
    computing on copies it never saw (it gave zeros); the same graph evaluates before planning."""
    wctx, wbuf, w = _weights(device)
    x_val = RNG.standard_normal((5, 64)).astype(np.float32)
    ctx, g, x, out = _graph(w)
    leaves = {x: x_val, **{t: t.get() for t in w.values()}}
    before = ref.evaluate(g, leaves)[out]
    assert np.abs(before).max() > 0
    sched = Scheduler([DeviceSlot(device)])
    plan = sched.plan(g, {"x": x}, {"out": out})    # owns the copies g now reads: kept alive
    with pytest.raises(ref.ReferenceError, match="planned by the scheduler"):
        ref.evaluate(g, leaves)
    del plan
    sched.close()


def _gemma_ffn(ctx, x, erf=False):
    """A Gemma-style FFN tail on x [n_ff, n_tokens]: geglu_split(gelu-tanh, x * 0.5), then tanh
    and the fused form with swapped halves."""
    g = (ctx.geglu_erf_split if erf else ctx.geglu_split)(ctx.gelu(x), ctx.scale(x, 0.5))
    h = ctx.tanh(ctx.gelu_erf(g))
    return ctx.add(ctx.geglu(h, True), ctx.geglu_erf(h))


def test_gelu_geglu_tanh_on_device_and_cpu_agree(device):
    """GELU / GELU_ERF / TANH / GEGLU / GEGLU_ERF: all on the device, or declined and run on the
    CPU reference by the splitter, give the same values (to F32 rounding)."""
    x_val = RNG.uniform(-6, 6, (5, 48)).astype(np.float32)
    results = []
    for decline in (set(), {Op.UNARY, Op.GLU}):
        ctx = be.Context(64)
        x = ctx.new_tensor(TensorType.F32, [48, 5], name="x")
        x.c.flags |= int(be.TensorFlag.INPUT)
        out = _gemma_ffn(ctx, x, erf=bool(decline))
        g = ctx.new_graph()
        g.build_forward(out)
        plan = Scheduler([DeviceSlot(device, decline=decline)]).plan(g, {"x": x}, {"out": out})
        counts = plan.counts()
        if decline:
            assert counts["CPU"] == 6        # every node but the scale and the add
        else:
            assert "CPU" not in counts
        results.append(plan.run({"x": x_val})["out"])
    # the two graphs differ only in the first glu (gelu_erf vs gelu): compare each with numpy
    for erf, got in zip((False, True), results):
        ctx = be.Context(64)
        x = ctx.new_tensor(TensorType.F32, [48, 5], name="x")
        out = _gemma_ffn(ctx, x, erf=erf)
        g = ctx.new_graph()
        g.build_forward(out)
        expect = ref.evaluate(g, {x: x_val})[out]
        np.testing.assert_allclose(got, expect.reshape(got.shape), rtol=1e-5, atol=1e-6)


# ---- the MoE FFN ops: on the device, or declined and run on the CPU reference between splits ---

MOE_OPS = {Op.ARGSORT, Op.SUM_ROWS, Op.CLAMP, Op.DIV, Op.MUL_MAT_ID}


def _moe_weights(device, n_embd=32, n_ff=64, n_expert=8, types=("Q8_0", "Q8_0", "F16")):
    """Qwen3-MoE's FFN weights in the device's buffer: the router in F32, the experts' up, gate
    and down of the given types (default Q8_0, Q8_0, F16)."""
    wctx = be.Context(16)
    shapes = {"up": [n_embd, n_ff, n_expert], "gate": [n_embd, n_ff, n_expert], "down": [n_ff, n_embd, n_expert]}
    w = {"gate_inp": wctx.new_tensor(TensorType.F32, [n_embd, n_expert], name="gate_inp")}
    for name, ttype in zip(("up", "gate", "down"), types):
        w[name] = wctx.new_tensor(TensorType[ttype], shapes[name], name=name + "_exps")
    buf = wctx.alloc_tensors(device.buffer_type)
    buf.usage = be.BufferUsage.WEIGHTS
    w["gate_inp"].set(RNG.standard_normal((n_expert, n_embd)).astype(np.float32))
    for name in ("up", "gate", "down"):
        k, n = shapes[name][:2]
        values = (0.2 * RNG.standard_normal((n_expert, n, k))).astype(np.float32)
        if w[name].type == TensorType.F16:
            w[name].set(values.astype(np.float16))
        elif w[name].type == TensorType.BF16:
            w[name].set(bf16_bits(values))
        else:
            w[name].set(be.quantize_f32(w[name].type, values).reshape(n_expert, n, -1))
    return wctx, buf, w


def _moe_ffn(w, n_used=2, n_tokens=4):
    """llama.cpp's build_moe_ffn for Qwen3-MoE: softmax gating, the top n_used experts
    (argsort_top_k), their weights normalized (sum_rows, clamp, div), SwiGLU experts through
    mul_mat_id, and the weighted experts summed through views."""
    n_embd, n_expert = w["gate_inp"].ne[:2]
    ctx = be.Context(256)
    x = ctx.new_tensor(TensorType.F32, [n_embd, n_tokens], name="x")
    x.c.flags |= int(be.TensorFlag.INPUT)
    probs = ctx.soft_max_ext(ctx.mul_mat(w["gate_inp"], x))                  # [n_expert, n_tokens]
    selected = ctx.argsort_top_k(probs, n_used)                               # [n_used, n_tokens]
    weights = ctx.get_rows(ctx.reshape(probs, [1, n_expert, n_tokens]), selected)
    weights = ctx.reshape(weights, [n_used, n_tokens])
    total = ctx.clamp(ctx.sum_rows(weights), 6.103515625e-5, float("inf"))    # [1, n_tokens]
    weights = ctx.reshape(ctx.div(weights, total), [1, n_used, n_tokens])
    cur = ctx.reshape(x, [n_embd, 1, n_tokens])
    up = ctx.mul_mat_id(w["up"], cur, selected)                               # [n_ff, n_used, n_tokens]
    gate = ctx.mul_mat_id(w["gate"], cur, selected)
    experts = ctx.mul_mat_id(w["down"], ctx.swiglu_split(gate, up), selected)  # [n_embd, n_used, n_tokens]
    experts = ctx.mul(experts, weights)
    nb = experts.nb
    views = [ctx.view_4d(experts, [n_embd, n_tokens], [nb[2], nb[2] * n_tokens], i * nb[1])
             for i in range(n_used)]
    out = views[0]
    for v in views[1:]:
        out = ctx.add(out, v)
    out.name = "moe_out"
    g = ctx.new_graph(256)
    g.build_forward(out)
    return ctx, g, x, out


def _moe_loop(w, x_val, n_used=2):
    """The MoE FFN token by token: softmax, the n_used largest, weights normalized to sum 1, and
    the weighted sum of each chosen expert's SwiGLU FFN (on the weights as stored)."""
    gi = w["gate_inp"].get().astype(np.float64)
    dec = {k: ref.decode(w[k].type, w[k].get()).astype(np.float64) for k in ("up", "gate", "down")}
    out = np.zeros_like(x_val, dtype=np.float64)
    for t, xt in enumerate(x_val.astype(np.float64)):
        logits = gi @ xt
        p = np.exp(logits - logits.max())
        p /= p.sum()
        chosen = sorted(range(len(p)), key=lambda e: -p[e])[:n_used]
        norm = sum(p[e] for e in chosen)
        for e in chosen:
            g, u = dec["gate"][e] @ xt, dec["up"][e] @ xt
            out[t] += p[e] / norm * (dec["down"][e] @ (g / (1 + np.exp(-g)) * u))
    return out


def test_moe_ops_fall_back_to_cpu(device):
    """The five ops on the CPU reference between device splits. The slot declines them itself, so
    the test keeps exercising the fallback once the device computes some of them (MUL_MAT_ID)."""
    wctx, wbuf, w = _moe_weights(device)
    ctx, g, x, out = _moe_ffn(w)
    assert {n.op for n in g.nodes} >= MOE_OPS
    sched = Scheduler([DeviceSlot(device, decline=MOE_OPS)])
    plan = sched.plan(g, {"x": x}, {"out": out})
    on_cpu = {plan.nodes[i].op for i, s in enumerate(plan.assign) if s == sched.cpu}
    assert MOE_OPS <= on_cpu
    assert plan.counts()[device.name] > 0                      # the rest stays on the device
    x_val = RNG.standard_normal((4, 32)).astype(np.float32)
    got = plan.run({"x": x_val})["out"]
    # the same graph on the reference alone, and the FFN written out token by token
    ctx2, g2, x2, out2 = _moe_ffn(w)
    want = ref.evaluate(g2, {x2: x_val, **{t: t.get() for t in w.values()}})[out2]
    np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(got, _moe_loop(w, x_val), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("types,n_tokens", [(("Q8_0", "Q8_0", "F16"), 6), (("Q4_0", "Q4_1", "Q4_0"), 9),
                                            (("Q4_0", "Q4_1", "BF16"), 2)])
def test_moe_ops_on_the_device(device, types, n_tokens):
    """The same FFN with the five ops on the device: one split, no CPU node; the result matches
    the fallback run, the reference's evaluate() and the token-by-token loop (the routing rows are
    random floats, so the top-k has no ties for the device and ggml's CPU to order differently).
    Tokens with repeated experts, so every expert slice is used more than once. The experts run
    gathered per token (Q8_0; Q4_0 / Q4_1 at 2 tokens) or routed through the grouped product (F16,
    BF16; Q4_0 / Q4_1 at 9 tokens: 18 (token, expert) pairs for 8 experts). The quantized and F16
    experts take F16 activations and give F16 results on the device (as MUL_MAT), so the
    comparison is by relative error norm (MUL_MAT's test-ops NMSE 5e-4 is a norm of 2.2e-2)."""
    wctx, wbuf, w = _moe_weights(device, types=types)
    ctx, g, x, out = _moe_ffn(w, n_tokens=n_tokens)
    sched = Scheduler([DeviceSlot(device)])
    plan = sched.plan(g, {"x": x}, {"out": out})
    placed = {plan.nodes[i].op for i, s in enumerate(plan.assign) if s != sched.cpu}
    assert MOE_OPS <= placed
    assert all(s != sched.cpu for s in plan.assign)
    x_val = RNG.standard_normal((n_tokens, 32)).astype(np.float32)
    got = plan.run({"x": x_val})["out"].astype(np.float64)

    def rel(want):
        want = np.asarray(want, dtype=np.float64).reshape(got.shape)
        return np.linalg.norm(got - want) / np.linalg.norm(want)
    ctx2, g2, x2, out2 = _moe_ffn(w, n_tokens=n_tokens)
    fallback = Scheduler([DeviceSlot(device, decline=MOE_OPS)]).plan(g2, {"x": x2}, {"out": out2})
    assert rel(fallback.run({"x": x_val})["out"]) < 5e-3
    ctx3, g3, x3, out3 = _moe_ffn(w, n_tokens=n_tokens)
    assert rel(ref.evaluate(g3, {x3: x_val, **{t: t.get() for t in w.values()}})[out3]) < 5e-3
    assert rel(_moe_loop(w, x_val)) < 5e-3
