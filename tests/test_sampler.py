"""cann_llm.sampler: llama.cpp's sampling chain on small, hand-checked vocabularies."""

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cann_llm import backend
from cann_llm.sampler import Sampler


def _logits(*values):
    return np.array(values, dtype=np.float32)


def test_greedy_takes_the_argmax_and_ties_go_to_the_lowest_id():
    s = Sampler(temperature=0)
    assert s.sample(_logits(0, 3, 1, 3, 2)) == 1
    assert Sampler(temperature=-1).sample(_logits(5, 5, 5)) == 0
    assert s.sample(_logits(-np.inf, -7, -np.inf)) == 1


def test_top_k_keeps_the_k_highest_and_breaks_ties_by_id():
    s = Sampler(temperature=1, top_k=2, top_p=1, min_p=0)
    ids, p = s.probabilities(_logits(1, 4, 3, 2))
    assert sorted(ids.tolist()) == [1, 2]
    ids, _ = Sampler(temperature=1, top_k=2, top_p=1, min_p=0).probabilities(_logits(3, 1, 3, 3))
    assert sorted(ids.tolist()) == [0, 2]
    ids, _ = Sampler(temperature=1, top_k=0, top_p=1, min_p=0).probabilities(_logits(1, 2, 3))
    assert sorted(ids.tolist()) == [0, 1, 2]
    big = np.random.default_rng(3).standard_normal(50_000).astype(np.float32)
    ids, _ = Sampler(temperature=1, top_k=40, top_p=1, min_p=0).probabilities(big)
    assert sorted(ids.tolist()) == sorted(np.argsort(-big, kind="stable")[:40].tolist())


def test_top_p_keeps_the_shortest_prefix_reaching_p():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = np.log(probs).astype(np.float32)
    cases = {0.5: [0], 0.6: [0, 1], 0.8: [0, 1], 0.81: [0, 1, 2], 0.96: [0, 1, 2, 3], 0.0: [0]}
    for p, want in cases.items():
        ids, _ = Sampler(temperature=1, top_k=0, top_p=p, min_p=0).probabilities(logits)
        assert sorted(ids.tolist()) == want, p
    # after top_k the mass is renormalised over the k candidates (llama.cpp order)
    ids, _ = Sampler(temperature=1, top_k=2, top_p=0.6, min_p=0).probabilities(logits)
    assert sorted(ids.tolist()) == [0]          # 0.5 / 0.8 = 0.625 >= 0.6


def test_top_p_on_a_large_flat_vocabulary_matches_a_full_sort():
    logits = np.random.default_rng(0).standard_normal(20_000).astype(np.float32)
    ids, _ = Sampler(temperature=1, top_k=0, top_p=0.5, min_p=0).probabilities(logits)
    order = np.argsort(-logits.astype(np.float64), kind="stable")
    p = np.exp(logits.astype(np.float64) - logits.max())
    cum = np.cumsum(p[order]) / p.sum()
    want = order[: int(np.searchsorted(cum, 0.5)) + 1]
    assert sorted(ids.tolist()) == sorted(want.tolist())


def test_min_p_keeps_tokens_at_least_p_times_the_top_probability():
    probs = np.array([0.4, 0.3, 0.2, 0.06, 0.04])
    logits = np.log(probs).astype(np.float32)
    ids, _ = Sampler(temperature=1, top_k=0, top_p=1, min_p=0.5).probabilities(logits)
    assert sorted(ids.tolist()) == [0, 1, 2]      # 0.2 >= 0.5 * 0.4
    ids, _ = Sampler(temperature=1, top_k=0, top_p=1, min_p=0.15).probabilities(logits)
    assert sorted(ids.tolist()) == [0, 1, 2, 3]   # 0.06 >= 0.06, 0.04 < 0.06
    ids, _ = Sampler(temperature=1, top_k=0, top_p=1, min_p=1.0).probabilities(logits)
    assert ids.tolist() == [0]


def test_temperature_scales_the_kept_distribution():
    logits = _logits(0.0, math.log(2.0))
    _, p = Sampler(temperature=1, top_k=0, top_p=1, min_p=0).probabilities(logits)
    assert np.allclose(sorted(p), [1 / 3, 2 / 3])
    _, p = Sampler(temperature=0.5, top_k=0, top_p=1, min_p=0).probabilities(logits)
    assert np.allclose(sorted(p), [1 / 5, 4 / 5])   # 2^(1/0.5) = 4


def test_penalties_follow_llama_cpp():
    logits = _logits(2.0, -2.0, 1.0, 0.5)
    history = [0, 1, 0, 2]                                # counts: 0 -> 2, 1 -> 1, 2 -> 1
    s = Sampler(repeat_penalty=2.0, frequency_penalty=0.1, presence_penalty=0.25)
    out = s.apply_penalties(logits, history)
    want = [2.0 / 2 - 2 * 0.1 - 0.25, -2.0 * 2 - 0.1 - 0.25, 1.0 / 2 - 0.1 - 0.25, 0.5]
    assert np.allclose(out, want)
    assert logits[0] == 2.0                               # the input is not modified
    # only the last repeat_last_n tokens count; 0 turns penalties off, -1 takes everything
    out = Sampler(repeat_penalty=2.0, repeat_last_n=1).apply_penalties(logits, history)
    assert np.allclose(out, [2.0, -2.0, 0.5, 0.5])
    assert Sampler(repeat_penalty=2.0, repeat_last_n=0).apply_penalties(logits, history) is logits
    out = Sampler(repeat_penalty=2.0, repeat_last_n=-1).apply_penalties(logits, history)
    assert np.allclose(out, [1.0, -4.0, 0.5, 0.5])
    # greedy sees the penalised logits
    assert Sampler(temperature=0, repeat_penalty=10.0).sample(_logits(3, 2.5), [0]) == 1


def test_logit_bias_and_bans():
    s = Sampler(temperature=0, logit_bias={0: -np.inf, 2: 5.0, 99: 1.0})
    assert s.sample(_logits(10, 1, 0)) == 2
    s = Sampler(temperature=1, logit_bias={0: float("-inf")}, seed=0)
    assert all(s.sample(_logits(10, 0, 0)) != 0 for _ in range(200))
    with pytest.raises(ValueError, match="banned"):
        Sampler(temperature=1, logit_bias={0: -np.inf}).sample(_logits(1.0))
    with pytest.raises(ValueError, match="banned"):
        Sampler(temperature=0, logit_bias={0: -np.inf}).sample(_logits(1.0))


def test_same_seed_same_tokens_and_different_seeds_differ():
    rng = np.random.default_rng(1)
    steps = [rng.standard_normal(1000).astype(np.float32) for _ in range(64)]

    def run(seed):
        s = Sampler(temperature=1.0, top_k=50, top_p=0.95, min_p=0.0, seed=seed)
        history = []
        for logits in steps:
            history.append(s.sample(logits, history))
        return history

    assert run(1234) == run(1234)
    assert run(1234) != run(4321)
    s = Sampler(seed=None)
    assert isinstance(s.seed, int) and 0 <= s.seed < 2 ** 32
    assert Sampler(seed=-1).seed != -1


def test_draws_follow_a_fixed_three_token_distribution():
    probs = np.array([0.6, 0.3, 0.1])
    s = Sampler(temperature=1, top_k=0, top_p=1, min_p=0, seed=7)
    logits = np.log(probs).astype(np.float32)
    n = 6_000
    counts = np.bincount([s.sample(logits) for _ in range(n)], minlength=3)
    sigma = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) < 5 * sigma), counts


@pytest.mark.parametrize("kwargs", [dict(temperature=float("nan")), dict(top_p=1.5),
                                    dict(min_p=-0.1), dict(repeat_penalty=0),
                                    dict(repeat_last_n=-2), dict(logit_bias={1: float("nan")}),
                                    dict(top_p="x")])
def test_bad_settings_are_value_errors(kwargs):
    with pytest.raises(ValueError):
        Sampler(**kwargs)


def test_bad_logits_shape():
    with pytest.raises(ValueError):
        Sampler().sample(np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("kwargs", [dict(temperature=0), dict(temperature=0, logit_bias={1: -5.0}),
                                    dict(temperature=0.8, seed=1)])
def test_nan_or_plus_inf_logits_are_refused_wherever_they_are(bad, kwargs):
    for at in (0, 2, 4):
        logits = _logits(1.0, 3.0, 2.0, -1.0, 0.5)
        logits[at] = bad
        with pytest.raises(ValueError, match="NaN or \\+inf"):
            Sampler(**kwargs).sample(logits)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([-np.inf, -40.0, -9.5, -3.0, -1.0, 0.0, 0.5, 2.0, 7.25]) |
                st.floats(-50, 50, width=32), min_size=1, max_size=300),
       st.integers(1, 64))
def test_top_k_ids_equal_a_full_partition(values, k):
    """_top_ids partitions only the logits near the maximum when k of them are there; its ids
    are those of a partition of the whole vocabulary, ties to the lowest ids."""
    logits = np.array(values, dtype=np.float32)
    k = min(k, logits.size)
    n = logits.size
    kth = np.partition(logits, n - k)[n - k]
    above = np.flatnonzero(logits > kth)
    expect = np.sort(np.concatenate((above, np.flatnonzero(logits == kth)[: k - above.size])))
    assert np.array_equal(Sampler._top_ids(logits, k), expect)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([-np.inf, -3.0, 0.0, 0.5, 2.0, 7.25]), min_size=1, max_size=40),
       st.dictionaries(st.integers(0, 45), st.sampled_from([-np.inf, -2.5, -0.5, 0.0, 0.5, 1.75, 5.0]),
                       max_size=8))
def test_greedy_with_a_logit_bias_is_the_argmax_of_the_biased_logits(values, bias):
    """Greedy decoding skips the biased copy of the vocabulary; its pick (ties to the lowest
    id, ids beyond the vocabulary ignored) is the first argmax of the biased copy."""
    logits = np.array(values, dtype=np.float32)
    s = Sampler(temperature=0, logit_bias=bias)
    # a biased token tying with the unbiased maximum wins when its id is lower
    assert Sampler(temperature=0, logit_bias={0: 0.5}).sample(_logits(0.0, 0.5)) == 0
    assert Sampler(temperature=0, logit_bias={1: 0.5}).sample(_logits(0.5, 0.0)) == 0
    biased = s.apply_penalties(logits, ())
    if np.max(biased) == -np.inf:
        with pytest.raises(ValueError, match="banned"):
            s.sample(logits)
    else:
        assert s.sample(logits) == int(np.argmax(biased))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([-3.0, 0.0, 0.5, 2.0, 7.25]), min_size=1, max_size=300),
       st.dictionaries(st.integers(0, 310), st.sampled_from([-np.inf, -np.inf, -0.5, 1.75]),
                       max_size=8))
def test_a_logits_scan_pick_is_the_greedy_pick(values, bias):
    """The engine's decode steps pass backend.logits_scan's pick (finite logits, greedy_bans
    skipped) to sample(): the same token, or the same error when every token is banned."""
    logits = np.array(values, dtype=np.float32)
    s = Sampler(temperature=0, logit_bias=bias)
    bans = s.greedy_bans
    if bans is None:                      # a bias that is not a ban needs the logits
        assert any(b != -np.inf for b in bias.values())
        return
    assert list(bans) == sorted(bias)
    first, pick = backend.logits_scan(logits, bans)
    assert first == -1
    try:
        want = s.sample(logits)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            s.sample(logits, pick=pick)
    else:
        assert s.sample(logits, pick=pick) == want


def test_greedy_bans_only_when_the_pick_is_an_argmax():
    assert Sampler(temperature=0).greedy_bans.size == 0
    assert list(Sampler(temperature=0, logit_bias={9: -np.inf, 2: -np.inf}).greedy_bans) == [2, 9]
    assert Sampler(temperature=0, logit_bias={2: -1.0}).greedy_bans is None
    assert Sampler(temperature=0.8).greedy_bans is None
    assert Sampler(temperature=0, repeat_penalty=1.1).greedy_bans is None
    s = Sampler(temperature=0.8)                   # a pick given anyway is not used
    assert s.sample(_logits(0.0, 9.0), pick=0) in (0, 1)
    assert Sampler(temperature=0, repeat_penalty=1.5).sample(_logits(2.0, 1.9), [0], pick=0) == 1
