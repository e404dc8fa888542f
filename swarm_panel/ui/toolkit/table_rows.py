"""A QTableWidget row written in place: its items made once, then only their text and tooltip change, so a
polled table keeps its selection and scroll."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6 import QtWidgets


def set_row(table: QtWidgets.QTableWidget, row: int, values: Sequence[str], tip: str) -> None:
    for column, value in enumerate(values):
        item = table.item(row, column)
        if item is None:
            item = QtWidgets.QTableWidgetItem()
            table.setItem(row, column, item)
        item.setText(value)
        item.setToolTip(tip)
