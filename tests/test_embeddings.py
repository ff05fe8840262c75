"""Model.embed on the default model: unit vectors of n_embd, pooling equal to the result_norm rows
the eval callback sees (and to the CPU reference within F16 rounding), the same bits alone or
between an Engine's steps with that engine's tokens unchanged, micro-batches, error cases, and
the GGUF's {arch}.pooling_type (tiny models)."""

import numpy as np
import pytest

import cann_llm
from cann_llm.engine import Engine
from cann_llm.kv_cache import ContextFullError
from cann_llm.loader import GGUFError, open_gguf
from cann_llm.model import Batch, Model
from cann_llm.sampler import SamplingParams

from tiny_models import write_tiny_model

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs back into the green forest."


@pytest.fixture(scope="module")
def smol(default_model_path):
    m = cann_llm.load(str(default_model_path), n_ctx=512, n_batch=32)
    yield m
    m.close()


def _result_norm_rows(model, ids) -> np.ndarray:
    """result_norm [n_tokens, n_embd] (numpy order) of `ids` as the eval callback shows it in
    the logits graph (every row wanted)."""
    seen = {}

    def cb(name, op, ttype, ne, data):
        if name == "result_norm":
            seen["rows"] = np.array(data, dtype=np.float32).reshape(-1, ne[0])
        return True

    assert model.logits(ids, eval_callback=cb) is not None
    return seen["rows"]


def test_unit_vector_of_n_embd(smol):
    v = smol.embed(TEXT)
    assert v.shape == (smol.hparams.n_embd,) and v.dtype == np.float32
    assert abs(float(np.linalg.norm(v.astype(np.float64))) - 1.0) < 1e-6
    raw = smol.embed(TEXT, normalize=False)
    assert abs(float(np.linalg.norm(raw)) - 1.0) > 0.1          # result_norm rows are not unit
    np.testing.assert_allclose(v, raw / np.linalg.norm(raw.astype(np.float64)), rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_array_equal(smol.embed(smol.tokenize(TEXT)), v)   # text == its tokens
    assert smol.kv.n_used() == 0                                  # its cells are gone


def test_pooling_equals_the_result_norm_rows(smol):
    ids = smol.tokenize(TEXT)
    rows = _result_norm_rows(smol, ids)
    assert rows.shape == (len(ids), smol.hparams.n_embd)
    np.testing.assert_array_equal(smol.embed(ids, pooling="cls", normalize=False), rows[0])
    np.testing.assert_array_equal(smol.embed(ids, pooling="last", normalize=False), rows[-1])
    mean = smol.embed(ids, pooling="mean", normalize=False)
    np.testing.assert_allclose(mean, rows.astype(np.float64).mean(axis=0), rtol=1e-6, atol=1e-7)
    assert smol.pooling == "mean" and smol.hparams.pooling_type is None   # no key: mean
    np.testing.assert_array_equal(smol.embed(ids, normalize=False), mean)
    # the two graph kinds of one shape are kept apart: logits still come back after embed
    assert smol.logits(ids).shape == (len(ids), smol.hparams.n_vocab)
    kinds = {key[4] for key in smol._graphs if key[0] == len(ids)}    # key[4]: embeddings
    assert kinds == {True, False}


def test_embed_matches_the_cpu_reference(smol, default_model_path):
    ids = smol.tokenize("Embeddings of a short sentence.")
    with cann_llm.load(str(default_model_path), device="CPU", n_ctx=64,
                       log=lambda m: None) as cpu:
        ref = cpu.embed(ids, normalize=False)
        ref_rows = cpu.decode(Batch.sequence(ids, all_logits=True), embeddings=True)
        cpu.kv.clear()
    got = smol.embed(ids, normalize=False)
    np.testing.assert_allclose(ref, ref_rows.astype(np.float64).mean(axis=0), rtol=1e-6,
                               atol=1e-7)
    # device matmuls take F16 activations: agreement within that rounding, far from chance
    assert float(np.max(np.abs(got - ref))) < 0.005 * float(np.max(np.abs(ref)))
    cos = float(got @ ref / np.linalg.norm(got) / np.linalg.norm(ref))
    assert cos > 0.999


def test_same_bits_between_engine_steps_and_the_engine_is_undisturbed(smol):
    smol.kv.clear()
    alone = smol.embed(TEXT)
    prompt = smol.tokenize("Once upon a time, in a small village by the sea,")
    params = SamplingParams(seed=42)
    n = 10

    def run(embed_at):
        engine = Engine(smol)
        seq = engine.add(prompt, params, max_tokens=n)
        got = None
        for i in range(n + 2):
            if i == embed_at:
                used = smol.kv.n_used()
                assert used > 0                       # the sequence's cells are live
                got = smol.embed(TEXT)
                assert smol.kv.n_used() == used       # only the embedding's cells went
                assert smol.kv.seq_pos_max(seq.id) == seq.n_past - 1
            engine.step()
        engine.run()
        engine.release(seq)
        return seq.generated, got

    plain, _ = run(embed_at=None)
    tokens, busy = run(embed_at=4)
    assert len(plain) == n
    assert tokens == plain                            # the other sequence did not notice
    np.testing.assert_array_equal(busy, alone)        # and the embedding did not notice it
    assert smol.kv.n_used() == 0


def test_explicit_seq_id_and_micro_batches(smol, default_model_path):
    smol.kv.clear()
    ids = smol.tokenize(TEXT * 4)
    assert len(ids) > 2 * smol.n_batch                # three micro-batches of n_batch=32
    v = smol.embed(ids, seq_id=5)
    assert smol.kv.n_used() == 0
    gen = smol.sched.generation
    with cann_llm.load(str(default_model_path), n_ctx=512, n_batch=128,
                       log=lambda m: None) as big:    # the whole input in one micro-batch
        np.testing.assert_array_equal(big.embed(ids), v)
    assert smol.sched.generation == gen   # an embeddings graph fits the buffers reserved at load


def test_error_cases_leave_the_cache_as_it_was(smol):
    smol.kv.clear()
    engine = Engine(smol)
    seq = engine.add(smol.tokenize("Hello there"), SamplingParams(temperature=0), max_tokens=4)
    engine.step()
    used, cells = smol.kv.n_used(), smol.kv.seq.copy()
    with pytest.raises(ValueError, match="empty"):
        smol.embed([])
    with pytest.raises(ValueError, match="empty"):
        smol.embed("")
    for pooling in ("none", "rank"):
        with pytest.raises(ValueError, match="no single vector"):
            smol.embed(TEXT, pooling=pooling)
    with pytest.raises(ValueError, match="unknown pooling"):
        smol.embed(TEXT, pooling="max")
    with pytest.raises(ValueError, match=f"sequence {seq.id} holds cells"):
        smol.embed(TEXT, seq_id=seq.id)
    with pytest.raises(ValueError, match="0..63"):
        smol.embed(TEXT, seq_id=64)
    with pytest.raises(ValueError, match="token ids"):
        smol.embed([1, smol.hparams.n_vocab])
    free = smol.n_ctx - used
    with pytest.raises(ContextFullError, match=f"has {free + 1} tokens, {free} fit"):
        smol.embed([1] * (free + 1))
    with pytest.raises(ContextFullError, match=f"has {smol.n_ctx + 1} tokens"):
        smol.embed([1] * (smol.n_ctx + 1))
    assert smol.kv.n_used() == used and np.array_equal(smol.kv.seq, cells)
    engine.release(seq)


def test_failed_micro_batch_removes_the_earlier_ones(smol, monkeypatch):
    """A failure in the second micro-batch (injected around the real one) leaves no cells."""
    smol.kv.clear()
    real, calls = Model._decode_ubatch, []

    def second_fails(self, *args):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("injected")
        return real(self, *args)

    monkeypatch.setattr(Model, "_decode_ubatch", second_fails)
    with pytest.raises(RuntimeError, match="injected"):
        smol.embed(smol.tokenize(TEXT * 4))
    assert len(calls) == 2 and smol.kv.n_used() == 0


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_pooling_type_from_the_gguf(tmp_path, arch):
    path = write_tiny_model(tmp_path / "cls.gguf", arch=arch, kv={f"{arch}.pooling_type": 2})
    ids = list(range(3, 20))
    with Model(str(path), n_ctx=64) as m:
        assert m.hparams.pooling_type == 2 and m.pooling == "cls"
        rows = m.decode(Batch.sequence(ids, all_logits=True), embeddings=True)
        m.kv.clear()
        assert rows.shape == (len(ids), m.hparams.n_embd)
        np.testing.assert_array_equal(m.embed(ids, normalize=False), rows[0])   # cls
        np.testing.assert_array_equal(m.embed(ids, pooling="last", normalize=False), rows[-1])
    bad = write_tiny_model(tmp_path / "bad.gguf", arch=arch, kv={f"{arch}.pooling_type": 7})
    with pytest.raises(GGUFError, match="pooling_type"):
        open_gguf(bad)
    none = write_tiny_model(tmp_path / "none.gguf", arch=arch, kv={f"{arch}.pooling_type": 0})
    with Model(str(none), n_ctx=64) as m:
        assert m.pooling == "none"
        with pytest.raises(ValueError, match="no single vector"):
            m.embed(ids)
        assert m.embed(ids, pooling="mean").shape == (m.hparams.n_embd,)
