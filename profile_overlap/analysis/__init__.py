"""Trace files -> events -> intervals -> per rank -> across ranks. No torch import.

One module per stage of the data path, in order:

    stream       a trace file -> its traceEvents, one decoded chunk at a time
    trace        one trace file -> compact columns (Trace)
    classify     the name tables: comm / compute / ignored, collective ops and kinds
    events       one Trace -> classified comm and compute intervals, steps, calls (FileEvents)
    facts        what the integrity checks need from a file and a rank, beside the metrics
    collectives  collective calls -> sizes, numbering, per-kind stats with bandwidth
    per_rank     one rank's FileEvents -> its metrics (RankAnalysis)
    spans        timeline spans and their coarsening (also used by the TensorBoard plugin)
    cross_rank   all ranks -> world size, wait/transfer split (TraceAnalysis)
    integrity    all ranks' facts -> the integrity checks (checks: Check and thresholds;
                 integrity_events: classification, streams, timing)
    folder       analyze_dir: find the trace files, read them in parallel, bad files
    record       TraceAnalysis -> the `analyze --json` record and timeline.json

Helpers: bandwidth (nccl-tests' algbw / busbw); interval arithmetic is core/intervals.py (the timeline figure uses it too).
"""
