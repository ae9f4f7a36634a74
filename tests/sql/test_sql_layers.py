"""The SQL layer has no import circle: the dialect imports the filter compiler and GRAPH's SQL, and
neither imports a dialect (they take it as an argument); a dialect's package imports its own
``filters`` module, never the other way round."""

from __future__ import annotations

import grimp


def test_no_import_circle_in_the_sql_layer() -> None:
    graph = grimp.build_graph("nlql")
    modules = sorted(m for m in graph.modules if m.startswith("nlql.sql"))
    circles = []
    for a in modules:
        for b in graph.find_modules_directly_imported_by(a):
            if b.startswith("nlql.sql") and graph.chain_exists(importer=b, imported=a):
                circles.append((a, b))
    assert circles == []
    for low in ("nlql.sql.filters", "nlql.sql.graph", "nlql.sql.postgres.filters", "nlql.sql.duckdb.filters",
                "nlql.sql.sqlite.filters"):
        imported = graph.find_modules_directly_imported_by(low)
        assert not {m for m in imported if m.endswith(".dialect")}, low
