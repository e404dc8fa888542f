"""The long-running commands (serve, the panel) in a child process of their own, so that a crash inside
native code (llama.cpp, a GPU driver), which no Python handler can catch, is reported instead of silent:
the signal, the step in flight (runtime.core.black_box) and the Python stacks faulthandler printed.
Imports runtime.core only.
"""
