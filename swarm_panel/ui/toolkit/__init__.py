"""What every Qt room shares: the theme, the window's settings store, garbage collection on the GUI
thread, a table row written in place. Imports no other ui room.
"""
