"""The fleet gateway: one endpoint in front of several backends (vLLM, llama-server, swarm-panel),
admitting agents' requests in an order of its own and routing them by cache affinity. It relays
requests untouched and imports nothing of the runtime (a contract).
"""
