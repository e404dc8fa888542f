"""swarm-panel: a continuous-batching llama.cpp runtime, an agent-facing HTTP endpoint, and a desktop panel.

Three layers, imports pointing down only: ui (Qt) -> app (HTTP, settings, commands) -> runtime (the
engine and its scheduler, pure Python). The import-linter contracts in pyproject.toml keep them.
"""
