"""A Hugging Face hub on loopback for the tests: model info with siblings and LFS sha256, resolve answered with a
redirect to a file URL that honours Range, and failures on demand (a dropped connection, a corrupted byte, 401, 404).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Hub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    drop_after: int | None = None  # the next file GET stops after this many bytes, once
    corrupt: bool = False  # every file GET flips one byte in the middle
    requests: list[str] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)  # the Range header of each file GET ('' for none)
    chunk_delay: float = 0.0  # seconds between 1 MB pieces of a file answer: a slow link, for Cancel

    def start(self) -> str:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub.requests.append(f"HEAD {self.path}")
                hub._answer(self, head=True)

            def do_GET(self) -> None:
                hub.requests.append(f"GET {self.path}")
                hub._answer(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        return self.url

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _repo(self, h: BaseHTTPRequestHandler, repo: str) -> dict[str, bytes] | None:
        if repo in self.gated and not h.headers.get("Authorization"):
            self._error(h, 401, "GatedRepo")
            return None
        if repo not in self.repos:
            self._error(h, 404, "RepoNotFound")
            return None
        return self.repos[repo]

    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = h.path.split("?")[0]
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"]:
            repo = "/".join(parts[2:4])
            files = self._repo(h, repo)
            if files is not None:
                self._json(h, {"id": repo, "sha": COMMIT, "siblings": [
                    {"rfilename": name, "size": len(data),
                     "lfs": {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}}
                    for name, data in files.items()]})
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            files = self._repo(h, repo)
            if files is None:
                return
            if name not in files:
                self._error(h, 404, "EntryNotFound")
                return
            data = files[name]
            # The hub answers resolve with a redirect to its CDN, naming the blob in X-Linked-* headers.
            # huggingface_hub follows a redirect on the hub's own host, so the file answer names them too.
            h.send_response(302)
            h.send_header("Location", f"{self.url}/cdn/{repo}/{name}")
            self._hub_headers(h, data)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        if parts[0] == "cdn":
            repo, name = "/".join(parts[1:3]), "/".join(parts[3:])
            self._file(h, self.repos[repo][name], head)
            return
        self._error(h, 404, "NotFound")

    def _hub_headers(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("X-Linked-Etag", f'"{hashlib.sha256(data).hexdigest()}"')
        h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("ETag", '"pointer"')

    def _json(self, h: BaseHTTPRequestHandler, payload: object) -> None:
        body = json.dumps(payload).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _file(self, h: BaseHTTPRequestHandler, data: bytes, head: bool) -> None:
        if self.corrupt:
            middle = len(data) // 2
            data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
        asked = h.headers.get("Range", "")
        if not head:
            self.ranges.append(asked)
        start, end = 0, len(data) - 1
        if asked.startswith("bytes="):
            lo, _, hi = asked[6:].partition("-")
            start, end = int(lo), min(int(hi) if hi else end, end)
        h.send_response(206 if asked else 200)
        self._hub_headers(h, data)
        h.send_header("Content-Length", str(end - start + 1))
        if asked:
            h.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        h.end_headers()
        if head:
            return
        body = data[start:end + 1]
        if self.drop_after is not None:
            cut, self.drop_after = self.drop_after, None
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        if self.chunk_delay:
            for piece in range(0, len(body), 1 << 20):
                try:
                    h.wfile.write(body[piece:piece + (1 << 20)])
                except (BrokenPipeError, ConnectionResetError):  # the client went away (Cancel)
                    return
                time.sleep(self.chunk_delay)
            return
        h.wfile.write(body)
