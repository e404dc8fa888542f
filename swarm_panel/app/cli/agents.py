"""`swarm-panel agents`: the coding-agent harnesses this machine has, and a run of real ones.

`agents list` says which harnesses are installed (and the command that installs each one that is not), the
fence launches run in with what it holds on this machine, and the agents' kept workspaces.
`agents run KIND --dir FOLDER` starts the engine and the endpoint in this process, on any free port
unless --port is given, launches N agents of the kind against it, each in its own worktree of the folder
(branch swarm-panel/NAME) inside the fence (the endpoint its only network, unless --network), each with a
key of its own that serves its own requests and steers nothing, waits for them to end (or --timeout, then
stops them) and prints one row per agent: its exit code, its turns as the server logged them, the first
turn's time, the prompt tokens computed on each turn, what it changed and its final answer's end. Without
--n-ctx the context is raised, where needed, to hold the kind's first turn and its output.
`agents diff NAME`, `agents apply NAME` and `agents discard NAME|--all` review and land or drop their work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from swarm_panel.app.cli import agent_workspaces
from swarm_panel.app.cli.serve import SERVE_FIELDS
from swarm_panel.app.fence.choose import CHOICES, detect
from swarm_panel.app.fence.guarantees import guarantees
from swarm_panel.app.fence.walls import Fence
from swarm_panel.app.harness.config import DEFAULT_MAX_OUTPUT_TOKENS, HarnessOptions
from swarm_panel.app.harness.kinds import APIS, KINDS, HarnessKind, installed_version
from swarm_panel.app.harness.launcher import DEFAULT_TASK, FenceRefused, HarnessNotFound, HarnessRun, Launcher
from swarm_panel.app.server.http_server import HttpServer, PortInUse
from swarm_panel.app.service.agents import RequestRecord
from swarm_panel.app.service.engine_service import SwarmService, share_the_interpreter
from swarm_panel.app.settings.flags import add_settings_arguments, given
from swarm_panel.app.settings.schema import Settings
from swarm_panel.app.workspace.changes import changes
from swarm_panel.app.workspace.create import preflight
from swarm_panel.app.workspace.git import WorkspaceError

CONTEXT_MARGIN = 1024  # the turns after the first add tool results to the prompt
SHOWN_TURNS = 8  # computed tokens listed per agent; more are counted, not listed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agents", help="list the coding-agent harnesses, or run real ones against the engine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    listing = verbs.add_parser("list", help="which harnesses are installed (and how to install the others), the "
                                            "fence, and the agents' kept workspaces")
    listing.set_defaults(run=run_list)
    agent_workspaces.register(verbs)
    run = verbs.add_parser("run", help="launch N agents of a kind in a folder against the engine, wait, report")
    run.add_argument("kind", metavar="KIND", help=f"one of {', '.join(KINDS)}")
    run.add_argument("--dir", required=True, help="the folder the agents work in")
    run.add_argument("--task", default=DEFAULT_TASK, help=f"what each agent is asked (default: {DEFAULT_TASK!r})")
    run.add_argument("-n", "--agents", type=_positive, default=1, help="how many agents at once (default 1)")
    run.add_argument("--sessions", type=_positive, default=1,
                     help="run the N agents this many times, one round after another, on the same engine: "
                          "later sessions show what reuse of the harness's prompt saves (default 1)")
    run.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    run.add_argument("--fence", choices=CHOICES, default="auto",
                     help="which fence holds each harness: auto (bubblewrap where it works, else Landlock), or "
                          "only the one named, refusing to launch where it cannot run (default auto)")
    run.add_argument("--unconfined", action="store_true",
                     help="with --fence auto, where no fence (bubblewrap or Landlock) works, launch the harnesses "
                          "anyway: they then run with your rights over all your files. Without this nothing is "
                          "launched there. No effect where a fence works")
    run.add_argument("--network", action="store_true",
                     help="let each fenced harness reach the internet through a proxy that refuses this machine "
                          "and its network (loopback, private and link-local addresses); a harness that ignores "
                          "HTTPS_PROXY has none still. Without it a fenced harness reaches the endpoint only")
    run.add_argument("--request-timeout", type=float, default=None, metavar="S",
                     help="raise every harness's request and quiet-stream timeouts to S seconds (default: each "
                          "harness's own, which the server's keep-alives hold through a long prompt)")
    run.add_argument("--timeout", type=float, default=None,
                     help="seconds to wait before stopping those still running (default: wait for all)")
    run.add_argument("--first-timeout", type=float, default=None, metavar="S",
                     help="the first session's --timeout (default: --timeout): a cold first session computes the "
                          "harness's whole prompt, which the later ones reuse")
    run.add_argument("--max-output-tokens", type=_positive, default=DEFAULT_MAX_OUTPUT_TOKENS,
                     help="each response's output limit, as each harness is told "
                          f"(default {DEFAULT_MAX_OUTPUT_TOKENS})")
    add_settings_arguments(run.add_argument_group("the engine and the endpoint (as `serve`)"), SERVE_FIELDS)
    run.set_defaults(run=run_agents)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def run_list(args: argparse.Namespace) -> int:
    print_harnesses()
    print_guarantees(detect())
    agent_workspaces.print_workspaces()
    return 0


def print_harnesses() -> None:
    for kind in KINDS.values():
        path = kind.path()
        if path is None:
            where = f"not installed; install: {kind.install} (or set {kind.env_var} to its path)"
        else:
            where = f"{installed_version(path) or 'version unknown'} at {path}"
        print(f"{kind.key:<12} {kind.display}: {where}")
        print(f"{'':<12} speaks {APIS[kind.api]}; its first turn needs ~{kind.context_tokens:,} tokens of context")


def print_guarantees(fence: Fence) -> None:
    """The fence: what each launch here is held to, and what it is not (with the kernel feature missing)."""
    print(f"\nfence: {fence.describe()}")
    for item in guarantees(fence):
        print(f"  [{'held' if item.held else 'NOT held'}] {item.what}: {item.why}")


def kind_named(name: str) -> HarnessKind:
    if name not in KINDS:
        raise ValueError(f"no harness kind {name!r}; the kinds: {', '.join(KINDS)}")
    return KINDS[name]


def settings_for(args: argparse.Namespace, kind: HarnessKind) -> Settings:
    """The serve flags given, on any free port unless one is, with a context that holds the first turn and
    --max-output-tokens as the limit of a request that names none."""
    # Codex names no output limit: the server's default for such requests is the one it gets.
    fields = {"port": 0, "default_max_tokens": args.max_output_tokens} | given(args, SERVE_FIELDS)
    settings = Settings(**fields)
    needed = kind.context_tokens + args.max_output_tokens + CONTEXT_MARGIN
    if settings.n_ctx < needed:
        if "n_ctx" in fields:
            print(f"warning: {kind.display}'s first turn needs ~{needed:,} tokens of context; --n-ctx "
                  f"{settings.n_ctx:,} may not hold it", file=sys.stderr)
        else:
            settings = Settings(**(fields | {"n_ctx": needed}))
    return settings


def run_agents(args: argparse.Namespace) -> int:
    kind = kind_named(args.kind)
    if not kind.found():
        raise HarnessNotFound(kind)
    preflight(args.dir)  # a folder no agent can start from is refused before the engine loads, not after
    fence = detect(args.fence)
    try:  # a launch the fence refuses is refused before the engine loads too
        Launcher(unconfined=args.unconfined, fence=fence).confinement()
    except FenceRefused as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 2
    settings = settings_for(args, kind)
    options = HarnessOptions(max_output_tokens=args.max_output_tokens, context_tokens=settings.n_ctx,
                             request_timeout_s=args.request_timeout,
                             api_key=settings.api_key.get_secret_value() if settings.api_key else None)
    try:
        outcome = asyncio.run(launch_and_wait(settings, kind, args, options, fence))
    except PortInUse as exc:
        print(f"swarm-panel: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    if outcome is None:  # the engine did not load
        return 1
    launcher, runs = outcome
    if args.json:
        for row in rows(launcher, runs):
            print(json.dumps(row))
    else:
        print_rows(launcher, runs)
    return 0 if all(run.completed for run in runs) else 1


async def launch_and_wait(settings: Settings, kind: HarnessKind, args: argparse.Namespace,
                          options: HarnessOptions, fence: Fence) -> tuple[Launcher, list[HarnessRun]] | None:
    share_the_interpreter()
    service = SwarmService(settings)
    http = HttpServer(service)
    print(f"loading the {settings.engine} engine (n_ctx {settings.n_ctx:,})...", file=sys.stderr, flush=True)
    try:
        await asyncio.to_thread(service.start)
    except Exception as exc:  # noqa: BLE001 - a bad model path or file is the user's to fix, not a traceback
        print(f"swarm-panel: error: cannot load the engine: {exc}", file=sys.stderr)
        return None
    try:
        await http.start()
        launcher = Launcher(service.requests, options=options, unconfined=args.unconfined, fence=fence,
                            keys=service.agent_keys, network=args.network)
        print(f"fence: {launcher.fence.describe()}", file=sys.stderr, flush=True)
        if not launcher.fence.available:
            print("warning: the harnesses run unfenced, with your rights over all your files (--unconfined)",
                  file=sys.stderr, flush=True)
        runs: list[HarnessRun] = []
        try:
            for session in range(1, args.sessions + 1):
                started = await launcher.start(kind, args.dir, http.url, args.task, args.agents)
                runs += started
                print(f"session {session}: {len(started)} {kind.display} agent(s) on {started[0].folder} "
                      f"against {http.url}, each in its own workspace:", file=sys.stderr, flush=True)
                for run in started:
                    ws = run.workspace
                    print(f"  {run.name}: {ws.folder if ws else '-'} (branch {ws.branch if ws else '-'})",
                          file=sys.stderr, flush=True)
                timeout = args.first_timeout if session == 1 and args.first_timeout is not None else args.timeout
                if not await launcher.wait(timeout):
                    # The next session still runs: what this one computed is kept for it.
                    print(f"stopping the agents still running after {timeout:g} s", file=sys.stderr, flush=True)
                    await launcher.stop_all()
        finally:
            await launcher.stop_all()
        return launcher, runs
    finally:
        await http.stop()
        await asyncio.to_thread(service.stop)


def rows(launcher: Launcher, runs: list[HarnessRun]) -> list[dict[str, object]]:
    """One dict per agent: what print_rows shows, whole."""
    out = []
    for run in runs:
        turns = launcher.turns(run.name)
        first = first_turn(turns)
        out.append({"agent": run.name, "kind": run.kind.key, "status": run.status, "exit_code": run.exit_code,
                    "completed": run.completed, "turns": len(turns),
                    "seconds": None if run.ended is None else round(run.ended - run.started, 1),
                    "first_turn_s": None if first is None else round(first.seconds, 1),
                    "first_turn_prompt": None if first is None else first.prompt_tokens,
                    "first_turn_computed": None if first is None else first.computed_tokens,
                    "prompt": [t.prompt_tokens for t in turns], "computed": [t.computed_tokens for t in turns],
                    "status_codes": [t.status for t in turns], "finishes": [t.finish for t in turns],
                    "answer": run.answer(300), "confinement": run.confinement,
                    "workspace": run.workspace.folder if run.workspace else None,
                    "branch": run.workspace.branch if run.workspace else None,
                    "changes": _change_rows(run),
                    "complaint": None if run.completed else (run.error or " ".join(run.stderr.text.split())[-600:])})
    return out


def _change_rows(run: HarnessRun) -> list[dict[str, object]] | None:
    try:
        found = changes(run.workspace) if run.workspace else None
    except WorkspaceError:
        return None
    return None if found is None else [{"path": f.path, "status": f.status, "added": f.added, "removed": f.removed,
                                        "link": f.link, "flags": list(f.flags)} for f in found.files]


def first_turn(turns: list[RequestRecord]) -> RequestRecord | None:
    """The first request of the agent's own conversation: side requests (opencode's and Claude Code's
    title requests) come first but carry no tools, so their prompt is a small part of the largest."""
    if not turns:
        return None
    largest = max(t.prompt_tokens for t in turns)
    return next(t for t in turns if t.prompt_tokens * 2 >= largest)


def print_rows(launcher: Launcher, runs: list[HarnessRun]) -> None:
    print(f"{'agent':<16} {'status':<8} {'exit':>4} {'done':<4} {'turns':>5} {'first turn':>10}  "
          f"{'computed per turn':<28} answer")
    for run in runs:
        turns = launcher.turns(run.name)
        first = first_turn(turns)
        shown = "-" if first is None else f"{first.seconds:.1f} s"
        print(f"{run.name:<16} {run.status:<8} {_or_dash(run.exit_code):>4} {'yes' if run.completed else 'no':<4} "
              f"{len(turns):>5} {shown:>10}  {_computed(turns):<28} {run.answer(120) or '-'}")
        if run.workspace is not None:
            print(f"{'':<16} {_summary(run)} in {run.workspace.folder} ({run.confinement}); review: "
                  f"swarm-panel agents diff {run.name}")
        if run.error:
            print(f"{'':<16} {run.error}")
        elif not run.completed and run.stderr.text.strip():
            print(f"{'':<16} stderr: {' '.join(run.stderr.text.split())[-300:]}")


def _summary(run: HarnessRun) -> str:
    try:
        return changes(run.workspace).summary() if run.workspace else "-"
    except WorkspaceError as exc:
        return str(exc)


def _or_dash(value: object) -> str:
    return "-" if value is None else str(value)


def _computed(turns: list[RequestRecord]) -> str:
    shown = ", ".join(str(t.computed_tokens) for t in turns[:SHOWN_TURNS])
    return (shown + f", … ({len(turns)})") if len(turns) > SHOWN_TURNS else (shown or "-")
