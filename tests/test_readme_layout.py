"""The README's layout section names every module of the three packages and every benchmark, and only files that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runtime", "app", "ui", "benchmarks")


def _layout_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Layout")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def test_every_module_has_its_line_in_the_layout_section():
    named = set(re.findall(r"`([a-z_0-9]+\.py)`", _layout_section()))
    modules = {p.name for package in PACKAGES for p in (ROOT / package).glob("*.py") if p.name != "__init__.py"}
    assert sorted(modules - named) == [], "modules the README's layout section does not name"
    assert sorted(named - modules) == [], "files the README's layout section names that do not exist"
