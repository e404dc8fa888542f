"""Real coding-agent harnesses (Claude Code, Codex, opencode, Qwen Code, aider) launched against the
running service: what each one is and how to install it (kinds), the private config one launch runs
with (config), and the launched processes with their turns from the request log (launcher).

May import app.service, app.endpoint.wire, app.settings and runtime's core types; no Qt.
"""
