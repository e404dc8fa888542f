"""Remote engines the gateway fronts: one OpenAI-compatible server each (vLLM, llama-server, swarm-panel).

A backend is configured by URL, kind, an optional API key and a weight, in config.toml
(`[[backends]]` tables), SWARM_PANEL_BACKENDS (a JSON list) or `swarm-panel gateway --backend`.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

BackendKind = Literal["auto", "vllm", "llama-server", "swarm-panel"]
KINDS: tuple[str, ...] = ("auto", "vllm", "llama-server", "swarm-panel")


class BackendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(description="Base URL of the server, without /v1 (http://host:port)")
    kind: BackendKind = Field("auto", description="auto: told apart by the metric names its /metrics exports")
    api_key: SecretStr | None = Field(None, description="Bearer token the backend expects")
    weight: float = Field(1.0, gt=0, le=1000, description="Share of new agents, relative to the other backends")
    slots: int | None = Field(None, ge=1, le=100_000,
                              description="Concurrent sequences it runs; read from the backend where it says "
                                          "(llama-server /props, swarm-panel /metrics), needed for vLLM")
    name: str = Field("", description="Label in plots and metrics; default host:port")

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        if value.endswith("/v1"):
            value = value[:-3]
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"backend URL {value!r} is not an http(s) URL such as http://127.0.0.1:8001")
        return value

    @property
    def label(self) -> str:
        return self.name or urlsplit(self.url).netloc


# `NAME=VALUE` words after the URL in a backend line, and the BackendConfig field each one sets.
OPTIONS = {"key": "api_key", "weight": "weight", "slots": "slots", "name": "name"}


def parse_backend(text: str) -> BackendConfig:
    """`[KIND=]URL [key=K] [weight=W] [slots=N] [name=L]`, e.g. `vllm=http://gpu-box:8000 slots=64` or
    `http://127.0.0.1:8081`; raises ValueError with a message fit to show a user."""
    words = text.split()
    if not words:
        raise ValueError("a backend needs a URL such as http://127.0.0.1:8001")
    kind, sep, url = words[0].partition("=")
    fields = {"kind": kind, "url": url} if sep and kind in KINDS else {"url": words[0]}
    for word in words[1:]:
        option, sep, value = word.partition("=")
        if not sep or option not in OPTIONS:
            raise ValueError(f"{word!r} is not one of {', '.join(f'{o}=...' for o in OPTIONS)}")
        fields[OPTIONS[option]] = value
    try:
        return BackendConfig(**fields)
    except ValidationError as exc:
        raise ValueError("; ".join(_readable(error) for error in exc.errors())) from None


def _readable(error: dict) -> str:
    field = next((o for o, f in OPTIONS.items() if (f,) == tuple(error["loc"])), None)
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{field}: {message}" if field else message


def parse_backend_lines(text: str) -> list[BackendConfig]:
    """One backend a line (blank lines and lines starting with `#` skipped); the error names the line at fault."""
    backends = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            backends.append(parse_backend(line))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    if not backends:
        raise ValueError("list at least one backend, one [KIND=]URL a line, e.g. http://127.0.0.1:8001")
    return unique_labels(backends)


def format_backend(backend: BackendConfig) -> str:
    """The line parse_backend reads back as the same config."""
    words = [backend.url if backend.kind == "auto" else f"{backend.kind}={backend.url}"]
    if backend.api_key is not None:
        words.append(f"key={backend.api_key.get_secret_value()}")
    if backend.weight != 1.0:
        words.append(f"weight={backend.weight:g}")
    if backend.slots is not None:
        words.append(f"slots={backend.slots}")
    if backend.name:
        words.append(f"name={backend.name}")
    return " ".join(words)


def unique_labels(backends: list[BackendConfig]) -> list[BackendConfig]:
    """Refuses two backends with one label: figures and affinity are keyed by it."""
    seen: set[str] = set()
    for backend in backends:
        if backend.label in seen:
            raise ValueError(f"two backends are named {backend.label!r}; give one a distinct name")
        seen.add(backend.label)
    return backends
