"""NLQL: a declarative query language for semantic and hybrid retrieval over text."""

from __future__ import annotations

__version__ = "0.1.0"

from nlql.check import check, validate  # binds the function `check` over the submodule attribute
from nlql.errors import (
    BackendError,
    CheckError,
    Diagnostic,
    NLQLError,
    NLQLSyntaxError,
    NLQLTimeoutError,
    PlanError,
    RouteError,
    TemplateError,
    UnsupportedError,
)
from nlql.ir import Query, query_json_schema
from nlql.parser import parse
from nlql.render import render
from nlql.route import Route, Router

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
    "Route",
    "RouteError",
    "Router",
    "TemplateError",
    "UnsupportedError",
    "__version__",
    "check",
    "parse",
    "query_json_schema",
    "render",
    "validate",
]


def __getattr__(name: str):  # lazy: importing nlql stays cheap; the engine pulls numpy and stores
    if name == "Engine":
        from nlql.engine import Engine

        return Engine
    raise AttributeError(name)
