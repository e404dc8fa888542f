"""Scheduling policies: the Policy contract, naive static, shrinking static, continuous, and the
agent-aware orders (fair share by VTC, least attained service, priority), the read-only view they
decide from with the agents' service it reads, and the registry every list of choices derives from. Imports runtime.core only.
"""
