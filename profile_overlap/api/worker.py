"""The worker process of one rank's trace handler (started by api/background.py): for each trace,
gzip it into place, analyse it, append its scalars to the rank's event file; on rank 0, keep the
job's metrics.json and timeline.json up to date (the latest cycle), and at the end write the job's record and report.

    python -m profile_overlap.api.worker CONFIG_JSON     # tasks on stdin, one JSON object per line

Tasks (api/messages.py), in order: a TraceTask per trace, a DoneTask at each stop, a Ping to wait
for the queue. A failing task prints one line on stderr and the worker goes on: nothing here may
stop the training job.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from profile_overlap.api import layout
from profile_overlap.api.messages import DoneTask, Ping, Task, TraceTask, WorkerConfig, decode_config, decode_task
from profile_overlap.core.errors import UserError

if TYPE_CHECKING:
    from profile_overlap.api.events import RankEvents

GZIP_LEVEL = 1
"""The worker shares the training's cores: on a 1.6 MB CPU trace, level 1 takes 5.5 ms for 9.5% of
the size, level 6 (our runs' level) 14.5 ms for 6.4%; the analysis of the trace takes 24 ms."""
FINAL_WORKERS = 2
"""Parser processes of rank 0's end-of-job analysis (forked, so at the worker's nice 19): the node
may still be training, and each parser holds a whole trace in memory (analyze uses one per CPU)."""
LIVE_WAIT_S = 10.0
"""How long rank 0 waits for the other ranks' trace of a cycle before it updates the live record."""
LIVE_SHARE = 0.05
"""Rank 0 rewrites the live record (one trace read per other rank) at most this share of the time:
after a rewrite that took t seconds, not again for t / LIVE_SHARE seconds."""


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class RankWorker:
    def __init__(self, config: WorkerConfig, *, pending=lambda: False) -> None:
        self.pending = pending
        """Whether more tasks wait: rank 0 then leaves the live record to the next one."""
        self.job_dir = Path(config.job_dir)
        self.rank = config.rank
        self.world_size = config.world_size
        self.worker = config.worker
        self.analyze = config.analyze
        self._events: RankEvents | None = None
        self._analysis_failed = False
        self._next_live = 0.0

    def trace(self, task: TraceTask) -> None:
        partial, final = Path(task.partial), Path(task.final)
        try:
            layout.compress(partial, final, level=GZIP_LEVEL)
        except OSError as err:
            layout.remove_partials(self.job_dir, final.name[: -len(".gz")])
            reason = err.strerror or str(err)
            layout.record_drop(self.job_dir, self.rank, name=final.name, step=task.step, reason=reason)
            say(
                f"profile_overlap: dropped the trace of rank {self.rank} at step {task.step}: writing {final} failed "
                f"({reason}; most likely the disk is full): free disk space or pick another log_dir. Training goes on."
            )
            return
        partial.unlink(missing_ok=True)
        mine = self._scalars(final) if self.analyze else None
        if mine is not None and self.rank == 0 and not self.pending() and time.monotonic() >= self._next_live:
            self._live_record(mine)

    def _scalars(self, path: Path):
        """This cycle's analysis (a RankAnalysis), its scalars appended; None when it has no numbers."""
        from profile_overlap.analysis.options import IN_STEPS
        from profile_overlap.analysis.rank.per_rank import analyze_rank
        from profile_overlap.api.events import RankEvents

        try:
            result = analyze_rank([path], IN_STEPS)
        except UserError as err:
            if not self._analysis_failed:  # once: every cycle of a job fails the same way
                say(f"profile_overlap: rank {self.rank}: no overlap numbers for this trace: {err}")
            self._analysis_failed = True
            return None
        if self._events is None:
            self._events = RankEvents(self.job_dir / f"rank{self.rank}")
        self._events.append(result)
        return result

    def _live_record(self, mine) -> None:
        """Rank 0, after a cycle: the record of that cycle on every rank (each rank's trace of the
        same number), once the others have written theirs (or LIVE_WAIT_S passed). It reads one
        trace per other rank, and takes at most LIVE_SHARE of the time; the whole job's record
        comes at the end."""
        from profile_overlap.analysis.options import IN_STEPS
        from profile_overlap.analysis.rank.per_rank import analyze_rank
        from profile_overlap.analysis.world.cross_rank import combine
        from profile_overlap.api import job

        started = time.monotonic()
        cycle = len(layout.traces_of(self.job_dir, self.worker))
        paths: dict[int, Path] = {}
        while True:
            states, done = layout.read_states(self.job_dir), layout.done_ranks(self.job_dir)
            traces = {r: layout.traces_of(self.job_dir, s.worker) for r, s in states.items() if r != self.rank}
            paths = {r: t[cycle - 1] for r, t in traces.items() if len(t) >= cycle}
            if all(r in paths or r in done for r in traces) or time.monotonic() > started + LIVE_WAIT_S:
                break
            time.sleep(0.2)
        work = time.monotonic()
        analyses = [mine]
        for path in paths.values():
            try:
                analyses.append(analyze_rank([path], IN_STEPS))
            except UserError:
                continue  # that rank's numbers wait for the end
        result = combine(analyses, source=str(self.job_dir))
        if self._events is not None and mine.steps:
            from profile_overlap.api.events import exposed_scalars

            last = max(s.step for s in mine.steps)
            self._events.append_points(exposed_scalars(result.exposed, num_steps=len(mine.steps), step=last))
        job.write_record(self.job_dir, job.job_record(self.job_dir, result, cycle=cycle), result, final=False)
        self._next_live = time.monotonic() + (time.monotonic() - work) / LIVE_SHARE

    def done(self, task: DoneTask) -> None:
        layout.mark_done(self.job_dir, self.rank, traces=task.traces, session=task.session)
        if task.finalize and self.analyze:
            self._finalize(task.session)

    def _finalize(self, session: int) -> None:
        """Rank 0 at the end: wait for every rank's last trace, then the record, report and TensorBoard files."""
        from profile_overlap.api import job

        self.close()  # its writer thread must not run while the analysis forks; a later cycle opens a new file

        limit = layout.wait_s()
        started = time.monotonic()
        told = False
        while True:
            missing = sorted(set(range(self.world_size)) - layout.done_ranks(self.job_dir, session=session))
            waited = time.monotonic() - started
            if not missing or waited > limit:
                break
            if not told and waited > 2:
                names = ", ".join(str(r) for r in missing)
                say(f"profile_overlap: waiting up to {limit:.0f} s for rank(s) {names} to finish writing traces ({layout.WAIT_ENV})")
                told = True
            time.sleep(0.2)
        left_out: list[str] = []
        try:
            metrics = job.finish_job(self.job_dir, warn=left_out.append, max_workers=FINAL_WORKERS)
        except UserError as err:
            reason = f"{left_out[0]}{f' (and {len(left_out) - 1} more files)' if len(left_out) > 1 else ''}" if left_out else str(err)
            if not left_out and layout.num_dropped(self.job_dir):
                reason = f"every trace was dropped while being written ({layout.num_dropped(self.job_dir)}; see the warnings above)"
            say(f"profile_overlap: job {self.job_dir.name}: no record: {reason}")
            return
        for message in left_out:
            say(f"profile_overlap: left out of the record: {message}")
        assert metrics.summary is not None  # build_job_record summarizes the record
        x = metrics.summary.modes[layout.JOB_MODE]
        numbers = "" if x.overlap_pct is None else f"overlap {x.overlap_pct:.1f}%, exposed comm {x.exposed_comm_ms:.2f} ms per step; "
        missing_ranks = metrics.job.missing_ranks if metrics.job else ()
        absent = f"ranks missing: {', '.join(map(str, missing_ranks))}; " if missing_ranks else ""
        say(f"profile_overlap: job {self.job_dir.name}: {numbers}{absent}report {self.job_dir / 'report.html'}")

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None


def lower_priority() -> None:
    """The lowest nice: a rank's steps between profiled cycles should wait as little as possible
    for its worker. (Not SCHED_IDLE: on a machine kept busy, the worker would never run.)"""
    try:
        os.nice(19)
    except OSError:
        pass


class Tasks:
    """The task lines on stdin, read without a thread: the final record may fork processes
    (analysis.folder), and a fork must not happen while another thread holds stdin's lock."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf, self.eof = fd, b"", False

    def pending(self) -> bool:
        """Whether another task (or the end) is already there."""
        return b"\n" in self.buf or self.eof or bool(select.select([self.fd], [], [], 0)[0])

    def get(self) -> Task | None:
        """The next task; None at the end (the handler closed the pipe)."""
        while b"\n" not in self.buf:
            chunk = b"" if self.eof else os.read(self.fd, 1 << 16)
            if not chunk:
                self.eof = True
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return decode_task(line)


def main(argv: list[str]) -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed goes to stderr; stdout carries only the answers to pings
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops training; the handler still drains the queue
    lower_priority()
    tasks = Tasks(sys.stdin.fileno())
    worker = RankWorker(decode_config(argv[1]), pending=tasks.pending)
    try:
        while (task := tasks.get()) is not None:
            try:
                if isinstance(task, TraceTask):
                    worker.trace(task)
                elif isinstance(task, DoneTask):
                    worker.done(task)
                elif isinstance(task, Ping):
                    channel.write(f"pong {task.id}\n")
            except Exception as err:  # never stop the training job over its profile
                if os.environ.get("PROFILE_OVERLAP_DEBUG"):
                    raise
                op = type(task).__struct_config__.tag
                say(f"profile_overlap: rank {worker.rank}: background {op} failed: {type(err).__name__}: {err}")
    finally:
        worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
