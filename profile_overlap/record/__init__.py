"""The metrics record: typed dataclasses for metrics.json, JSON in and out, the schema version."""
