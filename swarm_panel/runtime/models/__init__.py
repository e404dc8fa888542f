"""The model files: the bundled SmolLM2 (and its F16 copy for CPUs), and the random-weight llama and
qwen35 demo models the project writes itself. Imports runtime.llama for llama.cpp's quantizer.
"""
