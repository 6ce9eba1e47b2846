"""Interval arithmetic, on cases worked by hand."""

import numpy as np

from profile_overlap.core import intervals as iv


def u(*pairs):
    return iv.union([p[0] for p in pairs], [p[1] for p in pairs])


def pairs(x):
    return list(zip(x[0].tolist(), x[1].tolist()))


def test_empty():
    assert pairs(u()) == []
    assert iv.length(u()) == 0
    assert iv.intersection_length(u(), u((0, 5))) == 0
    assert iv.intersection_length(u((0, 5)), u()) == 0
    assert pairs(iv.clip(u(), 0, 10)) == []


def test_zero_length_intervals_vanish():
    assert pairs(u((3, 3), (5, 4))) == []


def test_nested():
    # [0,10) contains [2,3) and [4,9): the union is just [0,10).
    assert pairs(u((2, 3), (0, 10), (4, 9))) == [(0, 10)]


def test_touching_merge_and_keep_length():
    assert pairs(u((0, 5), (5, 7))) == [(0, 7)]
    assert iv.length(u((0, 5), (5, 7))) == 7


def test_identical():
    assert pairs(u((1, 4), (1, 4), (1, 4))) == [(1, 4)]
    assert iv.intersection_length(u((1, 4)), u((1, 4))) == 3


def test_disjoint_and_unsorted():
    assert pairs(u((8, 9), (0, 2), (4, 6))) == [(0, 2), (4, 6), (8, 9)]
    assert iv.length(u((8, 9), (0, 2), (4, 6))) == 2 + 2 + 1


def test_many_streams():
    # comm on two streams: [0,10) and [5,20) -> [0,20); compute on three streams:
    # [2,4), [3,6) and [18,30) -> [2,6) + [18,30). Overlap: [2,6) (4) + [18,20) (2) = 6.
    comm = u((0, 10), (5, 20))
    compute = u((2, 4), (3, 6), (18, 30))
    assert pairs(comm) == [(0, 20)]
    assert pairs(compute) == [(2, 6), (18, 30)]
    assert iv.intersection_length(comm, compute) == 4 + 2
    assert pairs(iv.intersect(compute, comm)) == [(2, 6), (18, 20)]


def test_intersection_same_start():
    # Both unions start at 0: the piece [0,3) must be counted once.
    assert iv.intersection_length(u((0, 3)), u((0, 5))) == 3
    assert iv.intersection_length(u((0, 5), (7, 9)), u((0, 3), (7, 8))) == 3 + 1


def test_clip():
    x = u((0, 10), (20, 30), (40, 50))
    assert pairs(iv.clip(x, 5, 25)) == [(5, 10), (20, 25)]
    assert pairs(iv.clip(x, 10, 20)) == []
    assert pairs(iv.clip(x, 0, 100)) == [(0, 10), (20, 30), (40, 50)]
    assert pairs(iv.clip(x, 25, 25)) == []


def test_difference():
    x = u((0, 10), (20, 30))
    assert pairs(iv.difference(x, u((5, 22)))) == [(0, 5), (22, 30)]
    assert pairs(iv.difference(x, u((0, 10)))) == [(20, 30)]
    assert pairs(iv.difference(x, u())) == [(0, 10), (20, 30)]


def test_gap_merges_close_intervals():
    assert pairs(iv.union([0, 10.5], [10, 20], gap=1)) == [(0, 20)]
    assert pairs(iv.union([0, 12], [10, 20], gap=1)) == [(0, 10), (12, 20)]


def test_float_times():
    x = u((0.25, 0.75), (0.5, 1.5))
    assert np.isclose(iv.length(x), 1.25)


def test_merge_of_two_unions_is_the_union_of_their_intervals():
    assert pairs(iv.merge(u((0, 2), (5, 6)), u((2, 3), (6.5, 7)))) == [(0, 3), (5, 6), (6.5, 7)]
    assert pairs(iv.merge(u(), u((1, 2)))) == [(1, 2)] and pairs(iv.merge(u((1, 2)), u())) == [(1, 2)]
    # Bit for bit what `union` of the concatenation gives, ties and touching ends included.
    rng = np.random.default_rng(0)
    for trial in range(500):
        a, b = (
            iv.union(s, s + rng.integers(1, 5, s.size) * (rng.random(s.size) if trial % 3 else 1))
            for s in (rng.integers(0, 40, rng.integers(0, 30)).astype(float) for _ in range(2))
        )
        want = iv.union(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
        got = iv.merge(a, b)
        assert all(np.array_equal(x, y) for x, y in zip(got, want)), (a, b)


def _numpy_only(f, *args, **kwargs):
    """f with the small-input path off (every size through numpy)."""
    small, iv.SMALL = iv.SMALL, -1
    try:
        return f(*args, **kwargs)
    finally:
        iv.SMALL = small


def _bits(x, y):
    return all(np.array_equal(p, q) and p.dtype == q.dtype and np.array_equal(np.signbit(p), np.signbit(q)) for p, q in zip(x, y))


def test_small_union_and_intersect_are_the_numpy_ones_to_the_bit():
    # Ties, touching ends, empty and NaN intervals, a gap, 0.0 against -0.0 (np.maximum and np.minimum keep the second).
    rng = np.random.default_rng(3)
    for trial in range(3000):
        n = int(rng.integers(0, iv.SMALL + 2))
        s = rng.integers(-3, 6, n).astype(float) * (0.5 if trial % 2 else 1)
        e = s + rng.integers(-1, 4, n) * (0.5 if trial % 3 else 1)
        s[s == 0] = rng.choice([0.0, -0.0], int((s == 0).sum()))
        e[e == 0] = rng.choice([0.0, -0.0], int((e == 0).sum()))
        if n and trial % 5 == 0:
            s[rng.integers(0, n)] = np.nan
        gap = 0.5 if trial % 4 == 0 else 0.0
        assert _bits(iv.union(s, e, gap=gap), _numpy_only(iv.union, s, e, gap=gap)), (s, e, gap)
        a = _numpy_only(iv.union, s, e)
        m = int(rng.integers(0, 12))
        t = rng.integers(-3, 6, m).astype(float)
        b = _numpy_only(iv.union, t, t + rng.integers(1, 3, m))
        for x, y in ((a, b), (b, a)):
            assert _bits(iv.intersect(x, y), _numpy_only(iv.intersect, x, y)), (x, y)


def _difference_by_every_end(a, b):
    """a − b the long way: cut at every end of both, keep the pieces a covers and b does not."""
    points = np.unique(np.concatenate([a[0], a[1], b[0], b[1]]))
    mid = (points[:-1] + points[1:]) / 2
    keep = iv.covers(a, mid) & ~iv.covers(b, mid)
    return iv.union(points[:-1][keep], points[1:][keep])


def test_difference_is_the_union_cut_at_every_end_of_both_to_the_bit():
    # Integer grids make shared and touching ends common; 40+ intervals take numpy's path.
    rng = np.random.default_rng(7)
    for size in (3, 40, 400):
        for _ in range(50):
            a = iv.union(*np.sort(rng.integers(0, 4 * size, (2, size)), axis=0).astype(float))
            b = iv.union(*np.sort(rng.integers(0, 4 * size, (2, size)), axis=0).astype(float))
            got, want = iv.difference(a, b), _difference_by_every_end(a, b)
            assert all(np.array_equal(x, y) for x, y in zip(got, want)), (a, b)


def test_intersection_length_is_the_length_of_the_intersection_to_the_bit():
    # Many short intervals, so that both unions have hundreds of pieces: on a grid (shared starts
    # and ends), and at random fractions (a sum that depends on its order).
    rng = np.random.default_rng(11)
    for size in (3, 40, 400, 4000):
        for grid in (True, False):
            for _ in range(20):
                start = rng.integers(0, 8 * size, (2, size)).astype(float)
                span = rng.integers(0, 6, (2, size)).astype(float)
                if not grid:
                    start += rng.random((2, size))
                    span *= rng.random((2, size))
                a, b = (iv.union(start[k], start[k] + span[k]) for k in (0, 1))
                assert iv.intersection_length(a, b) == iv.length(iv.intersect(a, b)), (a, b)
                assert iv.intersection_length(b, a) == iv.length(iv.intersect(b, a)), (a, b)
    assert iv.intersection_length(iv.EMPTY, u((0, 1))) == 0.0


def test_intersect_in_blocks_finds_the_pieces_of_one_pass_to_the_bit(monkeypatch):
    # A block smaller than either union, one that divides neither size, and one larger than both:
    # the same pieces in the same order, so intersect and intersection_length do not change.
    rng = np.random.default_rng(5)
    cases = []
    for size in (40, 400, 1000):
        start = rng.integers(0, 8 * size, (2, size)).astype(float) + rng.random((2, size))
        span = rng.integers(0, 6, (2, size)) * rng.random((2, size))
        cases.append(tuple(iv.union(start[k], start[k] + span[k]) for k in (0, 1)))
    monkeypatch.setattr(iv, "PIECES_BLOCK", 1 << 20)
    whole = [(iv.intersect(a, b), iv.intersection_length(a, b), iv.intersect(b, a)) for a, b in cases]
    for block in (1, 7, 64):
        monkeypatch.setattr(iv, "PIECES_BLOCK", block)
        for (a, b), (ab, length, ba) in zip(cases, whole):
            assert _bits(iv.intersect(a, b), ab) and _bits(iv.intersect(b, a), ba), block
            assert iv.intersection_length(a, b) == length, block
