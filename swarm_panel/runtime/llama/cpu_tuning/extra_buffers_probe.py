"""Whether this machine may use llama.cpp's extra buffer types (AMX, repacked CPU weights).

On some CPUs those buffers crash the process on the first decode or give wrong logits for every
sequence after the first in a batch. A segfault cannot be caught in-process, so a child process
loads the model both ways, decodes one multi-sequence batch and compares the logits. The verdict is
remembered per llama.cpp build, CPU and model file, so the probe runs once.

Run as `python -m swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe MODEL` it is that child: it prints one JSON line.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from swarm_panel.runtime.core.careful_write import write_file

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 120.0
# How a frozen app's executable is told to be the probe's child (see packaging/entry.py).
FROZEN_FLAG = "--extra-buffers-probe"
# Repacked kernels accumulate in another order, so logits differ a little; a wrong batch differs by units.
MAX_RELATIVE_GAP = 0.02
_PROMPTS = (b"The quick brown fox", b"def add(a, b):", b"Hello, my name is", b"1, 2, 3, 4,")


@dataclass(frozen=True, slots=True)
class ExtraBuffersDecision:
    enabled: bool
    # Why: the probe's verdict, or the user's setting.
    reason: str


def cache_file() -> Path:
    return platformdirs.user_cache_path("swarm-panel") / "extra-buffers.json"


def machine_key() -> str:
    """The llama.cpp build and the CPU: what decides whether the extra buffers work."""
    import llama_cpp

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [line for line in f if line.startswith(("model name", "flags"))][:2]
        cpu = "".join(lines) or cpu
    except OSError:
        pass
    system = llama_cpp.llama_print_system_info().decode(errors="replace")
    text = f"{llama_cpp.__version__}\n{system}\n{platform.machine()}\n{cpu}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def model_key(model_path: Path) -> str:
    stat = model_path.stat()
    return f"{model_path.resolve()}:{stat.st_size}:{int(stat.st_mtime)}"


def probe_command(model_path: Path) -> list[str]:
    if getattr(sys, "frozen", False):  # a PyInstaller bundle: its executable runs the probe itself
        return [sys.executable, FROZEN_FLAG, str(model_path)]
    return [sys.executable, "-m", "swarm_panel.runtime.llama.cpu_tuning.extra_buffers_probe", str(model_path)]


def decide_extra_buffers(
    model_path: str | os.PathLike[str],
    mode: str = "auto",
    *,
    cache_path: Path | None = None,
    command: list[str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ExtraBuffersDecision:
    """mode "on"/"off" is the user's word; "auto" asks the remembered probe, running it once if needed."""
    if mode == "on":
        return ExtraBuffersDecision(True, "on by setting")
    if mode == "off":
        return ExtraBuffersDecision(False, "off by setting")
    if mode != "auto":
        raise ValueError(f"extra_buffers must be 'auto', 'on' or 'off', got {mode!r}")
    path = Path(model_path)
    cache_path = cache_path or cache_file()
    machine, model = machine_key(), model_key(path)
    remembered = read_verdicts(cache_path).get(machine, {}).get(model)
    if remembered is not None:
        return ExtraBuffersDecision(bool(remembered["enabled"]), remembered["reason"] + " (remembered)")
    decision = _run_probe(command or probe_command(path), timeout_s)
    (log.info if decision.enabled else log.warning)("extra buffer types %s for %s: %s",
                                                     "on" if decision.enabled else "off", path.name, decision.reason)
    records = pruned_verdicts(read_verdicts(cache_path))
    records.setdefault(machine, {})[model] = {"enabled": decision.enabled, "reason": decision.reason}
    write_verdicts(cache_path, records)
    return decision


def pruned_verdicts(records: dict) -> dict:
    """The verdicts whose model file is still there unchanged: a key names a file's size and mtime, so
    a rewritten or deleted file's verdict would otherwise stay in the file forever."""
    kept = {}
    for machine, models in records.items():
        current = {key: verdict for key, verdict in models.items() if _names_current_file(key)}
        if current:
            kept[machine] = current
    return kept


def _names_current_file(key: str) -> bool:
    path, _, stamp = key.rpartition(":")
    path, _, size = path.rpartition(":")
    try:
        stat = Path(path).stat()
    except OSError:
        return False
    return f"{stat.st_size}:{int(stat.st_mtime)}" == f"{size}:{stamp}"


def _run_probe(command: list[str], timeout_s: float) -> ExtraBuffersDecision:
    env = dict(os.environ)
    # The child imports this package from wherever the parent found it.
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return ExtraBuffersDecision(False, f"probe did not finish in {timeout_s:.0f} s: off")
    except OSError as exc:
        return ExtraBuffersDecision(False, f"probe could not start ({exc}): off")
    if done.returncode < 0:
        return ExtraBuffersDecision(False, f"probe crashed with signal {-done.returncode}: off")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return ExtraBuffersDecision(False, f"probe failed (exit {done.returncode}: {last}): off")
    try:
        verdict = json.loads(done.stdout.strip().splitlines()[-1])
        gap = float(verdict["relative_gap"])
    except (IndexError, KeyError, TypeError, ValueError):
        return ExtraBuffersDecision(False, f"probe printed no verdict ({done.stdout[-200:]!r}): off")
    if not verdict.get("same_tokens") or gap > MAX_RELATIVE_GAP:
        return ExtraBuffersDecision(False, f"batched logits disagree with the plain path (gap {gap:.3g}): off")
    return ExtraBuffersDecision(True, f"probe passed (gap {gap:.2g}): on")


def read_verdicts(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_verdicts(path: Path, records: dict) -> bool:
    """Remembers `records`; False (one warning: the verdict serves this run only) where the folder cannot be written."""
    return write_file(path, json.dumps(records, indent=1), lost="probe verdicts will not be remembered")


def batch_logits(model_path: str, extra_buffers: bool) -> list[list[float]]:
    """The last-token logits of every probe prompt, all decoded in one multi-sequence batch."""
    import llama_cpp
    import numpy as np

    from swarm_panel.runtime.llama.model import ensure_backend

    ensure_backend()
    mparams = llama_cpp.llama_model_default_params()
    mparams.use_extra_bufts = extra_buffers
    # The extra buffers are the CPU's; a GPU build must not hide them by offloading every layer.
    mparams.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(os.fsencode(model_path), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {model_path}")
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_seq_max = 256, 128, len(_PROMPTS)
    cparams.kv_unified = True
    cparams.n_threads = cparams.n_threads_batch = 1
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    vocab = llama_cpp.llama_model_get_vocab(model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    batch = llama_cpp.llama_batch_init(128, 0, 1)
    try:
        ends = []
        for seq, text in enumerate(_PROMPTS):
            ids = (llama_cpp.llama_token * 32)()
            n = llama_cpp.llama_tokenize(vocab, text, len(text), ids, 32, True, False)
            for pos in range(n):
                i = batch.n_tokens
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = ids[pos], pos, 1
                batch.seq_id[i][0], batch.logits[i] = seq, pos == n - 1
                batch.n_tokens += 1
            ends.append(batch.n_tokens - 1)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        return [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,)).tolist()
                for i in ends]
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


def main(argv: list[str]) -> int:
    import numpy as np

    model_path = argv[0]
    plain = np.array(batch_logits(model_path, False))
    extra = np.array(batch_logits(model_path, True))
    scale = float(np.abs(plain).max()) or 1.0
    print(json.dumps({
        "relative_gap": float(np.abs(plain - extra).max()) / scale,
        "same_tokens": bool((plain.argmax(axis=1) == extra.argmax(axis=1)).all()),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
