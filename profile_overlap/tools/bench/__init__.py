"""`bench-collectives`: its flags (config.py, no torch, so `--help` is instant), the measurement on
every rank (collectives.py) and its record and renderers (record.py)."""
