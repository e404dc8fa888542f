#!/usr/bin/env bash
# One-folder PyInstaller build: dist/swarm-panel/swarm-panel, then the offscreen smoke test.
#   packaging/build.sh            # build and smoke-test
#   SKIP_SMOKE=1 packaging/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"  # the analysis imports Qt modules
python -m PyInstaller --version >/dev/null 2>&1 || { echo "pip install pyinstaller (or pip install -e '.[package]')" >&2; exit 2; }
[ -f swarm_panel/ui/desktop/icon.png ] || python packaging/make_icon.py
python -m PyInstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/swarm-panel.spec
echo "built dist/swarm-panel/ ($(du -sh dist/swarm-panel | cut -f1))"
if [ -z "${SKIP_SMOKE:-}" ]; then
    packaging/smoke_test.sh dist/swarm-panel/swarm-panel
fi
