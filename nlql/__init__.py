"""NLQL: a declarative query language for semantic and hybrid retrieval over text."""

from __future__ import annotations

__version__ = "0.1.0"

from nlql.errors import (
    BackendError,
    CheckError,
    Diagnostic,
    NLQLError,
    NLQLSyntaxError,
    NLQLTimeoutError,
    PlanError,
    UnsupportedError,
)
from nlql.ir import Query, query_json_schema

__all__ = [
    "BackendError",
    "CheckError",
    "Diagnostic",
    "Engine",
    "NLQLError",
    "NLQLSyntaxError",
    "NLQLTimeoutError",
    "PlanError",
    "Query",
    "UnsupportedError",
    "__version__",
    "check",
    "parse",
    "query_json_schema",
    "render",
]


def __getattr__(name: str):  # lazy: importing nlql stays cheap; the engine pulls numpy and stores
    if name == "Engine":
        from nlql.engine import Engine

        return Engine
    if name == "parse":
        from nlql.parser import parse

        return parse
    if name == "check":
        from nlql.check import check

        return check
    if name == "render":
        from nlql.render import render

        return render
    raise AttributeError(name)
