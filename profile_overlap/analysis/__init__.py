"""Trace files -> events -> intervals -> per rank -> across ranks. No torch import.

One package per stage of the data path, in order; `folder` and `cluster` are the facade:

    read/       a trace file -> compact columns: stream (its traceEvents, one decoded chunk at a
                time), trace (Trace), trace_args, classify (the name tables: comm / compute /
                ignored, collective ops and kinds), labels (the record_function around an event)
    file/       one Trace -> FileEvents: events (classified comm and compute intervals, steps,
                calls), call_columns, collectives (sizes, numbering, per-kind stats), bandwidth
                (nccl-tests' algbw / busbw), phases, steps, facts (what the integrity checks
                need), replay (what whatif replays), fsdp_units, gloo_groups, hta_compat
    rank/       one rank's FileEvents -> its metrics: per_rank (RankAnalysis), rank_input,
                rank_pool, rank_times, interference, dimensions, pipeline, spans (timeline spans
                and their coarsening), overlap_spans, exposed_timeline
    world/      all ranks -> TraceAnalysis: cross_rank (world size, wait/transfer split), clocks,
                causes, stragglers, critical_path, heatmap, spread
    integrity/  all ranks' facts -> the integrity checks: checks (a check, thresholds), events
                (classification, streams, timing), world (the checks across ranks)
    options     AnalysisOptions: hta_compat, steps, skip_bad, keep_spans as one frozen value
    folder      analyze_dir: find the trace files, read them in parallel, bad files
    cluster     analyze_dir spread over a torchrun job's ranks
    record      TraceAnalysis -> the `analyze --json` record and timeline.json

Interval arithmetic is core/intervals.py (the timeline figure uses it too).
"""
