"""Prefix reuse: finished sequences kept for the next turn (prefix_cache) and where a hybrid model's
sequence may resume (resume). Imports runtime.core only.
"""
