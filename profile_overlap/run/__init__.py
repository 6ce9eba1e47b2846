"""A run on every rank: config, launch, process group, pipelines, verification, profiling, the harness."""
