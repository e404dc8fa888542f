"""The scheduler: plans a step from lane state (schedule) and folds the engine's result back (update).
Its parts: the lanes with the KV budget, preemption and admission into them (a request's limits,
settled once; waiting requests into lanes) in `lanes`; a step's rows and their folding back (`step`);
prefix planning (`prefix_planner`). Imports runtime.core, policies and reuse; never an engine or llama_cpp.
"""
