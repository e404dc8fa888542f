"""The application layer: settings, the running service, the HTTP endpoint for agents, the fleet
gateway, load generators and the headless commands. No Qt: ui imports app, never the reverse.
"""
