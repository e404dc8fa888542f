"""Command-line flags made from Settings fields: a command picks the fields, the field gives the rest.

Two ways a command reads its flags:
- layered (serve, gateway, gui): a flag left out is absent from the parsed namespace, so
  `Settings(**given(args, names))` lets SWARM_PANEL_* variables and the config file fill it in;
  Settings checks the bounds and names the field in its error.
- standalone (bench): a flag left out takes the field's default (or the command's own, where the
  command documents why it differs) and the flag checks the bounds itself.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import SecretStr

from swarm_panel.app.settings.backends import BackendConfig, parse_backend
from swarm_panel.app.settings.fields import FieldSpec, field_spec

# Spellings older than this module that the README and scripts use; every other flag is the field's name.
SPELLINGS = {"admission_wait_s": "--admission-wait", "cors_origins": "--cors-origin", "backends": "--backend"}
METAVARS = {"backends": "[KIND=]URL"}
# How a flag's text becomes a field's value where the value type cannot be called on it.
_PARSERS: dict[type, Callable[[str], Any]] = {BackendConfig: parse_backend, SecretStr: str}


def flag_name(name: str) -> str:
    """The field's flag wherever a command does not spell it its own way."""
    return SPELLINGS.get(name) or "--" + name.replace("_", "-")


def add_settings_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup, names: Iterable[str], *,
                           layered: bool = True, spellings: Mapping[str, str] | None = None,
                           defaults: Mapping[str, Any] | None = None, notes: Mapping[str, str] | None = None) -> None:
    """One flag per named field. `spellings` renames a flag for this command, `defaults` gives a
    standalone command its own default, `notes` adds what the field means to this command."""
    spellings, defaults, notes = spellings or {}, defaults or {}, notes or {}
    for name in names:
        spec = field_spec(name)
        flag = spellings.get(name) or flag_name(name)
        default = defaults.get(name, argparse.SUPPRESS if layered else spec.default)
        shown = spec.default if layered else default
        options: dict[str, Any] = {"dest": name, "default": default, "help": _help(spec, shown, notes.get(name))}
        if spec.kind is bool and not spec.repeated:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = _parser(spec, check_bounds=not layered)
            if spec.choices is not None:
                options["choices"] = spec.choices
            if spec.repeated:
                options["action"] = "append"
            if name in METAVARS:
                options["metavar"] = METAVARS[name]
        parser.add_argument(flag, **options)


def given(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """The fields among `names` whose flags were given (a layered command's overrides)."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def _help(spec: FieldSpec, default: Any, note: str | None) -> str:
    facts = []
    if default is not None and default != [] and default is not argparse.SUPPRESS:
        facts.append(f"default {_shown(default)}")
    if _range(spec):
        facts.append(_range(spec))
    if spec.repeated:
        facts.append("repeatable")
    text = spec.help + (f"; {note}" if note else "")
    text += f" ({', '.join(facts)})" if facts else ""
    return text.replace("%", "%%")


def _range(spec: FieldSpec, words: bool = False) -> str:
    if spec.ge is not None and spec.le is not None:
        return f"within {_shown(spec.ge)} to {_shown(spec.le)}" if words else f"{_shown(spec.ge)}..{_shown(spec.le)}"
    if spec.ge is not None:
        return f"at least {_shown(spec.ge)}"
    return f"at most {_shown(spec.le)}" if spec.le is not None else ""


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _parser(spec: FieldSpec, *, check_bounds: bool) -> Callable[[str], Any]:
    convert = _PARSERS.get(spec.kind, spec.kind)

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except (TypeError, ValueError) as exc:
            # argparse would show only "invalid <type> value"; the reason is what the user needs.
            reason = f"expected {spec.kind.__name__}" if convert in (int, float) else str(exc)
            raise argparse.ArgumentTypeError(f"{text!r}: {reason}") from None
        if check_bounds and (spec.ge is not None and value < spec.ge or spec.le is not None and value > spec.le):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {_range(spec, words=True)}")
        return value

    parse.__name__ = spec.kind.__name__
    return parse
