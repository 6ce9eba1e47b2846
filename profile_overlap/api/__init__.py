"""Profile your own training job: `profile_overlap.trace_handler(log_dir)`, a drop-in for torch's
`tensorboard_trace_handler`, and `profile_overlap.profile(log_dir)`, a torch.profiler.profile wired
to it. One module per concern, in the order a trace travels:

    layout      the job folder under log_dir: its name (the job id), the rank state files, finding it again
    handler     on every rank: write each cycle's trace (atomically, checked), hand it to the worker; profile()
    background  the handler's side of the worker process: start it, send it tasks, wait for it
    worker      the worker process: gzip each trace, analyse it, append its scalars; on rank 0 the job's record
    events      one rank's analysis -> TensorBoard scalars, x = the global training step
    job         the job's record (build_job_record), its files and report; what `report DIR` calls
    report      the job's report: a one-mode document built from the renderers' blocks

Importing this package imports nothing; only `handler` imports torch.
"""
