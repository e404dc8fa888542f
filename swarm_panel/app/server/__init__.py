"""The server a user runs: every route on one FastAPI app, and uvicorn on 127.0.0.1 unless told
otherwise. Imports the protocol rooms and the endpoint core.
"""
