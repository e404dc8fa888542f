"""The fence around a launched harness: bubblewrap where it is installed and works, else none, said aloud.

May import the standard library only; no Qt, no other room of app.
"""
