"""The live plots: occupancy, KV and tokens per second, the lane timeline and per-agent service.
Imports toolkit, app.service's step feed and runtime.
"""
