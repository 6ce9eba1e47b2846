"""coded_in: np.isin on code columns, by table lookup."""

import numpy as np

from profile_overlap.core.codes import coded_in


def test_coded_in_is_isin():
    rng = np.random.default_rng(0)
    for dtype in (np.int16, np.int32, np.int64):
        for _ in range(200):
            size = int(rng.integers(1, 40))
            codes = rng.integers(-2, size + 3, int(rng.integers(0, 50))).astype(dtype)  # some outside the table
            wanted = rng.integers(-1, size + 2, int(rng.integers(0, 6))).tolist()
            assert np.array_equal(coded_in(codes, wanted, size), np.isin(codes, wanted))
    assert coded_in(np.zeros(0, np.int16), [1], 3).dtype == bool
