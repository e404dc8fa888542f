"""Each launched agent's own workspace: a git worktree on its own branch (or a copy of a folder that is no
repository), its changes against its base, and landing them (apply) or dropping them (discard). Records live
under the project's data folder, so a crash leaves every workspace listed and recoverable.

May import runtime.core (careful_write) and the standard library; no Qt, no other room of app.
"""
