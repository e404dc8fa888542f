"""The HTTP core every API shares: the engine client (`engine_client`: the loaded engine's facts, prompt
rendering, admission and submitting a request's choices), a run's outputs from the engine thread onto the
event loop and its log line (`chat_run`), the HTTP edge (`wire`: what a request brings, its body, key and
agent, and SSE, keep-alives and hang-ups), grammars (`constrained`), errors and the handlers that answer them
in each route's API shape (`errors`), and /metrics (`prom`). Imports service, chat, settings and runtime; no
API's room.
"""
