"""A chat request and its text: the request bodies every chat-shaped API translates into (`request`,
OpenAI's Chat Completions and Completions bodies), messages to a prompt, reasoning tags, tool calls per
template family, and a reply split into its parts. Imports settings and runtime.core only.
"""
