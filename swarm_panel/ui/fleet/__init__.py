"""The fleet view: backends' gauges and the gateway window. Imports panels, toolkit and app.
"""
