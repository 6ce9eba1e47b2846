"""`explain`: the worked example for --world-size N ranks, then the three schedules of --mode compare
as text timelines (both from tools/explain.py)."""

from __future__ import annotations

import argparse

from rich import box
from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from profile_overlap.core.errors import UserError
from profile_overlap.render.console import make_console
from profile_overlap.tools.explain import SCHEDULES, SKETCH_LEGEND, worked_example


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--world-size",
        type=int,
        default=4,
        metavar="N",
        help="ranks in the example; each holds N consecutive numbers (default: %(default)s)",
    )


def main(args: argparse.Namespace) -> int:
    n = args.world_size
    if not 2 <= n <= 64:
        raise UserError(f"--world-size {n} is out of range: give 2 to 64")
    x = worked_example(n)
    inputs, total, shards, gathered = x.inputs, x.total, x.shards, x.gathered
    equal = bool((total == gathered).all())
    console = make_console()
    console.print(f"AllReduce(X) == AllGather(ReduceScatter(X)), with {n} ranks\n", style="bold")

    table = Table(box=box.SIMPLE_HEAVY)
    for header in ("rank", "input X_r", "all_reduce", "reduce_scatter shard", "all_gather of shards"):
        table.add_column(header, justify="right" if header == "rank" else "left")
    as_text = lambda t: "[" + ", ".join(f"{v:g}" for v in t.tolist()) + "]"  # noqa: E731
    for r in range(n):
        table.add_row(str(r), as_text(inputs[r]), as_text(total), as_text(shards[r]), as_text(gathered))
    console.print(table)
    verdict = ("equal", "green") if equal else ("NOT equal", "red")
    console.print(Text.assemble(f"all_reduce result {as_text(total)} vs all_gather(reduce_scatter) {as_text(gathered)}: ", verdict, "\n"))

    traffic = 2 * (n - 1) / n
    console.print("Why split it?", style="bold")
    console.print(
        f"- Overlap: after the reduce_scatter each rank already holds its 1/{n} of the sum and can update it\n"
        "  (an optimizer step on its shard); the all_gather that follows runs asynchronously, hidden\n"
        "  behind the next compute, such as the next forward pass.\n"
        f"- Memory: each rank keeps gradients and optimizer state for only 1/{n} of the parameters\n"
        "  (ZeRO stages 2 and 3, FSDP).\n"
        f"- Traffic: the same either way. A ring all_reduce sends 2({n}-1)/{n} = {traffic:.3g} x the data per rank;\n"
        f"  reduce_scatter and all_gather send ({n}-1)/{n} = {traffic / 2:.3g} x each, {traffic:.3g} x together.\n"
    )
    console.print(schedules_panel(), width=min(console.width, 100))
    console.print(
        "--mode compare runs all three. Split against split-blocking gives the overlap yield (the step time that overlapping\n"
        "wins) and the interference (how much slower compute runs beside communication).\n"
        "Measure it on real ranks: torchrun --standalone --nproc-per-node 4 -m profile_overlap --mode compare"
    )
    return 0 if equal else 1


def schedules_panel() -> Panel:
    """The three modes of --mode compare, each a sentence and a text timeline (rows: compute, comm)."""
    parts: list = []
    for schedule in SCHEDULES:
        parts.append(Text.assemble((schedule.mode, "bold"), ": ", schedule.summary))
        parts.extend(Text(line, no_wrap=True, overflow="ignore") for line in schedule.sketch())
        parts.append(Text(""))
    parts.append(Text(SKETCH_LEGEND, style="dim"))
    return Panel(Group(*parts), title="The three schedules of --mode compare", title_align="left", box=box.ROUNDED)
