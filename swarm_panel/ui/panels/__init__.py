"""The panel's boxes: scheduler controls, engine, KV cache, endpoint, swarm launcher, A/B run, agents
table and agent view. Imports toolkit, app and runtime.
"""
