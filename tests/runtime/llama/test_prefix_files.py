"""Stored prefixes' files and their budgets, without a model: the disk budget removes the least recently
used files first, every model's together; the RAM budget holds, and what it pushes out comes back from disk.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from swarm_panel.runtime.reuse.saved_states import PrefixStore
from swarm_panel.runtime.reuse.stored_files import SUFFIX, PrefixFiles

STATE = 4096


def facts(model: str) -> dict:
    return {"model": model, "memory": "attention", "kv_type": "f16", "flash_attn": "off", "n_stream": 1}


def tokens(i: int) -> np.ndarray:
    return np.arange(100, dtype=np.int64) + 1000 * i


def state(i: int) -> ctypes.Array:
    return (ctypes.c_uint8 * STATE).from_buffer_copy(bytes([i]) * STATE)


def written(files: PrefixFiles, i: int) -> None:
    files.write(tokens(i), state(i))
    files.close()


def test_the_disk_budget_removes_the_least_recently_used_files_of_every_model(tmp_path):
    one = STATE + 2000
    a = PrefixFiles(tmp_path, facts("a"), disk_budget_bytes=3 * one)
    b = PrefixFiles(tmp_path, facts("b"), disk_budget_bytes=3 * one)
    written(a, 1)
    written(b, 2)
    written(a, 3)
    paths = sorted(tmp_path.glob("*/*" + SUFFIX), key=lambda p: p.stat().st_mtime_ns)
    # Oldest first by time written; then the first one is used, so the second becomes the oldest.
    for age, path in enumerate(paths):
        os.utime(path, ns=(age * 10**9, age * 10**9))
    a.touch(tokens(1))
    written(b, 4)
    assert [t[0] for t, _ in a.index()] == [3000, 1000]
    assert [t[0] for t, _ in b.index()] == [4000], "model b's older file went first"
    assert a.read(tokens(1))[:] == state(1)[:]


def test_a_state_larger_than_the_disk_budget_is_not_written(tmp_path):
    files = PrefixFiles(tmp_path, facts("a"), disk_budget_bytes=STATE)
    written(files, 1)
    assert files.index() == []


def test_the_ram_budget_holds_and_an_entry_pushed_out_comes_back_from_disk(tmp_path):
    files = PrefixFiles(tmp_path, facts("a"), disk_budget_bytes=1 << 20)
    store = PrefixStore(2 * STATE + STATE // 2, min_tokens=8, backing=files)
    for i in range(1, 4):
        store.put(tokens(i), state(i))
        assert store.num_bytes <= store.budget_bytes
    files.close()
    entries = list(store)
    assert len(entries) == 3 and [e.data is not None for e in entries] == [False, True, True]
    # The oldest is read back from its file; the least recently used in RAM makes way for it.
    assert store.state(entries[0])[:] == state(1)[:]
    assert [e.data is not None for e in entries] == [True, False, True] and store.num_bytes == 2 * STATE


def test_without_a_disk_an_entry_past_the_ram_budget_is_forgotten():
    store = PrefixStore(STATE, min_tokens=8)
    store.put(tokens(1), state(1))
    store.put(tokens(2), state(2))
    assert [e.tokens[0] for e in store] == [2000] and store.num_bytes == STATE
    assert not store.has(tokens(1)) and store.has(tokens(2))
    store.put(tokens(3)[:50], (ctypes.c_uint8 * (2 * STATE))())
    assert not store.has(tokens(3)[:50]), "a state larger than the budget is not kept"
