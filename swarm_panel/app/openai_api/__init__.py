"""The OpenAI bodies (chat and completions, whole and streamed) and logprobs: the shapes the endpoint
core works in, and the Responses and Anthropic rooms translate into. Imports settings and runtime.core.
"""
