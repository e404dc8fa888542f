"""Anthropic's Messages API: its bodies and stream events, and its routes. Imports endpoint, chat,
openai_api.
"""
