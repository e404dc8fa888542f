"""The desktop panel (PySide6 + pyqtgraph on a qasync loop): the only room that imports Qt.
"""
