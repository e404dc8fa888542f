"""The runtime: scheduler, policies, engines and the serving loop; no Qt, no HTTP.

Rooms, from the bottom: core (the vocabulary every room shares), llama and modeled (the engines),
models (the model files), policies and reuse (what the scheduler decides with), scheduling (the
scheduler), serving (the engine on its thread), workloads (in-process swarms).
"""
