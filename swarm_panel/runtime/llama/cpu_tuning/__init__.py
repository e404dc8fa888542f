"""CPU-only tuning of the llama.cpp engine, behind one door.

The probes (extra buffer types, flash attention) run from app.service.engine_factory when the engine
is built, and only where the weights stay on the CPU; the engine itself uses the attention follower,
decode-call splitting and the thread governor (`followers`) while it serves on a CPU. Imports runtime.core
and the llama room's model (its backend); nothing outside the llama engine and its construction
imports it (a contract).
"""
