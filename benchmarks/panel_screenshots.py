"""Draws assets/screen-WxH.png: the panel's first launch as a user sees it, on a real X server of each size.

For each screen it starts Xvfb (xvfb-run), runs `swarm-panel gui --engine modeled` on a fresh HOME (so no
remembered layout: the first launch's arrangement for that screen, the modeled card's swarm running),
grabs the whole screen with ImageMagick's `import -window root` after --settle seconds, and closes the
panel. Needs xvfb and imagemagick (apt-get install xvfb imagemagick).

    python benchmarks/panel_screenshots.py [--out assets] [--settle 20]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

# (screen size, Qt scale factor): the sizes the screen tests use (tests/ui/screens.json).
SCREENS = (("1280x720", None), ("1366x768", None), ("1920x1080", "1.5"), ("1920x1080", None), ("2560x1440", None))


def shoot(size: str, scale: str | None, out: Path, settle: float) -> Path:
    name = out / (f"screen-{size}" + (f"-at-{int(float(scale) * 100)}pct" if scale else "") + ".png")
    with tempfile.TemporaryDirectory() as home:
        env = os.environ | {"HOME": home, "XDG_CONFIG_HOME": f"{home}/.config", "XDG_CACHE_HOME": f"{home}/.cache",
                            "SWARM_PANEL_CONFIG_FILE": f"{home}/absent.toml", "QT_QPA_PLATFORM": "xcb"}
        if scale:
            env["QT_SCALE_FACTOR"] = scale
        panel = shlex.join([sys.executable, "-m", "swarm_panel", "gui", "--engine", "modeled", "--port", "0",
                            "--quit-after", str(settle + 5)])
        # The panel in the background; the grab once it has settled; then wait for it to quit by itself.
        script = f"{panel} & pid=$!; sleep {settle}; import -window root {shlex.quote(str(name))}; wait $pid"
        subprocess.run(["xvfb-run", "-a", "-s", f"-screen 0 {size}x24", "sh", "-c", script], env=env, check=True,
                       timeout=settle + 120)
    # Palette PNGs keep a screenshot of flat colours small.
    subprocess.run(["convert", str(name), "-colors", "128", f"PNG8:{name}"], check=True)
    return name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("assets"))
    parser.add_argument("--settle", type=float, default=20.0)
    args = parser.parse_args()
    for size, scale in SCREENS:
        print(shoot(size, scale, args.out, args.settle))


if __name__ == "__main__":
    main()
