"""In-process swarms: request lengths and prompts, what real agents say, the closed loop that drives
an engine without a server, and the critical-path (coordinator and workers) workload.
"""
