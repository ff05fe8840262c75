"""The unified KV cache: cells, sequence ops, the KQ mask, n_kv padding and a full context."""

import numpy as np
import pytest

from cann_llm.kv_cache import N_KV_PAD, ContextFullError, KVCache, ids_out_of_range


@pytest.fixture
def kv(device):
    cache = KVCache(2, 8, 8, 600, lambda il: device.buffer_type)
    yield cache
    cache.close()


def test_tensors_and_empty_cells(kv):
    assert kv.k[0].ne[:2] == (8, 600) and kv.k[0].type.name == "F16"
    assert kv.v[1].name == "cache_v_l1"
    assert not np.any(kv.k[0].get())      # cleared: masked cells hold finite values
    assert kv.n_used() == 0 and kv.n_kv() == N_KV_PAD


def test_mask_causal_and_sequences(kv):
    cells = kv.find_slots(5)
    assert cells.tolist() == [0, 1, 2, 3, 4]
    kv.commit(cells, [0, 1, 2, 0, 1], [0, 0, 0, 1, 1])
    m = kv.mask(kv.n_kv(), [2, 1], [0, 1])
    assert m.shape == (2, N_KV_PAD) and m.dtype == np.float16
    assert (m[0, :3] == 0).all() and np.isinf(m[0, 3:]).all()          # seq 0 at pos 2
    assert np.isinf(m[1, :3]).all() and (m[1, 3:5] == 0).all() and np.isinf(m[1, 5:]).all()
    m = kv.mask(kv.n_kv(), [1], [0])                                     # no future positions
    assert (m[0, :2] == 0).all() and np.isinf(m[0, 2])


def test_mask_sliding_window(kv):
    """n_swa: a token sees the cells less than n_swa positions behind it (llama.cpp's standard
    window), on top of the causal and sequence rules."""
    kv.commit(kv.find_slots(7), [0, 1, 2, 3, 4, 5, 0], [0, 0, 0, 0, 0, 0, 1])
    m = kv.mask(kv.n_kv(), [5, 2, 0], [0, 0, 1], n_swa=3)
    assert (m[0, 3:6] == 0).all() and np.isinf(m[0, :3]).all() and np.isinf(m[0, 6:]).all()
    assert (m[1, :3] == 0).all() and np.isinf(m[1, 3:]).all()
    assert m[2, 6] == 0 and np.isinf(np.delete(m[2], 6)).all()
    np.testing.assert_array_equal(kv.mask(kv.n_kv(), [5], [0], n_swa=0),
                                  kv.mask(kv.n_kv(), [5], [0]))


def test_seq_ops(kv):
    kv.commit(kv.find_slots(4), [0, 1, 2, 3], [0] * 4)
    kv.seq_cp(0, 1, 0, 2)                       # a shared prefix
    m = kv.mask(kv.n_kv(), [5], [1])
    assert (m[0, :2] == 0).all() and np.isinf(m[0, 2:]).all()
    kv.seq_rm(0, 2, None)                       # cells 2, 3 become free
    assert kv.seq_pos_max(0) == 1 and kv.n_used() == 2
    assert kv.find_slots(1).tolist() == [2]
    kv.seq_keep(1)
    assert kv.seq_pos_max(0) == -1 and kv.seq_pos_max(1) == 1 and kv.n_used() == 2
    kv.seq_rm(-1)
    assert kv.n_used() == 0


def test_n_kv_padding(device):
    kv = KVCache(2, 8, 8, 3 * N_KV_PAD - 100, lambda il: device.buffer_type)
    try:
        kv.commit(kv.find_slots(N_KV_PAD), np.arange(N_KV_PAD), [0] * N_KV_PAD)
        assert kv.n_kv() == N_KV_PAD                 # one decode graph for N_KV_PAD cells
        kv.commit(kv.find_slots(1), [N_KV_PAD], [0])
        assert kv.n_kv() == 2 * N_KV_PAD
        rest = kv.n_ctx - N_KV_PAD - 1
        kv.commit(kv.find_slots(rest), np.arange(rest) + N_KV_PAD + 1, [0] * rest)
        assert kv.n_kv() == kv.n_ctx                 # clamped to n_ctx
    finally:
        kv.close()


def test_context_full(kv):
    kv.commit(kv.find_slots(590), np.arange(590), [0] * 590)
    with pytest.raises(ContextFullError, match="n_ctx=600"):
        kv.find_slots(11)
    kv.release(np.arange(580, 590))
    assert len(kv.find_slots(20)) == 20


def test_cache_types(device):
    from cann_llm.kv_cache import kv_type
    from cann_llm.backend import TensorType
    assert kv_type("f16") == TensorType.F16 and kv_type("F32") == TensorType.F32
    assert kv_type(TensorType.F32) == TensorType.F32
    cache = KVCache(1, 8, 16, 300, lambda il: device.buffer_type, type_k="f32", type_v="f16")
    try:
        assert cache.k[0].type.name == "F32" and cache.v[0].type.name == "F16"
        assert cache.k[0].nb[1] == 8 * 4 and cache.v[0].nb[1] == 16 * 2
        assert not np.any(cache.k[0].get())
    finally:
        cache.close()


@pytest.mark.parametrize("name, why", [("q8_0", "SET_ROWS on CANN writes F32/F16/BF16 rows only"),
                                       ("bf16", "FLASH_ATTN_EXT on CANN reads F16 K/V only"),
                                       ("q5_k", None)])
def test_unsupported_cache_types(device, name, why):
    with pytest.raises(ValueError) as err:
        KVCache(1, 8, 8, 300, lambda il: device.buffer_type, type_v=name)
    msg = str(err.value)
    assert msg.startswith(f"type_v={name!r}: KV cache type {name} is not supported")
    assert msg.endswith("supported: f16, f32") and (why is None or why in msg)


@pytest.mark.parametrize("n", [1, 3, 64, 65, 512])
def test_ids_out_of_range_finds_either_end_for_short_and_long_arrays(n):
    """Short arrays (a decode step) are compared as a list, long ones with numpy: same answers."""
    ids = np.arange(n, dtype=np.int32) % 10
    assert not ids_out_of_range(ids, 10)
    for pos in (0, n - 1):
        for bad in (-1, 10):
            wrong = ids.copy()
            wrong[pos] = bad
            assert ids_out_of_range(wrong, 10)


def _numpy_mask(cell_pos, cell_seq, token_pos, token_seq, n_swa):
    """The mask's definition, written out with numpy broadcasting."""
    bits = np.left_shift(np.uint64(1), np.asarray(token_seq, dtype=np.uint64))
    tp = np.asarray(token_pos, dtype=np.int64)[:, None]
    visible = ((cell_seq[None, :] & bits[:, None]) != 0) & (cell_pos[None, :] >= 0) \
        & (cell_pos[None, :] <= tp)
    if n_swa > 0:
        visible &= tp - cell_pos[None, :] < n_swa
    return np.where(visible, np.float16(0), np.float16(-np.inf))


@pytest.mark.parametrize("seed", range(4))
def test_mask_and_counts_match_their_definition_on_random_cells(kv, seed):
    """The C mask and cell counts against the numpy formula: cells shared by several sequences,
    empty cells between used ones, a window or none, one token or a prompt's worth."""
    rng = np.random.default_rng(seed)
    n = 300
    used = rng.random(n) < 0.7
    kv.pos[:n] = np.where(used, rng.integers(0, 200, n), -1)
    kv.seq[:n] = np.where(used, rng.integers(1, 16, n), 0).astype(np.uint64)
    n_used, last = int(used.sum()), int(np.flatnonzero(used)[-1])
    assert kv.n_used() == n_used
    assert kv.n_kv() == min(-(-(last + 1) // N_KV_PAD) * N_KV_PAD, kv.n_ctx)
    n_kv = kv.n_kv()
    for n_tokens in (1, 37):
        tp, ts = rng.integers(0, 220, n_tokens), rng.integers(0, 4, n_tokens)
        for n_swa in (0, 5):
            got = kv.mask(n_kv, tp, ts, n_swa=n_swa)
            want = _numpy_mask(kv.pos[:n_kv], kv.seq[:n_kv], tp, ts, n_swa)
            assert got.dtype == np.float16 and got.shape == (n_tokens, n_kv)
            assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_mask_rejects_a_sequence_id_past_63(kv):
    from cann_llm.backend import CannError
    kv.commit(kv.find_slots(1), [0], [0])
    with pytest.raises(CannError, match="sequence id 64"):
        kv.mask(kv.n_kv(), [0], [64])


def test_mask_takes_strided_and_list_token_fields(kv):
    """Positions and sequence ids may come as any integer sequence (a strided view, a list)."""
    kv.commit(kv.find_slots(4), [0, 1, 0, 1], [0, 0, 1, 1])
    pos = np.array([1, 9, 1, 9], dtype=np.int32)[::2]
    seq = np.array([0, 7, 1, 7])[::2]
    got = kv.mask(kv.n_kv(), pos, seq)
    assert np.array_equal(got.view(np.uint16), kv.mask(kv.n_kv(), [1, 1], [0, 1]).view(np.uint16))
    assert (got[0, :2] == 0).all() and np.isinf(got[0, 2:]).all()


@pytest.mark.parametrize("seed", range(3))
def test_a_decode_steps_cells_in_one_pass_match_the_step_by_step_bookkeeping(device, seed):
    """KVCache.decode_cells (clm_kv_decode_step) against find_slots, commit, n_kv and mask on
    a copy of the same cells: scattered empty cells, one token or several, a full context."""
    rng = np.random.default_rng(seed)
    one = KVCache(1, 8, 8, 700, None)
    ref = KVCache(1, 8, 8, 700, None)
    for n_tokens in (1, 3, 1, 5):
        used = rng.random(700) < 0.8
        used[rng.integers(0, 700)] = False               # at least one empty cell
        for kv in (one, ref):
            kv.pos[:] = np.where(used, rng.integers(0, 300, 700), -1) if kv is one else one.pos
            kv.seq[:] = np.where(used, rng.integers(1, 16, 700), 0) if kv is one else one.seq
        pos = [int(p) for p in rng.integers(0, 320, n_tokens)]
        seqs = [int(s) for s in rng.integers(0, 4, n_tokens)]
        n_used, cells, n_kv, mask = one.decode_cells(pos, seqs)
        assert n_used == ref.n_used()
        if n_tokens > 700 - n_used:
            assert cells is None and np.array_equal(one.pos, ref.pos)   # nothing written
            continue
        want = ref.find_slots(n_tokens)
        ref.commit(want, pos, seqs)
        assert np.array_equal(cells, want) and n_kv == ref.n_kv()
        assert np.array_equal(one.pos, ref.pos) and np.array_equal(one.seq, ref.seq)
        assert np.array_equal(mask.view(np.uint16), ref.mask(n_kv, pos, seqs).view(np.uint16))
    full = KVCache(1, 8, 8, 4, None)
    full.pos[:] = 0
    assert full.decode_cells([1], [0]) == (4, None, None, None)
    with pytest.raises(ValueError, match="sequence ids must be in 0..63"):
        one.decode_cells([1], [64])
