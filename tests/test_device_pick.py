"""Greedy decode steps that pick on the device (Model.decode_step with logits=False): the decode
graph's ARGMAX and SUM_ROWS verdict give the tokens the host's scan of the logits gives
(backend.logits_scan), the logits are not read while the picks stand, and a banned pick or a
non-finite verdict sends the step to the host's scan (the same tokens, the same error)."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

import cann_llm
from cann_llm import model as model_mod
from cann_llm.engine import Engine
from cann_llm.sampler import SamplingParams

from test_corrupt_weights import corrupt
from tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def smol(default_model_path):
    m = cann_llm.load(str(default_model_path), n_ctx=512, n_batch=32)
    yield m
    m.close()


@pytest.fixture
def scans(monkeypatch):
    """How many decode steps scanned their logits on the host (model._scan_logits calls)."""
    count = [0]
    scan = model_mod._scan_logits

    def counted(*args):
        count[0] += 1
        return scan(*args)
    monkeypatch.setattr(model_mod, "_scan_logits", counted)
    return count


def _greedy(model, on_device: bool, ids, **kw) -> list:
    model.pick_on_device = on_device
    try:
        model.kv.clear()
        model._seq_tokens = []
        return list(model.generate(ids, temperature=0.0, **kw))
    finally:
        model.pick_on_device = True


def test_device_picks_are_the_host_scans_picks_on_the_default_model(smol, scans):
    ids = smol.tokenize("Once upon a time, in a small village")
    on_device = _greedy(smol, True, ids, max_tokens=40)
    assert scans[0] == 0                          # no step read its logits
    on_host = _greedy(smol, False, ids, max_tokens=40)
    assert scans[0] == len(on_host) - 1 and len(on_host) > 8   # the first token is the prefill's
    assert on_device == on_host
    # end of generation banned (what bench does): the picks stand unless the device's pick is
    # banned, then the step reads its logits; the tokens are the same either way
    bans = {t: float("-inf") for t in smol.tokenizer.eog_ids}
    scans[0] = 0
    assert _greedy(smol, True, ids, max_tokens=64, logit_bias=bans) == \
        _greedy(smol, False, ids, max_tokens=64, logit_bias=bans)
    assert scans[0] < 2 * 63                      # some steps took the device's pick


def test_a_banned_device_pick_falls_back_to_the_host_scan(smol, scans):
    ids = smol.tokenize("The capital of France is")
    free = _greedy(smol, True, ids, max_tokens=6)
    # ban the second token: the device still picks it at the first decode step, which must
    # then read its logits and take the best token left
    ban = {free[1]: float("-inf")}
    scans[0] = 0
    got = _greedy(smol, True, ids, max_tokens=6, logit_bias=ban)
    assert scans[0] >= 1 and got[0] == free[0] and got[1] != free[1]
    assert got == _greedy(smol, False, ids, max_tokens=6, logit_bias=ban)


def test_rows_that_need_their_logits_read_them_in_a_batch(smol, scans):
    """An engine step with a logprobs request, a sampled one and greedy ones: the step reads
    its logits (every row), and each sequence's tokens are the ones it gives alone."""
    engine = Engine(smol)
    smol.kv.clear()
    prompts = [smol.tokenize(t) for t in ("One two three", "The sky is", "Water boils at")]
    kinds = [dict(params=SamplingParams(temperature=0.0)),
             dict(params=SamplingParams(temperature=0.0), logprobs=2),
             dict(params=SamplingParams(temperature=0.7, seed=3))]

    def run(which):
        seqs = [engine.add(prompts[i], max_tokens=8, **kinds[i]) for i in which]
        engine.run()
        out = [(s.generated, [lp.token for lp in s.token_logprobs]) for s in seqs]
        for s in seqs:
            engine.release(s)
        return out
    alone = [run([i])[0] for i in range(3)]
    assert alone[1][1] == alone[1][0]             # logprobs recorded for every token
    scans[0] = 0
    assert run([0, 1, 2]) == alone
    assert scans[0] >= 7                          # the batched decode steps read the logits


def test_greedy_sequences_together_pick_on_the_device_as_alone(smol, scans):
    """Batched decode steps of greedy sequences (one with end of generation banned) read no
    logits, and each sequence's tokens are the ones it gives alone (batch invariance)."""
    engine = Engine(smol)
    smol.kv.clear()
    prompts = [smol.tokenize(t) for t in ("One two three", "The sky is", "Water boils at")]
    bans = {t: float("-inf") for t in smol.tokenizer.eog_ids}
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.0, logit_bias=bans),
              SamplingParams(temperature=0.0)]

    def run(which):
        seqs = [engine.add(prompts[i], params[i], max_tokens=10) for i in which]
        engine.run()
        for s in seqs:
            engine.release(s)
        return [s.generated for s in seqs]
    alone = [run([i])[0] for i in range(3)]
    scans[0] = 0
    assert run([0, 1, 2]) == alone and scans[0] == 0


def test_the_non_finite_error_is_the_host_scans(tmp_path):
    """A token whose embedding is NaN makes every logit of its step NaN: the device's verdict
    sends the step to the host's scan, which raises the error the host path raises."""
    path = write_tiny_model(tmp_path / "m.gguf", tied=False, weight_type=QT.F32)
    bad = 7
    corrupt(path, "token_embd.weight", bad * 64 * 4, np.full(64, np.nan, np.float32).tobytes())
    model = cann_llm.load(path, n_ctx=64, check_weights=False)
    try:
        messages = []
        for on_device in (True, False):
            model.pick_on_device = on_device
            model.kv.clear()
            model.decode(model_mod.Batch.sequence([1, 2, 3]))
            with pytest.raises(cann_llm.NonFiniteLogitsError) as err:
                model.decode_step([bad], [3], [0], [np.zeros(0, np.int64)], logits=False)
            messages.append(str(err.value))
        assert messages[0] == messages[1] and "position 3 (sequence 0)" in messages[0]
        assert "hold 300 NaN/inf values" in messages[0]
    finally:
        model.close()


def test_device_picks_on_a_tiny_model_equal_the_host_scan(tmp_path, scans):
    path = write_tiny_model(tmp_path / "t.gguf", weight_type=QT.Q8_0, weight_scale=0.1,
                            n_vocab=40000)       # several ArgMax chunks and verdict pieces
    model = cann_llm.load(path, n_ctx=128)
    try:
        ids = [5, 17, 300, 9]
        on_device = _greedy(model, True, ids, max_tokens=24)
        assert scans[0] == 0 and len(on_device) > 4
        assert on_device == _greedy(model, False, ids, max_tokens=24)
    finally:
        model.close()


def test_device_picks_stand_only_when_the_verdict_is_finite_and_no_pick_is_banned():
    bans = [np.zeros(0, np.int64), np.array([3, 9], np.int64)]
    assert model_mod._device_picks([5, 4], [1.0, -2.0, 3e30], bans) == [5, 4]
    assert model_mod._device_picks([5, 9], [0.0, 0.0], bans) is None
    for bad in (np.nan, np.inf, -np.inf):
        assert model_mod._device_picks([5, 4], [0.0, float(bad)], bans) is None
    # huge finite pieces prove finite logits; a piece that overflowed (inf) does not
    assert model_mod._device_picks([5, 4], [3e38] * 4, bans) == [5, 4]
