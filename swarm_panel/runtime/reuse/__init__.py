"""Prefix reuse, in its tiers: finished sequences resident in KV cells or parked in host RAM, indexed
for the next turn, with when an agent is likely back and where a hybrid model's sequence may resume
(`prefix_cache`); the tiers out of KV cells, the parked sequences' bytes and long shared heads stored
across runs (`saved_states`), and the stored heads' files on disk (`stored_files`). Imports
runtime.core only, and nothing of llama.cpp: the llama engine and the scheduler both build on it.
"""
