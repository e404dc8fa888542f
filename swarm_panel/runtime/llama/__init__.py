"""The llama.cpp engine: one mixed llama_batch per step, its memory calls by model kind, sampling,
vocabulary and model facts. The only room that imports llama_cpp, with models and cpu_tuning below it.
"""
