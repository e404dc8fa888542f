"""Prefix reuse, in its tiers: finished sequences resident in KV cells or parked in host RAM, indexed
for the next turn (`prefix_cache`), the parked sequences' bytes (`parked`), long shared heads stored
across runs (`stored`) and their files on disk (`stored_files`); where a hybrid model's sequence may
resume (`resume`); when an agent is likely back lives with the index (`prefix_cache`). Imports runtime.core only, and
nothing of llama.cpp: the llama engine and the scheduler both build on it.
"""
