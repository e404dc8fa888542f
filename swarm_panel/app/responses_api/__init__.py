"""OpenAI's Responses API: its bodies and stream events, its tools as the template sees them, the
stored responses `previous_response_id` follows, its routes, and how its stream ends when it fails (`errors`).
Imports endpoint and chat.
"""
