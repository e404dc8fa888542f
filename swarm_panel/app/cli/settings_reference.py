"""docs/settings.md's table, generated from the Settings fields: `python -m swarm_panel.app.cli.settings_reference`
rewrites it, and a test holds the page to what this prints."""

from __future__ import annotations

import sys
from pathlib import Path

from swarm_panel.app.cli.gateway import GATEWAY_FIELDS, GATEWAY_SPELLINGS
from swarm_panel.app.settings.fields import FieldSpec, field_spec
from swarm_panel.app.settings.flags import flag_name
from swarm_panel.app.settings.schema import GATEWAY_ONLY_FIELDS, Settings

MARKER = "<!-- generated from swarm_panel.app.settings.schema.Settings; do not edit by hand -->"


def _flag(spec: FieldSpec) -> str:
    name = spec.name
    flag = GATEWAY_SPELLINGS.get(name) if name in GATEWAY_ONLY_FIELDS else None
    flag = flag or flag_name(name)
    if spec.kind is bool and not spec.repeated:
        return f"`{flag}` / `--no-{flag[2:]}`"
    if spec.choices is not None:
        flag += " " + "\\|".join(str(c) for c in spec.choices)
    text = f"`{flag}`"
    if spec.repeated:
        text += ", repeatable"
    if name in GATEWAY_ONLY_FIELDS and name in GATEWAY_FIELDS:
        text += " (gateway)"
    return text


def _default(value: object) -> str:
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def table() -> str:
    rows = ["| setting | flag | default | what it does |", "|---|---|---|---|"]
    for name in Settings.model_fields:
        spec = field_spec(name)
        rows.append(f"| `{name}` | {_flag(spec)} | {_default(spec.default)} | {spec.help.replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def page(current: str) -> str:
    """The page with everything after the marker replaced by the table."""
    head, sep, _ = current.partition(MARKER)
    if not sep:
        raise ValueError(f"the page has no line {MARKER!r} to put the table under")
    return f"{head}{MARKER}\n{table()}"


def main(path: str = "docs/settings.md") -> int:
    target = Path(path)
    target.write_text(page(target.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
