"""The built-in store family: a numpy matrix and a row table in RAM (or a directory kept in SQLite), and
the speed machinery that is its own business: the int8 copy (:mod:`.quant`, :mod:`.int8_scan`), the
prefault of new rows (:mod:`._pages`), the table fast paths (:mod:`.fastpath`, :mod:`.fused_page`,
:mod:`.document_page`, :mod:`.table_recall`). The engine reaches them only through the protocols of
:mod:`nlql.stores.base` (``TablePaths``); Faiss and hnswlib (:mod:`nlql.stores.ann`) build on
:class:`MatrixStore`.
"""

from nlql.stores.memory.store import MEMORY_CAPABILITIES, MatrixStore, MemoryStore, describe_filter

__all__ = ["MEMORY_CAPABILITIES", "MatrixStore", "MemoryStore", "describe_filter"]
