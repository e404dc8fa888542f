"""What a hub repository offers before anything is downloaded: each GGUF a user may pick, with its size."""

from __future__ import annotations

from huggingface_hub import HfApi

from swarm_panel.app.models_hub.choice import HubModel, parse, quant_sizes
from swarm_panel.app.models_hub.fetch import REVISION, hub_errors


def repo_models(repo: str) -> dict[str, int]:
    """`ORG/REPO`'s models by the name `hf:ORG/REPO:NAME` picks (a split set once), with their sizes in bytes."""
    model: HubModel = parse(repo)
    with hub_errors(model):
        info = HfApi().model_info(model.repo, revision=REVISION, files_metadata=True)
    models = quant_sizes({s.rfilename: s.size or 0 for s in info.siblings or ()})
    if not models:
        raise ValueError(f"{model.repo} holds no GGUF file; swarm-panel loads GGUF models only")
    return models
