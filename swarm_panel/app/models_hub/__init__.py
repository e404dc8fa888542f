"""Models from the Hugging Face hub by name (`hf:ORG/REPO[:QUANT]`): which file a quant tag names, the hub
cache looked at first, downloads through huggingface_hub checked against the hub's sha256.

Imports huggingface_hub and the standard library only; nothing of app above it, no Qt.
"""
