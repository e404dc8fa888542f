"""Chat rendering and parsing: messages to a prompt, reasoning tags, tool calls per template family,
and a reply split into its parts. Imports nothing else of app.
"""
