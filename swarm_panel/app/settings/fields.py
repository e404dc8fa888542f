"""What one Settings field offers a front end (flags, the engine box): its type, choices, bounds, default, help.

Read from the field's declaration in app.settings.schema, so no front end restates any of them.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

import annotated_types

from swarm_panel.app.settings.schema import Settings


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    kind: type  # the value type, past Optional, list and Literal
    help: str
    default: Any
    choices: tuple[Any, ...] | None = None
    ge: float | None = None
    le: float | None = None
    repeated: bool = False  # a list: one value per use of the flag

    @property
    def env_var(self) -> str:
        return f"{Settings.model_config['env_prefix']}{self.name.upper()}"


def field_spec(name: str) -> FieldSpec:
    info = Settings.model_fields[name]
    kind, repeated, choices = _unwrap(info.annotation)
    bounds = {type(m): m for m in info.metadata}
    ge = bounds.get(annotated_types.Ge)
    le = bounds.get(annotated_types.Le)
    default = info.get_default(call_default_factory=True)
    return FieldSpec(name=name, kind=kind, help=info.description or "", default=default, choices=choices,
                     ge=ge.ge if ge else None, le=le.le if le else None, repeated=repeated)


def choices(name: str) -> tuple[Any, ...]:
    spec = field_spec(name)
    if spec.choices is None:
        raise TypeError(f"Settings.{name} is not a choice between listed values")
    return spec.choices


def _unwrap(annotation: Any) -> tuple[type, bool, tuple[Any, ...] | None]:
    """(value type, repeated, choices) of `X`, `X | None`, `list[X]` or `Literal[...]`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unwrap(inner)
    if origin is list:
        kind, _, options = _unwrap(typing.get_args(annotation)[0])
        return kind, True, options
    if origin is Literal:
        options = typing.get_args(annotation)
        return type(options[0]), False, options
    return annotation, False, None
