"""The fence around a launched harness: bubblewrap where it works, else Landlock where the kernel has it,
else none, said aloud with the reason.

walls: what a launch may write and read, and the fence chosen. bwrap and landlock: each fence's probe and
command line; landlock_exec: the small program that applies a Landlock ruleset and becomes the harness.
choose: which fence runs launches here, and the command line it gives.
network: what a fenced agent reaches (the endpoint; the internet through proxy with the opt-in), its relays;
bridge: the small program inside bubblewrap's network namespace; landlock_net: Landlock's TCP rules; splice:
two streams joined.

May import the standard library and `landlock` only; no Qt, no other room of app.
"""
