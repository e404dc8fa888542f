"""Load generators: swarms of agents over HTTP, the critical-path swarm, chaos rounds, and the local
swarm that drives an engine thread without a server.
"""
