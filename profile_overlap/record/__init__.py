"""The typed record: msgspec Structs for metrics.json, each mode's analysis and timeline.json, the one
builder of a record (build.py), its derived numbers (summary.py) and its reading back (load.py, folder.py)."""
