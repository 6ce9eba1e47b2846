"""The collective arguments kept from a trace, looked up by row one at a time and for many rows at once."""

from __future__ import annotations

from array import array

import numpy as np

from profile_overlap.analysis.read.trace_args import CollectiveArgs, RowArgs


def _args() -> RowArgs:
    values = (CollectiveArgs(collective_name="allreduce", in_nelems=4), CollectiveArgs(collective_name="allgather", in_nelems=8))
    return RowArgs(array("i", [2, 5, 9]), array("i", [1, 0, 1]), values, np.array([-1, 7, 8], dtype=np.int32))


def test_many_rows_at_once_give_what_one_row_at_a_time_gives():
    args = _args()
    rows = np.array([9, -1, 0, 2, 5, 6, 10, 2], dtype=np.int64)
    assert args.values_at(rows) == [args.get(int(r)) for r in rows]
    assert [v.collective_name if v else None for v in args.values_at(rows)] == [
        "allgather",
        None,
        None,
        "allgather",
        "allreduce",
        None,
        None,
        "allgather",
    ]


def test_no_rows_or_no_args_give_nothing():
    assert _args().values_at(np.zeros(0, dtype=np.int64)) == []
    empty = RowArgs(array("i"), array("i"), (), np.zeros(0, dtype=np.int32))
    assert empty.values_at(np.array([0, 3])) == [None, None]
