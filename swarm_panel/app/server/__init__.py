"""The server a user runs: the app assembled from each API's router (`app`), its own routes (`control`:
the scheduler, /metrics, /health), and uvicorn on 127.0.0.1 unless told otherwise (`http_server`).
Imports the API rooms and the endpoint core.
"""
