"""A chat request and its text: the request bodies every chat-shaped API translates into, their messages as
the chat template receives them and a reply split into its parts as it streams (`request`), reasoning tags,
and tool calls per template family. Imports settings and runtime.core only.
"""
