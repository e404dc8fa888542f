"""The fence around a launched harness: bubblewrap where it works, else Landlock where the kernel has it,
else none, said aloud with the reason (and then nothing is launched without the user's opt-in).

walls: what a launch may write and read, the fence chosen, the hidden folders and what is shown again from
them; installs: a harness's install and interpreter, what it needs shown. bwrap and landlock: each fence's
probe and command line. landlock_exec: the small program at the top of every fenced launch, which confines
the harness under Landlock (its files, TCP ports and scopes) and reaps below it (reaper: every process ends
with the harness); landlock_sys: the kernel's Landlock calls; lockdown: the prctl, capability, namespace and
mount calls; seccomp: the filter that keeps the harness from every Unix socket, applied by landlock_exec
or, inside bubblewrap, by its own step below the bridge; program: how landlock_exec is started. choose:
which fence runs launches here, and the command line it gives. guarantees: what the chosen fence holds on
this machine. network: what a fenced agent reaches (the endpoint; the internet through the proxy with the
opt-in), its relays; bridge: the small program inside bubblewrap's sandbox, its pid 1; proxy: the opt-in's
proxy, which refuses the host and private networks; splice: two streams joined.

May import the standard library only; no Qt, no other room of app.
"""
