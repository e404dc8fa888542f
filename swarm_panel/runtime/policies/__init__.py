"""Scheduling policies: `policy` holds the Policy contract, the read-only view a policy decides from with the
agents' service it reads, and the seed's batching policies (naive static, shrinking static, continuous); the
agent-aware orders (fair share by VTC, least attained service, priority) are one file each over `ranked`, and
the registry lists them all for every list of choices. Imports runtime.core only.
"""
