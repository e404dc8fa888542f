"""What a model needs in memory before it is loaded: its shape read from the GGUF header, and a
plan of weights, KV, recurrent states, compute buffers and host-RAM budgets for a number of lanes
at a context and KV type, checked against a device's memory both ways (lanes at a context, context
at a number of lanes). Imports runtime.core only, and the `gguf` reader; never llama_cpp, so the
plan runs before llama.cpp sees the file.
"""
