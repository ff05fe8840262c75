"""backend.logits_scan (src/core/logits.c): a decode step's one pass over its logits row, the
first NaN/inf and the greedy pick without banned ids, against numpy on rows whose lengths sit
around the scan's 16-value lanes and 256-value blocks."""

import numpy as np
import pytest

from cann_llm import backend as be


def _numpy_pick(row, bans):
    kept = row.copy()
    kept[bans[(bans >= 0) & (bans < row.size)]] = -np.inf
    return int(np.argmax(kept)) if kept.size and kept.max() > -np.inf else -1


@pytest.mark.parametrize("n", [1, 15, 16, 17, 255, 256, 257, 4099, 151936])
def test_the_pick_is_the_first_argmax_without_the_banned_ids(n):
    rng = np.random.default_rng(n)
    for trial in range(12):
        row = rng.standard_normal(n).astype(np.float32)
        if trial % 2:                       # ties, the first of which must win
            row = np.round(row * 2).astype(np.float32)
            row[rng.integers(0, n, 3)] = row.max()
        if trial % 3 == 2:                  # -0.0 and 0.0 tie as well
            row = np.where(row > 0, np.float32(-0.0), row).astype(np.float32)
        bans = np.unique(rng.integers(-3, n + 3, trial % 5 * 3))
        if trial == 11:                     # the best values banned, ties included
            bans = np.unique(np.concatenate([bans, np.flatnonzero(row == row.max())]))
        first, pick = be.logits_scan(row, bans)
        assert first == -1
        assert pick == _numpy_pick(row, bans)
    assert be.logits_scan(np.zeros(n, np.float32), np.arange(n, dtype=np.int64)) == (-1, -1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_the_first_non_finite_value_is_found_wherever_it_is(bad):
    rng = np.random.default_rng(0)
    for n, at in [(1, 0), (300, 0), (300, 255), (300, 256), (300, 299), (49152, 31000)]:
        row = rng.standard_normal(n).astype(np.float32)
        row[at] = bad
        row[min(at + 1 + n // 3, n - 1)] = np.nan      # a later one does not count
        assert be.logits_scan(row, np.array([at], np.int64)) == (at, -1)   # banned or not


def test_unsorted_bans_and_wrong_rows_are_clear_errors():
    row = np.zeros(8, np.float32)
    with pytest.raises(be.CannError, match="not sorted"):
        be.logits_scan(row, np.array([5, 2], np.int64))
    strided = np.arange(16, dtype=np.float64)[::2]        # converted, not misread
    assert be.logits_scan(strided) == (-1, 7)
