"""OpenAI's Responses API: its bodies and stream events, its tools as the template sees them, the
stored responses `previous_response_id` follows, and its routes. Imports endpoint, chat, openai_api.
"""
