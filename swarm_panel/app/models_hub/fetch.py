"""A hub model's local path: from the hub cache with no request when it is there, else downloaded through
huggingface_hub (its HF_HOME, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE; a stopped download's partial blob
resumed by the next), then checked
against the sha256 the hub's LFS metadata gives."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from huggingface_hub import HfApi, constants, hf_hub_download, hf_hub_url
from huggingface_hub.utils import build_hf_headers
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get, repo_folder_name

from swarm_panel.app.models_hub.choice import HubModel, parse, pick

try:  # huggingface_hub 2 speaks through httpx2, 1 through httpx: its connection failures come from that one
    from httpx2 import TransportError
except ImportError:
    from httpx import TransportError

log = logging.getLogger(__name__)
REVISION = "main"
_CHUNK = 1 << 20

Say = Callable[[str], None]


def cached_files(repo: str, revision: str = REVISION) -> tuple[Path, list[str]] | None:
    """The snapshot folder of the revision last fetched and the files in it, read from disk only."""
    folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")
    ref = folder / "refs" / revision
    if not ref.is_file():
        return None
    snapshot = folder / "snapshots" / ref.read_text().strip()
    if not snapshot.is_dir():
        return None
    return snapshot, sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())


def from_cache(model: HubModel) -> Path | None:
    found = cached_files(model.repo)
    if found is None:
        return None
    snapshot, files = found
    try:
        chosen = pick(files, model.quant, model.repo)
    except ValueError:
        return None
    # A split set counts only whole: a missing part means the download is not finished.
    if not all((snapshot / f).is_file() for f in chosen):
        return None
    return snapshot / chosen[0]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


@contextmanager
def hub_errors(model: HubModel) -> Iterator[None]:
    """The hub's failures as one clear ValueError each."""
    try:
        yield
    except GatedRepoError as exc:
        raise ValueError(f"{model.repo} is gated: accept its terms on the hub, then set HF_TOKEN "
                         "(or run `hf auth login`)") from exc
    except RepositoryNotFoundError as exc:
        raise ValueError(f"{model.repo}: no such repository on {constants.ENDPOINT} "
                         "(or it is private: set HF_TOKEN)") from exc
    except RevisionNotFoundError as exc:
        raise ValueError(f"{model.repo} has no revision {REVISION!r}") from exc
    except HfHubHTTPError as exc:
        raise ValueError(f"{model}: the hub answered {exc}") from exc
    except TransportError as exc:
        raise ValueError(f"{model}: cannot reach {constants.ENDPOINT} ({exc}) and it is not in the hub cache; "
                         "the next start resumes any partial download") from exc


def fetch(name: str, say: Say = log.info, tqdm_class: type | None = None) -> Path:
    """The path of the GGUF `hf:ORG/REPO[:QUANT]` names, the first part of a split set."""
    model = parse(name)
    cached = from_cache(model)
    if cached is not None:
        log.debug("%s from the hub cache: %s", model, cached)
        return cached
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"{model} is not in the hub cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set")
    with hub_errors(model):
        info = HfApi().model_info(model.repo, revision=REVISION, files_metadata=True)
    siblings = {s.rfilename: s for s in info.siblings or ()}
    chosen = pick(list(siblings), model.quant, model.repo)
    paths = [_download(model, info.sha, siblings[f], say, tqdm_class) for f in chosen]
    return paths[0]


def _download(model: HubModel, commit: str | None, sibling, say: Say, tqdm_class: type | None) -> Path:
    filename = sibling.rfilename
    size = sibling.size or 0
    folder = Path(constants.HF_HUB_CACHE)
    folder.mkdir(parents=True, exist_ok=True)
    free = _free_bytes(folder)
    say(f"downloading {model.repo}/{filename} ({size / 2**30:.2f} GiB) into {folder}")
    sha = sibling.lfs.sha256 if sibling.lfs is not None else None
    try:
        with hub_errors(model):
            if sha:
                _fetch_blob(model.repo, filename, commit, sha, size, tqdm_class)
            # Finds the blob in place and links it into the snapshot (or downloads a file with no LFS sha256).
            path = Path(hf_hub_download(model.repo, filename, revision=commit or REVISION, tqdm_class=tqdm_class))
    except OSError as exc:
        if getattr(exc, "errno", None) == 28:  # ENOSPC
            raise ValueError(f"the disk filled while downloading {filename}: it needs {size / 2**30:.2f} GiB, "
                             f"{free / 2**30:.2f} GiB were free in {folder}; the partial file is kept, and the "
                             "next start resumes it") from exc
        raise ValueError(f"{model}: the download of {filename} failed ({exc}); the next start resumes it") from exc
    if not sha:
        _verify(path, sibling)
    _point_ref(model.repo, commit)
    return path


def _fetch_blob(repo: str, filename: str, commit: str | None, sha: str, size: int, tqdm_class: type | None) -> None:
    """Puts the file's blob into the hub cache, checked, continuing a partial one a stopped download left.

    huggingface_hub (1 and later) removes its own partial file when a download stops, so a cancelled or
    interrupted one would start again at its first byte: the blob is downloaded here, by huggingface_hub's
    http_get, into `<sha256>.partial` beside it, which stays until it is whole."""
    blobs = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model") / "blobs"
    blob = blobs / sha
    if blob.exists():
        return
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blobs / f"{sha}.partial"
    have = partial.stat().st_size if partial.exists() else 0
    if have > size:
        partial.unlink()
        have = 0
    if have < size:
        if have:
            log.info("resuming %s/%s at %d of %d bytes", repo, filename, have, size)
        with open(partial, "ab") as f:
            http_get(hf_hub_url(repo, filename, revision=commit or REVISION), f, resume_size=have,
                     headers=build_hf_headers(), expected_size=size, displayed_filename=filename,
                     tqdm_class=tqdm_class)
    got = sha256_of(partial)
    if got != sha:
        partial.unlink(missing_ok=True)
        raise ValueError(f"{filename}: sha256 {got} is not the hub's {sha}; the file is removed, "
                         "start again to download it anew")
    os.replace(partial, blob)


def _verify(path: Path, sibling) -> None:
    expected = sibling.lfs.sha256 if sibling.lfs is not None else None
    if not expected:
        return
    got = sha256_of(path)
    if got != expected:
        blob = path.resolve()
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
        raise ValueError(f"{sibling.rfilename}: sha256 {got} is not the hub's {expected}; the file is removed, "
                         "start again to download it anew")


def _point_ref(repo: str, commit: str | None) -> None:
    """hf_hub_download given a commit writes no ref; refs/main makes the next start find it offline."""
    if not commit:
        return
    ref = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model") / "refs" / REVISION
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)


def _free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize
