"""The scheduler: plans a step from lane state (schedule) and folds the engine's result back (update).
Its parts: admission (a request's limits, settled once; waiting requests into lanes), lanes with the
KV budget and preemption, a step's rows (`step_rows`) and their folding back (`step_fold`), prefix
planning. Imports runtime.core, policies and reuse; never an engine or llama_cpp.
"""
