"""Which files of swarm_panel one chat request runs code in: the count docs/architecture.md cites.

A server on the demo model (in-process, a real port), identical /v1/chat/completions requests, and a
warm one watched by a profile hook on every thread (threading.setprofile and sys.setprofile), so the
warm-up's one-off imports and loads are not counted. A watched request during which the engine changed
its layout (on a CPU, the attention follower switching kernels: a one-off, not the request's own walk)
is not counted either: the next one is watched instead, up to ATTEMPTS. Prints the files by room and
the total.

Run: python benchmarks/request_walk.py [--model demo] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import urllib.request
from collections import Counter
from pathlib import Path

import swarm_panel
from swarm_panel.app.server.http_server import ThreadedHttpServer
from swarm_panel.app.service.engine_service import SwarmService
from swarm_panel.app.settings.schema import Settings

PACKAGE = Path(swarm_panel.__file__).resolve().parent
BODY = {"model": "swarm-panel", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
        "temperature": 0}
ATTEMPTS = 5


def chat(url: str) -> None:
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(BODY).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        reply.read()


def walk(model: str) -> set[Path]:
    """The files whose code ran during the second request. The hook is set before any thread starts (a
    running thread cannot be given one before Python 3.12) and records only while armed."""
    seen: set[str] = set()
    armed = threading.Event()

    def hook(frame, event, arg):  # noqa: ARG001 - the profile hook's signature
        if armed.is_set():
            seen.add(frame.f_code.co_filename)

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        service = SwarmService(Settings(engine="llama", model=model, port=0))
        service.start()
        try:
            with ThreadedHttpServer(service) as server:
                chat(server.url)
                for _ in range(ATTEMPTS):
                    seen.clear()
                    # The facts are replaced whole when the layout changes: the same object, no relayout.
                    facts = service.engine.facts
                    armed.set()
                    chat(server.url)
                    armed.clear()
                    if service.engine.facts is facts:
                        break
                else:
                    raise RuntimeError(f"the layout changed during each of {ATTEMPTS} requests")
        finally:
            service.stop()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    files = {Path(name).resolve() for name in seen if name.endswith(".py")}
    return {f for f in files if PACKAGE in f.parents}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="demo", help="the model to serve (default: the demo model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    files = walk(args.model)
    rooms = Counter(str(f.parent.relative_to(PACKAGE)) for f in files)
    lines = sum(len(f.read_text().splitlines()) for f in files)
    if args.json:
        print(json.dumps({"files": len(files), "lines": lines, "rooms": dict(rooms.most_common()),
                          "paths": sorted(str(f.relative_to(PACKAGE)) for f in files)}))
        return 0
    for room, count in rooms.most_common():
        print(f"{room:<28} {count:>3}")
    print(f"{'files':<28} {len(files):>3}  ({lines:,} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
