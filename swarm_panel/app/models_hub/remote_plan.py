"""The shape of a hub model before its download: its GGUF header and tensor index read with HTTP Range
requests, megabytes of gigabytes, fed to the same planning the local file gets."""

from __future__ import annotations

import dataclasses
import logging

from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.utils import build_hf_headers, get_session

from swarm_panel.app.models_hub.choice import parse, pick
from swarm_panel.app.models_hub.fetch import REVISION, from_cache, hub_errors
from swarm_panel.runtime.planning.header_prefix import shape_from_prefix
from swarm_panel.runtime.planning.shape import ModelShape, read_shape

log = logging.getLogger(__name__)
FIRST_RANGE = 1 << 20


def remote_shape(name: str) -> ModelShape:
    model = parse(name)
    cached = from_cache(model)
    if cached is not None:
        return read_shape(cached)
    with hub_errors(model):
        info = HfApi().model_info(model.repo, revision=REVISION)
        filename = pick([s.rfilename for s in info.siblings or ()], model.quant, model.repo)[0]
        meta = get_hf_file_metadata(hf_hub_url(model.repo, filename, revision=info.sha or REVISION))
        url, size = meta.location, meta.size or 0
        prefix = b""
        want = min(FIRST_RANGE, size) if size else FIRST_RANGE
        while True:
            prefix += _range(url, len(prefix), want - 1)
            shape, want = shape_from_prefix(prefix, size, filename)
            if shape is not None:
                log.info("%s: planned from the first %d bytes of %d", model, len(prefix), size)
                # The plan names where the weights come from, not the scratch file the header sat in.
                return dataclasses.replace(shape, source=f"{model.repo}/{filename} on {constants.ENDPOINT}")


def _range(url: str, start: int, end: int) -> bytes:
    response = get_session().get(url, headers={**build_hf_headers(), "Range": f"bytes={start}-{end}"},
                                 follow_redirects=True)
    response.raise_for_status()
    # A server that ignores Range sends the whole file: keep only what was asked.
    body = response.content
    return body[start:end + 1] if response.status_code == 200 else body
