"""cann_llm.weights: placement, chunked upload from the map, conversions at load."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT, quants

from tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def mods():
    from cann_llm import backend, loader, weights
    return backend, loader, weights


def _read_back(tensor) -> np.ndarray:
    return tensor.read_bytes()


def test_default_model_round_trip(mods, device):
    backend, loader, weights = mods
    from cann_llm import models
    try:
        path = models.default_model_path(download=False)
    except (FileNotFoundError, models.ModelDownloadError) as exc:
        pytest.skip(f"default model not available: {exc}")
    g = loader.open_gguf(path)
    logs = []
    buft = device.buffer_type
    with weights.load_weights(g, lambda name: buft, log=logs.append, chunk_bytes=1 << 20) as ws:
        assert logs == []      # nothing to convert
        assert len(ws.tensors) == 272
        assert all(b.usage == backend.BufferUsage.WEIGHTS for b in ws.buffers)
        assert len(ws.buffers) == 1
        for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight",
                     "output_norm.weight"):
            t, info = ws[name], g.tensors[name]
            assert int(t.type) == info.type and t.ne[:len(info.ne)] == info.ne
            assert np.array_equal(_read_back(t), info.data), name   # bit for bit
        assert ws.stats["bytes_read"] == sum(i.nbytes for i in g.tensors.values())


def test_layer_split(mods, device, tmp_path):
    """buffer_type_for picks the buffer type per tensor: one buffer per buffer type."""
    backend, loader, weights = mods
    g = loader.open_gguf(write_tiny_model(tmp_path / "m.gguf", n_layer=4, weight_type=QT.Q4_0))
    host = device.host_buffer_type
    if host is None:
        pytest.skip("no host buffer type")
    dev = device.buffer_type

    def pick(name):
        layer = loader.layer_index(name)
        return host if layer is not None and layer >= 2 else dev

    with weights.load_weights(g, pick) as ws:
        assert len(ws.buffers) == 2
        by_host = {b.is_host for b in ws.buffers}
        assert by_host == {True, False}
        for name, info in g.tensors.items():
            assert np.array_equal(_read_back(ws[name]), info.data), name


@pytest.mark.parametrize("wtype", [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1])
def test_kept_types_round_trip(mods, device, tmp_path, wtype):
    backend, loader, weights = mods
    g = loader.open_gguf(write_tiny_model(tmp_path / "m.gguf", weight_type=wtype, seed=3))
    buft = device.buffer_type
    # tiny chunks: many block-aligned partial writes per tensor
    with weights.load_weights(g, lambda n: buft, chunk_bytes=100) as ws:
        for name, info in g.tensors.items():
            assert int(ws[name].type) == info.type
            assert np.array_equal(_read_back(ws[name]), info.data), name
