"""Each launched agent's own workspace: a git worktree on its own branch (or a copy of a folder that is no
repository), the snapshot of its tree taken when it ended, its changes against its base with what review
flags in them, and landing the snapshot (apply) or dropping it all (discard). The host reads an agent's tree
only as data, through a git folder of its own beside the tree (reader): nothing the agent wrote runs.
Records live under the project's data folder, so a crash leaves every workspace listed and recoverable.

May import runtime.core (careful_write) and the standard library; no Qt, no other room of app.
"""
