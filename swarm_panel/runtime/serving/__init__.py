"""The serving loop: one step (schedule, run, text, fold back, deliver), the engine on its own thread,
token ids to text, and the metrics windows the panel and /metrics read. Imports core and scheduling;
it drives any Engine and knows no engine by name.
"""
