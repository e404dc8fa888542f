"""The scheduler: plans a step from lane state (schedule) and folds the engine's result back (update).
Its parts: lanes, the KV budget, admission, the prefill budget, prefix planning, preemption, limits,
the step record. Imports runtime.core, policies and reuse; never an engine or llama_cpp.
"""
