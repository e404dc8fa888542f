"""OpenAI's API: its routes (`routes`: chat and completions, models), response bodies and logprobs
(`models`), stream writer (`stream`) and error shape (`errors`); the request bodies it shares with every
chat-shaped API are app.chat.request's. Imports the endpoint core, chat, settings and runtime.core.
"""
