"""Anthropic's Messages API: its bodies and stream events, its routes, and its error shape (`errors`). Imports
endpoint and chat.
"""
