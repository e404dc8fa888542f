"""The HTTP core every API shares: the engine client (`engine_client`: the loaded engine's facts, prompt
rendering, admission and submitting a request's choices), a run's outputs from the engine thread onto the
event loop and its log line (`chat_run`), what a request brings (`incoming`: its body, key and agent),
SSE, keep-alives and hang-ups (`streaming`), grammars (`constrained`), errors and the handlers that answer
them in each route's API shape (`errors`), and /metrics (`prom`). Imports service, chat, settings and runtime;
no API's room.
"""
