#!/usr/bin/env bash
# Starts a swarm-panel executable offscreen with the modeled engine and its built-in swarm, takes a
# screenshot and quits: exit 0 and a PNG mean the bundle has Qt, pyqtgraph, qasync, uvicorn and the runtime.
#   packaging/smoke_test.sh [EXECUTABLE]     (default: swarm-panel on PATH)
set -euo pipefail
exe="${1:-swarm-panel}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
export QT_QPA_PLATFORM=offscreen SWARM_PANEL_CONFIG_FILE="$out/absent.toml"
"$exe" --help >/dev/null
timeout 120 "$exe" gui --engine modeled --swarm 4 --port 0 --settings-file "$out/panel.ini" \
    --screenshot "$out/smoke.png" --quit-after 5 2> >(grep -v propagateSizeHints >&2)
head -c 8 "$out/smoke.png" | od -An -c | grep -q "P   N   G" || { echo "smoke test: no PNG written" >&2; exit 1; }
echo "smoke test passed: $exe opened the panel, served the swarm and wrote a screenshot"
