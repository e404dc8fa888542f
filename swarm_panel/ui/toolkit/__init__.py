"""What every Qt room shares: the theme, the window's settings store, garbage collection on the GUI
thread. Imports no other ui room.
"""
