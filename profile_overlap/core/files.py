"""The file names of a run folder (and of sweep and benchmark folders), in one place.

<run>/config.json env.json status.json metrics.json timeline.json
      report.html report.md report.json timeline.png logs/rank<r>.log perfetto.json.gz
      <mode>/<host>_<rank>.<span>.pt.trace.json.gz   (TensorBoard event files beside them)
<sweep>/sweep.json sweep.html sweep.md sweep.png, a run folder per point
<bench-collectives run>/bench.json
"""

CONFIG_JSON = "config.json"
ENV_JSON = "env.json"
STATUS_JSON = "status.json"
METRICS_JSON = "metrics.json"
TIMELINE_JSON = "timeline.json"
REPORT_HTML = "report.html"
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
TIMELINE_PNG = "timeline.png"
LOGS_DIR = "logs"
SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"
SWEEP_MD = "sweep.md"
SWEEP_PNG = "sweep.png"
BENCH_JSON = "bench.json"
PERFETTO_TRACE = "perfetto.json.gz"
ADVICE_JSON = "advice.json"
"""`perfetto`'s merged trace of all ranks (perfetto.<mode>.json.gz for one mode of a run)."""
