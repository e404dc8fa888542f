"""The article's card as a cost model: an engine whose step time follows a profile (the RX 9070 XT's,
with a source for every number). Imports runtime.core only.
"""
