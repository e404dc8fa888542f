"""Every setting of the server and the panel: flags, SWARM_PANEL_* variables, and a TOML file.

Precedence, highest first: explicit overrides (command-line flags), environment variables, the
config file in the user's config folder, the defaults here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tomllib
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from swarm_panel.app.settings.backends import BackendConfig
from swarm_panel.runtime.core.careful_write import set_aside
from swarm_panel.runtime.core.config import MAX_LANES, SPLIT_KV_MIN_LANE_TOKENS, SchedulerConfig
from swarm_panel.runtime.modeled.profiles import PROFILES
from swarm_panel.runtime.policies.registry import POLICY_NAMES
from swarm_panel.runtime.scheduling.lanes import DEFAULT_MAX_TOKENS

log = logging.getLogger(__name__)

APP_NAME = "swarm-panel"


def config_file() -> Path:
    override = os.environ.get("SWARM_PANEL_CONFIG_FILE")
    return Path(override) if override else platformdirs.user_config_path(APP_NAME) / "config.toml"


class _ConfigFile(TomlConfigSettingsSource):
    """The config file, where a file that is not TOML is set aside (kept, renamed) with one warning naming where,
    and the defaults serve: a damaged file must not keep the server or the panel from starting. A file that parses
    but holds a wrong value is still refused, by the value's name."""

    def _read_file(self, file_path) -> dict:
        try:
            return super()._read_file(file_path)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            set_aside(file_path, f"not TOML: {exc}")
        except OSError as exc:
            log.warning("cannot read the config file %s (%s): the defaults are used", file_path, exc)
        return {}


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SWARM_PANEL_", extra="ignore", validate_default=True)

    host: str = Field("127.0.0.1", description="Address to listen on; anything but loopback needs an API key")
    port: int = Field(8000, ge=0, le=65535, description="TCP port of the OpenAI-compatible endpoint (0 = any free)")
    api_key: SecretStr | None = Field(None, description="Bearer token clients must send; none means no check")
    insecure_public_without_api_key: bool = Field(
        False, description="Allow a non-loopback host without an API key (anyone on the network may use it)"
    )
    cors_origins: list[str] = Field(default_factory=list, description="Origins allowed by CORS; none by default")

    engine: Literal["llama", "modeled"] = Field(
        "llama", description="llama: llama.cpp on a GGUF (the bundled model if none is given); modeled: the cost model"
    )
    model: Path | None = Field(
        None, description="GGUF file for the llama engine; none means the bundled SmolLM2-135M-Instruct, "
        "'demo' the random-weight demo model")
    models_dir: Path | None = Field(
        None, description="A folder of GGUF files the panel's engine box lists beside those found in the hub cache, "
        "llama.cpp's cache and LM Studio's models folder")
    profile: Literal[tuple(PROFILES)] = Field(
        next(iter(PROFILES)), description="Card and model the modeled engine imitates")

    policy: Literal[POLICY_NAMES] = Field("continuous", description="Scheduling policy")
    num_lanes: int = Field(8, ge=1, le=MAX_LANES, description="Most sequences in one step (lanes)")
    prefill_chunk: int = Field(256, ge=1, le=65536, description="Prompt tokens one step carries beside its decodes "
                                                                "(on a CPU, fewer for a long prompt deep in)")
    kv_budget: int | None = Field(None, ge=1, description="KV tokens the scheduler may use; none means all")
    admission_wait_s: float = Field(0.05, ge=0, le=60, description="How long a static batch waits to fill up")
    prefix_cache: bool = Field(True, description="Keep finished sequences' KV to reuse shared prompt prefixes")

    n_ctx: int = Field(32768, ge=256, le=1 << 20, description="llama.cpp context size: every lane's KV together")
    n_batch: int = Field(512, ge=32, le=65536, description="Most tokens one llama.cpp step may carry")
    n_gpu_layers: int = Field(-1, ge=-1, le=1000, description="Layers offloaded to the GPU (-1 = all, 0 = none); a "
                              "llama.cpp built without a GPU backend runs every layer on the CPU whatever this says")
    flash_attn: Literal["auto", "on", "off"] = Field(
        "auto", description="llama.cpp flash attention; auto, on a CPU-only run with an F16 cache, is whichever "
        "made 8-lane decode steps faster when timed once on this CPU and model (its CPU kernel is several times "
        "slower on some CPUs and faster on others; remembered), and llama.cpp's choice elsewhere")
    kv_type: Literal["f16", "q8_0", "q4_0"] = Field(
        "f16", description="KV cache element type: llama.cpp's cache, or the modeled card's (what its KV holds "
        "and each step reads)")
    threads: int | None = Field(
        None, ge=1, le=1024, description="CPU threads for llama.cpp; none means every core on a CPU-only run "
        "(every core but one in the desktop panel, whose painting would stall llama.cpp's barriers), less "
        "the cores other processes are using at the time, and llama.cpp's own default with GPU offload")
    checkpoint_budget_mb: int = Field(
        1024, ge=0, le=1 << 20, description="Memory for recurrent-state checkpoints of hybrid models (Qwen3.5), "
        "which let a resent conversation resume instead of recomputing; 0 turns prefix reuse off for them")
    extra_buffers: Literal["auto", "on", "off"] = Field(
        "auto", description="llama.cpp's extra buffer types (AMX, repacked weights), which crash or miscompute on "
        "some CPUs: auto decides by a one-time probe in a child process, remembered per build, CPU and model")
    backend_sampling: Literal["auto", "on", "off"] = Field(
        "auto", description="Sample inside llama.cpp's compute graph (its backend samplers), so a step brings back "
        "each row's token instead of the vocabulary's logits; requests with a grammar or logprobs are sampled on the "
        "host either way. auto: on with GPU offload; off on a CPU, where llama.cpp's in-graph sampling made the "
        "CPU stand-in's 64-lane decode step 1.6x slower (docs/gpu.md)")
    park_budget_mb: int = Field(
        2048, ge=0, le=1 << 20, description="Host memory where finished sequences kept for prefix reuse wait "
        "(parked): under unified KV instead of cells every live sequence's attention walks, under split KV once a "
        "new lane needs their stream (more agents than lanes); 0 keeps them in the KV only")
    prefix_store: bool = Field(
        True, description="Keep the whole state of a long shared head (a coding harness's system prompt and tool "
        "list, the same in each of its sessions) in memory and on disk, in the user's cache folder, so a later "
        "session, or the next server run on the same model file, starts after it instead of computing it")
    prefix_store_ram_mb: int = Field(
        2048, ge=0, le=1 << 20, description="Memory for stored heads' states, the least recently used going first "
        "(those on disk are read back when used); a 21k-token head is about 0.5 GB on SmolLM2-135M, 0.7 GB on "
        "Qwen3.5-9B, with an F16 KV")
    prefix_store_disk_mb: int = Field(
        8192, ge=0, le=1 << 24, description="Disk for stored heads, every model's together, the least recently "
        "used going first; 0 keeps them in memory only, for this run")
    prefix_store_min_tokens: int = Field(
        1024, ge=8, le=1 << 20, description="Shortest head stored: a shorter one computes in seconds on a CPU, "
        "while each stored one costs memory, disk and a comparison with every new prompt")
    kv_unified: bool | None = Field(
        None, description="One KV pool every lane may fill, sharing a common prefix's cells; off gives each lane its "
        "own n_ctx/num_lanes share (llama-server's layout), whose attention walks only its own cells; none chooses: "
        f"split whenever each lane's share is at least {SPLIT_KV_MIN_LANE_TOKENS} tokens, turning unified (live "
        "requests recompute) the first time one request needs more than a lane's share")
    kv_narrow_after_s: float = Field(
        300, ge=0, le=86_400, description="A default split KV that turned unified for a long request turns split "
        "again once no request has needed more than a lane's share for this long (live requests recompute, cached "
        "prefixes go); 0 keeps it unified until the model loads again")

    max_waiting: int = Field(256, ge=1, le=100_000, description="Queued requests beyond which the server answers 503")
    max_body_bytes: int = Field(4 << 20, ge=1024, le=1 << 30, description="Largest request body accepted")
    responses_store_mb: float = Field(
        64, ge=0, le=1 << 16, description="Memory for stored /v1/responses responses, which previous_response_id "
        "follows; the least recently used go past it, and 0 stores none")
    stream_heartbeat_s: float = Field(
        15, ge=0, le=3600, description="A streamed reply quiet this long (a long prompt computing or queued) gets a "
        "keep-alive, so agents' idle watchdogs do not hang up and resend: an SSE comment, a ping event on "
        "/v1/messages, response.in_progress on /v1/responses; 0 sends none")
    default_max_tokens: int = Field(
        DEFAULT_MAX_TOKENS, ge=1, le=1 << 20, description="Output tokens for a request that names no limit (Codex, "
        "aider); on every endpoint a limit past what the context has left after the prompt is cut to that, "
        "never refused")
    default_temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="Temperature for a request that names none (Claude Code, Codex, opencode "
        "and Qwen Code send none); unset: the model's recommended (its GGUF's general.sampling.temp, or the bundled "
        "SmolLM2's card: 0.2), else the API's 1.0")
    default_top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="top_p for a request that names none; unset: the model's recommended "
        "(general.sampling.top_p, or SmolLM2's card: 0.9), else 1.0")
    max_prompt_chars: int = Field(1 << 20, ge=16, le=1 << 28, description="Longest prompt text accepted, in characters")

    backends: list[BackendConfig] = Field(
        default_factory=list, description="Remote engines the gateway fronts: [KIND=]URL [key=K] [weight=W] [slots=N] "
        "[name=L], e.g. vllm=http://gpu-box:8000 ([[backends]] tables of url, kind, api_key, weight in config.toml)")
    gateway_policy: Literal["first-come", "fewest-in-flight"] = Field(
        "first-come", description="Gateway admission: first come first served, or the agent with the fewest "
        "requests in flight first")
    gateway_routing: Literal["affinity", "round-robin"] = Field(
        "affinity", description="Gateway routing: keep an agent and its system prompt on one backend, or rotate")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _ConfigFile(settings_cls, toml_file=config_file())

    def scheduler_config(self, running: SchedulerConfig | None = None) -> SchedulerConfig:
        """The scheduler these settings ask for; `running` lends what Settings does not hold (agent maps)."""
        return dataclasses.replace(running or SchedulerConfig(), **{f: getattr(self, f) for f in SCHEDULER_FIELDS})

    def with_scheduler(self, config: SchedulerConfig) -> Settings:
        """These settings with the knobs a running scheduler holds now (changed live by the panel or the API)."""
        return Settings(**(self.model_dump() | scheduler_values(config)))

    @property
    def is_loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127.")


# The fields only the gateway reads (`swarm-panel gateway`, the panel's fleet mode).
GATEWAY_ONLY_FIELDS = ("backends", "gateway_policy", "gateway_routing")
# The scheduler knobs Settings holds: the one list every conversion between the two goes through.
SCHEDULER_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(SchedulerConfig) if f.name in Settings.model_fields)


def scheduler_values(config: SchedulerConfig) -> dict[str, object]:
    """The Settings fields a scheduler config holds, by name (to remember, export or reload them)."""
    return {f: getattr(config, f) for f in SCHEDULER_FIELDS}
