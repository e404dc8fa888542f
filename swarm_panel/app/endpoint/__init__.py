"""The HTTP core every protocol shares: submitting a request's choices to the engine thread, its
outputs on the event loop, SSE streams and hang-ups, grammars, errors in each API's shape, and
/metrics. Imports openai_api, chat, service, settings and runtime.
"""
