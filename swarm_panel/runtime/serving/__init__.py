"""The engine core and what it publishes: inbox, schedule, execute, update, publish in one module
(`engine_core`: EngineCore, the step; EngineThread, the core on its own thread), token ids to text
(`detokenize`), the KV layout's changes between steps (`relayout`), and the snapshot, metrics
windows and step account the panel and /metrics read (`metrics`). Imports core, scheduling and reuse's types; it
drives any Engine and knows no engine by name, no app and no HTTP.
"""
