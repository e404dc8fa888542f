"""Every setting, its default, bounds and help (the only definition), what a field offers a front end,
command-line flags made from fields, and the fleet's backend lines. Imports runtime only.
"""
