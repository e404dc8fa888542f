"""The vocabulary every runtime room shares: requests, the scheduler's knobs, a step's record, the
engine contract, clocks, the step line t(B), and the two host stores the engine and the scheduler
share (recurrent-state checkpoints, parked sequences). Imports nothing of the project.
"""
