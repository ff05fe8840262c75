"""The CANN backend's scratch pools (legacy slot table, VMM) through Backend.pool_alloc/pool_free
and Backend.stats(): random alloc/free sequences never overlap live blocks, blocks keep their
bytes (device copies), memory comes back, and the pools' limits are CannErrors after which the
process goes on. GGML_CANN_MEM_POOL is read when a backend is created.
"""

import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import run_python

GRANULARITY = 2 << 20   # acl_host's VMM granularity (HBM huge page)


@pytest.fixture
def make_backend(device, monkeypatch):
    made = []

    def make(kind: str):
        monkeypatch.setenv("GGML_CANN_MEM_POOL", kind)
        backend = device.init_backend()
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def _host_only(clm):
    if clm.runtime_name() != "acl_host":
        pytest.skip("acl_host behaviour")


class _DeviceBytes:
    """Writes and reads raw device addresses through a tensor whose data pointer is redirected
    (set/get_tensor_async copy to tensor->data)."""

    def __init__(self, clm, device, backend, max_bytes: int):
        self.clm, self.backend = clm, backend
        self.ctx = clm.Context(64)
        self.tensor = self.ctx.new_tensor(clm.TensorType.F32, [max_bytes // 4])
        self.buffer = self.ctx.alloc_tensors(device.buffer_type)
        self.home = self.tensor.data

    def roundtrip(self, address: int, payload: np.ndarray) -> np.ndarray:
        self.tensor.data = address
        try:
            self.backend.set_tensor_async(self.tensor, payload)
            out = np.empty_like(payload)
            self.backend.get_tensor_async(self.tensor, out)
            self.backend.synchronize()
            return out
        finally:
            self.tensor.data = self.home

    def write(self, address: int, payload: np.ndarray) -> None:
        self.tensor.data = address
        try:
            self.backend.set_tensor_async(self.tensor, payload)
            self.backend.synchronize()
        finally:
            self.tensor.data = self.home

    def read(self, address: int, n: int) -> np.ndarray:
        self.tensor.data = address
        try:
            out = np.empty(n, np.uint32)
            self.backend.get_tensor_async(self.tensor, out)
            self.backend.synchronize()
            return out
        finally:
            self.tensor.data = self.home

    def close(self):
        self.buffer.close()
        self.ctx.close()


def test_default_pool_is_vmm(clm, device, monkeypatch):
    _host_only(clm)
    monkeypatch.delenv("GGML_CANN_MEM_POOL", raising=False)
    with device.init_backend() as backend:
        stats = backend.stats()
        assert stats["pool_kind"] == "vmm"
        assert stats["pool_in_use"] == 0 and stats["pool_mapped"] == 0


actions = st.lists(st.one_of(
    st.tuples(st.just("alloc"), st.integers(1, 3 << 20)),
    st.tuples(st.just("free"), st.integers(0, 1 << 16)),
    st.tuples(st.just("sync"), st.just(0))), min_size=1, max_size=40)


def _run_sequence(clm, device, backend, steps, lifo: bool):
    io = _DeviceBytes(clm, device, backend, 256)
    live = []   # (address, size, tag)
    try:
        for tag, (kind, value) in enumerate(steps):
            if kind == "alloc":
                address, size = backend.pool_alloc(value)
                assert size >= value and size % 128 == 0
                for other, other_size, _ in live:
                    assert address + size <= other or other + other_size <= address, "overlapping blocks"
                io.write(address, np.arange(16, dtype=np.uint32) + tag * 1000)
                io.write(address + size - 64, np.arange(16, dtype=np.uint32) + tag * 1000)
                live.append((address, size, tag))
            elif kind == "free" and live:
                index = len(live) - 1 if lifo else value % len(live)
                address, size, block_tag = live.pop(index)
                want = np.arange(16, dtype=np.uint32) + block_tag * 1000
                np.testing.assert_array_equal(io.read(address, 16), want)
                np.testing.assert_array_equal(io.read(address + size - 64, 16), want)
                backend.pool_free(address, size)
            elif kind == "sync":
                backend.synchronize()
            assert backend.stats()["pool_in_use"] == sum(size for _, size, _ in live)
        while live:
            address, size, _ = live.pop()
            backend.pool_free(address, size)
        assert backend.stats()["pool_in_use"] == 0
    finally:
        io.close()


@settings(max_examples=25, deadline=None)
@given(steps=actions)
def test_vmm_random_lifo_sequences(clm, device, steps):
    _host_only(clm)
    os.environ["GGML_CANN_MEM_POOL"] = "vmm"
    try:
        backend = device.init_backend()
    finally:
        del os.environ["GGML_CANN_MEM_POOL"]
    with backend:
        _run_sequence(clm, device, backend, steps, lifo=True)
        stats = backend.stats()
        assert stats["pool_mapped"] % GRANULARITY == 0
        assert stats["pool_mapped"] >= stats["pool_peak"]
        assert stats["pool_mapped"] - stats["pool_peak"] < GRANULARITY * 2 or stats["pool_peak"] == 0


@settings(max_examples=25, deadline=None)
@given(steps=actions)
def test_legacy_random_sequences_any_order(clm, device, steps):
    os.environ["GGML_CANN_MEM_POOL"] = "leg"
    try:
        backend = device.init_backend()
    finally:
        del os.environ["GGML_CANN_MEM_POOL"]
    with backend:
        assert backend.stats()["pool_kind"] == "legacy"
        _run_sequence(clm, device, backend, steps, lifo=False)


def test_vmm_maps_real_pages_and_grows(clm, device, make_backend):
    _host_only(clm)
    backend = make_backend("vmm")
    io = _DeviceBytes(clm, device, backend, 3 << 20)
    try:
        a, size_a = backend.pool_alloc(1 << 20)
        assert backend.stats()["pool_mapped"] == GRANULARITY
        b, size_b = backend.pool_alloc(3 << 20)        # crosses into a second mapped chunk
        assert b == a + size_a
        stats = backend.stats()
        assert stats["pool_mapped"] == 2 * GRANULARITY and stats["pool_reserved"] >= stats["pool_mapped"]
        payload = np.random.default_rng(5).integers(0, 2**32, size_b // 4, dtype=np.uint32)
        np.testing.assert_array_equal(io.roundtrip(b, payload), payload)
        backend.pool_free(b, size_b)
        backend.pool_free(a, size_a)
        again, _ = backend.pool_alloc(1 << 20)          # deterministic: same address again
        assert again == a
        backend.pool_free(again, size_a)
        assert backend.stats()["pool_in_use"] == 0
    finally:
        io.close()


def test_vmm_out_of_order_free_is_an_error(clm, make_backend):
    _host_only(clm)
    backend = make_backend("vmm")
    a, size_a = backend.pool_alloc(1000)
    b, size_b = backend.pool_alloc(1000)
    with pytest.raises(clm.CannError, match="out-of-order") as err:
        backend.pool_free(a, size_a)
    assert err.value.status == clm.Status.ERR_INVALID_ARG
    assert backend.stats()["pool_in_use"] == size_a + size_b
    backend.pool_free(b, size_b)
    backend.pool_free(a, size_a)
    assert backend.stats()["pool_in_use"] == 0


def test_legacy_full_slot_table_is_an_error(clm, make_backend):
    backend = make_backend("leg")
    blocks = [backend.pool_alloc(128 * (i + 1)) for i in range(256)]
    assert backend.stats()["pool_slots_used"] == 256
    with pytest.raises(clm.CannError, match="slots") as err:
        backend.pool_alloc(1 << 20)
    assert err.value.status == clm.Status.ERR_OUT_OF_MEMORY
    for address, size in blocks[::2]:
        backend.pool_free(address, size)
    address, size = backend.pool_alloc(1 << 20)      # cached free buffers make room
    backend.pool_free(address, size)
    for address, size in blocks[1::2]:
        backend.pool_free(address, size)
    assert backend.stats()["pool_in_use"] == 0


def test_legacy_reuse_and_idle_release(clm, make_backend):
    backend = make_backend("leg")
    a, size_a = backend.pool_alloc(8192)
    b, size_b = backend.pool_alloc(4096)
    backend.pool_free(a, size_a)
    backend.pool_free(b, size_b)
    c, size_c = backend.pool_alloc(4000)     # best fit: the 4096-byte buffer, not the 8192 one
    assert (c, size_c) == (b, size_b)
    backend.pool_free(c, size_c)
    with pytest.raises(clm.CannError, match="double free"):
        backend.pool_free(c, size_c)
    assert backend.stats()["pool_slots_used"] == 2
    for _ in range(10):
        backend.synchronize()
    stats = backend.stats()
    assert stats["pool_slots_used"] == 0 and stats["pool_reserved"] == 0 and stats["pool_peak"] == 12288


OOM_SCRIPT = """
from cann_llm import backend as clm
device = clm.Registry().devices[0]
with device.init_backend() as backend:
    print(backend.stats()["pool_kind"])
    weights = device.buffer_type.alloc_buffer(48 << 20)   # the device has 64 MiB
    for size in (256 << 20, 32 << 20):                     # beyond the range; beyond what is free
        try:
            backend.pool_alloc(size)
            print("no error")
        except clm.CannError as err:
            print("error", err.status.name, err.message)
    address, size = backend.pool_alloc(1 << 20)
    backend.pool_free(address, size)
    print("goes on", backend.stats()["pool_in_use"])
"""


@pytest.mark.parametrize("kind", ["vmm", "leg"])
def test_out_of_memory_is_an_error(clm, kind):
    _host_only(clm)
    result = run_python(OOM_SCRIPT, env={"CANN_LLM_HOST_MEMORY": "64M", "GGML_CANN_MEM_POOL": kind})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("vmm" if kind == "vmm" else "legacy")
    assert lines[1].startswith("error ERR_OUT_OF_MEMORY"), lines
    assert lines[2].startswith("error ERR_OUT_OF_MEMORY"), lines
    assert lines[3] == "goes on 0"
