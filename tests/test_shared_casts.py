"""Products of one activation share its F16 cast within a graph (run_nodes keeps the first
product's cast for the later ones, as Q/K/V and gate/up would cast the same normed hidden state
again): the results are the bytes each product gives in a graph of its own, eagerly and through
capture/replay, and a node that writes into the activation between two products (memory reuse,
an in-place op) stops the sharing. Shapes passed to new_tensor are ggml order."""

import numpy as np

from test_graph_capture import _backend

K, N, M = 64, 32, 3


def _weights(clm, ctx, rng, names):
    ws = [ctx.new_tensor(clm.TensorType.Q4_0, [K, N], name=n) for n in names]
    values = [clm.quantize_f32(clm.TensorType.Q4_0, rng.standard_normal((N, K)).astype(np.float32))
              for _ in names]
    return ws, values


def _alone(clm, device, backend, value, x_value):
    """mul_mat(w, x) in a graph of its own: nothing to share."""
    ctx = clm.Context(8)
    w = ctx.new_tensor(clm.TensorType.Q4_0, [K, N], name="w")
    x = ctx.new_tensor(clm.TensorType.F32, [K, M], name="x")
    y = ctx.mul_mat(w, x)
    graph = ctx.new_graph().build_forward(y)
    buffer = ctx.alloc_tensors(device.buffer_type)
    try:
        w.set(value)
        x.set(x_value)
        backend.graph_compute(graph)
        backend.synchronize()
        return y.get().copy()
    finally:
        buffer.close()
        ctx.close()


def test_qkv_share_one_cast_and_give_the_bytes_of_separate_products(clm, device):
    rng = np.random.default_rng(0)
    ctx = clm.Context(32)
    x = ctx.new_tensor(clm.TensorType.F32, [K, M], name="x")
    (wq, wk, wv), values = _weights(clm, ctx, rng, ["wq", "wk", "wv"])
    q, k, v = ctx.mul_mat(wq, x), ctx.mul_mat(wk, x), ctx.mul_mat(wv, x)
    out = ctx.add(ctx.add(q, k), v)
    graph = ctx.new_graph().build_forward(out)
    buffer = ctx.alloc_tensors(device.buffer_type)
    try:
        for w, value in zip((wq, wk, wv), values):
            w.set(value)
        with _backend(device, graph=False) as eager, _backend(device, graph=True) as captured:
            for backend in (eager, captured):
                for seed in range(3):      # captured: an eager run and capture, then replays
                    x_value = np.random.default_rng(seed).standard_normal((M, K)).astype(np.float32)
                    x.set(x_value)
                    backend.graph_compute(graph)
                    backend.synchronize()
                    got = [t.get().copy() for t in (q, k, v)]
                    want = [_alone(clm, device, eager, value, x_value) for value in values]
                    for g, w in zip(got, want):
                        assert g.tobytes() == w.tobytes()
            assert eager.stats()["casts_shared"] == 2 * 3      # K and V used Q's cast, 3 runs
            stats = captured.stats()
            assert stats["graph_replays"] == 2
            assert stats["casts_shared"] == 2 * 2               # the eager run and the capture
    finally:
        buffer.close()
        ctx.close()


def test_a_write_into_the_activation_between_two_products_stops_the_sharing(clm, device):
    """Node order mm1 (x), CPY z -> x, mm2 (x): mm2 must read the new x, not mm1's cast of the
    old one."""
    rng = np.random.default_rng(1)
    ctx = clm.Context(32)
    x = ctx.new_tensor(clm.TensorType.F32, [K, M], name="x")
    z = ctx.new_tensor(clm.TensorType.F32, [K, M], name="z")
    (w1, w2), values = _weights(clm, ctx, rng, ["w1", "w2"])
    mm1 = ctx.mul_mat(w1, x)
    written = ctx.cpy(z, x)
    mm2 = ctx.mul_mat(w2, x)
    mm1.name, written.name, mm2.name = "mm1", "written", "mm2"
    # add(add(mm1, sum of the written x), mm2): depth-first order mm1, CPY, ..., mm2
    out = ctx.add(ctx.add(mm1, ctx.mul_mat(w1, written)), mm2)
    graph = ctx.new_graph().build_forward(out)
    order = [t.name for t in graph.nodes]
    assert order.index("mm1") < order.index("written") < order.index("mm2")
    buffer = ctx.alloc_tensors(device.buffer_type)
    try:
        w1.set(values[0])
        w2.set(values[1])
        x_value = rng.standard_normal((M, K)).astype(np.float32)
        z_value = rng.standard_normal((M, K)).astype(np.float32)
        with _backend(device, graph=True) as backend:
            for _ in range(2):
                x.set(x_value)
                z.set(z_value)
                backend.graph_compute(graph)
                backend.synchronize()
                assert mm1.get().tobytes() == _alone(clm, device, backend, values[0], x_value).tobytes()
                assert mm2.get().tobytes() == _alone(clm, device, backend, values[1], z_value).tobytes()
            assert backend.stats()["casts_shared"] == 0
    finally:
        buffer.close()
        ctx.close()
