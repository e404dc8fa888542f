"""Each real coding-agent harness on the read-a-file task, twice: its first session and a second one.

For each harness installed (Claude Code, Codex, opencode, Qwen Code, aider), runs
`swarm-panel agents run KIND --dir FOLDER --sessions 2 --json` (one engine per harness, the sessions one
after another on it) in a fresh folder holding hello.py, and prints a row per session: whether it
completed (the harness exited 0), its turns as the server logged them, the first turn's time and
prompt, the prompt tokens computed on each turn, and how much of the first session's first-turn
prompt the second session's first turn computed (issue #39: under 10%).

    python benchmarks/real_agents.py [--kinds claude-code codex ...] [--timeout 600] [--first-timeout S]
        [--max-output-tokens N]
        [-- SERVE FLAGS]

Flags after `--` go to `agents run` as they are (e.g. `--model PATH`, `--num-lanes 2`). Nothing else
should run on the machine meanwhile: the harnesses' first turns are 7-24k tokens of prompt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swarm_panel.app.harness.kinds import KINDS

HELLO = 'print("hello, world")\n'
# The bound on one session of the read-a-file task on this machine kind.
SESSION_LIMIT_S = 600


def run_kind(kind: str, timeout_s: float, first_timeout_s: float, max_output_tokens: int,
             extra: list[str]) -> tuple[list[dict], float, str]:
    """The rows `agents run` printed, the wall time, and its stderr's tail."""
    with tempfile.TemporaryDirectory(prefix=f"real-agents-{kind}-") as scratch:
        folder = str(Path(scratch) / "work")
        Path(folder).mkdir()
        (Path(folder) / "hello.py").write_text(HELLO)
        command = [sys.executable, "-m", "swarm_panel", "agents", "run", kind, "--dir", folder, "--sessions", "2",
                   "--json", "--timeout", str(timeout_s), "--first-timeout", str(first_timeout_s),
                   "--max-output-tokens", str(max_output_tokens), *extra]
        started = time.monotonic()
        # Each agent's workspace (a copy of the folder) goes with it, not into the data folder.
        env = os.environ | {"SWARM_PANEL_WORKTREES": str(Path(scratch) / "worktrees")}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
        wall = time.monotonic() - started
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return rows, wall, done.stderr[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--timeout", type=float, default=SESSION_LIMIT_S,
                        help="seconds each session may take before it is stopped (default 600)")
    parser.add_argument("--first-timeout", type=float, default=None,
                        help="the first session's limit (default: --timeout); a cold first session of a harness "
                             "with a 20k-token prompt needs more than 600 s on 2 cores, and the later sessions "
                             "reuse only what it finished computing")
    parser.add_argument("--max-output-tokens", type=int, default=1024,
                        help="each response's output limit, as each harness is told (default 1024)")
    parser.add_argument("extra", nargs="*", help="flags for `agents run` after --")
    args = parser.parse_args()
    print(f"{'harness':<12} {'session':>7} {'done':<4} {'exit':>4} {'turns':>5} {'time':>8} {'first turn':>10} "
          f"{'its prompt':>10} {'computed':>8} {'vs first':>8}  computed per turn")
    failed = 0
    for kind in args.kinds:
        if not KINDS[kind].found():
            print(f"{kind:<12} not installed: {KINDS[kind].install}")
            continue
        rows, wall, stderr = run_kind(kind, args.timeout, args.first_timeout or args.timeout, args.max_output_tokens,
                                     args.extra)
        if not rows:
            print(f"{kind:<12} no rows after {wall:.0f} s: {' '.join(stderr.split())[-400:]}")
            failed += 1
            continue
        first_computed = rows[0]["first_turn_computed"]
        for session, row in enumerate(rows, 1):
            share = ("-" if not first_computed or row["first_turn_computed"] is None
                     else f"{100 * row['first_turn_computed'] / first_computed:.1f}%")
            print(f"{kind:<12} {session:>7} {'yes' if row['completed'] else 'no':<4} {row['exit_code']!s:>4} "
                  f"{row['turns']:>5} {row['seconds'] or 0:>7.0f}s {row['first_turn_s'] or 0:>9.1f}s "
                  f"{row['first_turn_prompt'] or 0:>10,} {row['first_turn_computed'] or 0:>8,} {share:>8}  "
                  f"{', '.join(f'{c:,}' for c in row['computed'])}")
            if not row["completed"]:
                failed += 1
                print(f"{'':<12} finishes {row['finishes']}; it said: {row['complaint'] or '-'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
