"""The OpenAPI 3.1 description of the HTTP API (``GET /openapi.json``).

Written out by hand: the API is small, Starlette has no schema generator that does not need YAML in
docstrings, and a hand-kept description can say exactly what the endpoints promise. A test checks that
every route the app serves is described and every described route is served.

>>> doc = openapi(["search", "explain", "check"], auth=False)
>>> sorted(doc["paths"])
['/check', '/documents', '/documents/{doc_id}', '/explain', '/health', '/search']
>>> "/ask" in openapi(["search", "explain", "check", "ask"], auth=True)["paths"]
True
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from nlql import __version__

__all__ = ["openapi"]

_PARAMS = {"type": "object", "additionalProperties": True,
           "description": 'Values for $name parameters in the query, e.g. {"q": "AI agents"}.'}
_TIMEOUT = {"type": "number", "minimum": 0.05, "maximum": 1e9,
            "description": "Deadline in seconds (at least 0.05); capped by the server's own (nlql serve "
                           "--timeout)."}
_QUERY = {"type": "string", "minLength": 1, "pattern": "\\S",
          "description": "NLQL text (not empty), e.g. SELECT SENTENCE LET rel = SIMILARITY(content, $q) LIMIT 5"}

_SCHEMAS: dict[str, Any] = {
    "Diagnostic": {
        "type": "object",
        "required": ["line", "column", "message"],
        "properties": {
            "line": {"type": "integer", "description": "1-based; 0 when the problem has no position"},
            "column": {"type": "integer", "description": "1-based; 0 when the problem has no position"},
            "message": {"type": "string"},
            "hint": {"type": ["string", "null"]},
            "code": {"type": "string", "description": "the kind of problem (syntax, check, param, plan, …)"},
            "severity": {"type": "string", "enum": ["error", "warning"], "description": "absent: error; "
                         "warning: the query runs (e.g. a metadata key no document has)"},
            "start": {"type": "integer", "description": "offset of the span in the query (characters)"},
            "end": {"type": "integer", "description": "end offset of the span (exclusive)"},
            "rendered": {"type": "string", "description": "message, source line with a caret, hint"},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {
            "type": "object",
            "required": ["kind", "message", "line", "column"],
            "properties": {
                "kind": {"type": "string", "description": "syntax, check, param, plan, limit, timeout, backend, "
                                                          "request (not about the query), auth, internal"},
                "message": {"type": "string"},
                "line": {"type": "integer"},
                "column": {"type": "integer"},
                "hint": {"type": ["string", "null"]},
                "rendered": {"type": "string"},
                "diagnostics": {"type": "array", "items": {"$ref": "#/components/schemas/Diagnostic"}},
            },
        }},
    },
    "Hit": {
        "type": "object",
        "required": ["id", "doc_id", "unit", "position", "content", "metadata", "scores"],
        "properties": {
            "id": {"type": "string"}, "doc_id": {"type": "string"},
            "unit": {"type": "string", "enum": ["SENTENCE", "CHUNK", "DOCUMENT", "SPAN"]},
            "position": {"type": "integer"}, "content": {"type": "string"},
            "metadata": {"type": "object", "additionalProperties": True},
            "scores": {"type": "object",
                       "additionalProperties": {"type": ["number", "string", "boolean", "null", "array"]},
                       "description": "one value per LET binding (HIGHLIGHT: a list of [start, end] ranges)"},
            "truncated": {"type": "boolean"},
            "highlights": {"type": "object", "description": "HIGHLIGHT bindings: [start, end) character ranges "
                                                            "of content", "additionalProperties": {
                               "type": "array", "items": {"type": "array", "items": {"type": "integer"}}}},
            "best": {"description": "DOCUMENT and CHUNK hits: the sentence that scored the row (null when "
                                    "nothing scored it)",
                     "anyOf": [{"type": "null"}, {
                         "type": "object", "required": ["position", "content", "scores"],
                         "properties": {"position": {"type": "integer"}, "content": {"type": "string"},
                                        "scores": {"type": "object", "additionalProperties": {
                                            "type": ["number", "string", "boolean", "null"]}}}}]},
        },
    },
    "Hits": {
        "type": "object",
        "required": ["hits", "stats", "warnings"],
        "properties": {
            "hits": {"type": "array", "items": {"$ref": "#/components/schemas/Hit"}},
            "cursor": {"type": ["string", "null"], "description": "/search: the next page's cursor (null on "
                                                                  "the last page)"},
            "stats": {"type": "object", "description": "timings_ms per stage, candidates, rounds, …"},
            "warnings": {"type": "array", "items": {"type": "string"}},
        },
    },
}


def _body(properties: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "properties": properties, "required": list(required), "additionalProperties": False}}}}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


_ERROR_TEXT = {
    400: "a bad query (syntax, check, plan, limit) or a bad request body", 401: "no or wrong bearer token",
    403: "this server takes no writes (it has no token)", 404: "no such document",
    408: "the request body did not arrive in time", 413: "the request body is too large",
    415: "the body is not JSON", 500: "a bug (the details are in the server log)", 502: "the store failed",
    503: "the server is busy (Retry-After) or shutting down", 504: "the request ran out of time"}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): _json(_ref("Error"), _ERROR_TEXT[c]) for c in codes}


def openapi(features: Sequence[str], auth: bool, writes: bool = False,
            max_query_chars: int | None = None) -> dict[str, Any]:
    """The description of the endpoints in ``features`` (see :func:`nlql.serve.app.features`); the write
    endpoints (``/documents``) when ``writes``."""
    post_errors = (400, 401, 408, 413, 415, 502, 503, 504) if auth else (400, 408, 413, 415, 502, 503, 504)
    query = dict(_QUERY, maxLength=max_query_chars) if max_query_chars else _QUERY
    paths: dict[str, Any] = {
        "/search": {"post": {
            "summary": "Run an NLQL query",
            "operationId": "search",
            "requestBody": _body({"query": query, "params": _PARAMS, "timeout": _TIMEOUT,
                                  "max_tokens": {"type": "integer", "minimum": 1,
                                                 "description": "keep hits within a token budget"},
                                  "cursor": {"type": "string",
                                             "description": "the 'cursor' of the previous page of the same "
                                                            "query: the next LIMIT rows after it (SPEC §11)"}},
                                 ["query"]),
            "responses": {"200": _json(_ref("Hits"), "the hits, with stats and warnings"), **_errors(*post_errors)},
        }},
        "/explain": {"post": {
            "summary": "Show how a query would run, without running it",
            "operationId": "explain",
            "requestBody": _body({"query": query, "params": _PARAMS, "timeout": _TIMEOUT}, ["query"]),
            "responses": {"200": _json({"type": "object", "required": ["text", "plan"], "properties": {
                "text": {"type": "string", "description": "the plan as an indented text tree"},
                "plan": {"type": "object", "description": "the plan's fields (recall, filters, order, …)"}}},
                "the plan"), **_errors(*post_errors)},
        }},
        "/check": {"post": {
            "summary": "Every problem in a query at once (an invalid query is still a 200)",
            "operationId": "check",
            "requestBody": _body({"query": query, "params": _PARAMS, "timeout": _TIMEOUT}, ["query"]),
            "responses": {"200": _json({"type": "object", "required": ["valid", "diagnostics"], "properties": {
                "valid": {"type": "boolean", "description": "no error (warnings allow a query to run)"},
                "diagnostics": {"type": "array", "items": _ref("Diagnostic")}}}, "the diagnostics"),
                **_errors(*post_errors)},
        }},
        "/health": {"get": {
            "summary": "Liveness, version and the endpoints this server has",
            "operationId": "health",
            "security": [],
            "responses": {"200": _json({"type": "object", "required": ["status", "version", "features"],
                                        "properties": {
                                            "status": {"type": "string", "const": "ok"},
                                            "version": {"type": "string"},
                                            "features": {"type": "array", "items": {"type": "string"}},
                                            "auth": {"type": "boolean"},
                                            "store": {"type": "string", "description": "with a valid token"},
                                            "sentences": {"type": "integer", "description": "with a valid token"},
                                        }}, "the server is up")},
        }},
    }
    if "ask" in features:
        paths["/ask"] = {"post": {
            "summary": "Answer a question through the engine's intent router",
            "operationId": "ask",
            "requestBody": _body({"question": {**query, "description": "a question in plain words"},
                                  "params": _PARAMS, "timeout": _TIMEOUT},
                                 ["question"]),
            "responses": {"200": _json(_ref("Hits"), "the hits and the route taken (intent, query)"),
                          **_errors(*post_errors)},
        }}
    if "schema" in features:
        paths["/schema"] = {"get": {
            "summary": "The store's schema: sizes, metadata keys, their types and common values",
            "operationId": "schema",
            "responses": {"200": _json({"type": "object"}, "the schema"),
                          **_errors(*((401, 502, 504) if auth else (502, 504)))},
        }}
    write_errors = (400, 401, 408, 413, 415, 502, 503, 504) if auth else (400, 403, 408, 413, 415, 502, 503, 504)
    document_fields: dict[str, Any] = {
        "text": {"type": "string"}, "metadata": {"type": "object", "additionalProperties": True}}
    document = {"type": "object", "required": ["text"], "additionalProperties": False, "properties": document_fields}
    doc_id = {"name": "doc_id", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1}}
    if writes or not auth:
        paths["/documents"] = {"post": {
            "summary": "Add documents (the same id again replaces one)" + ("" if writes else
                                                                         ": refused, this server has no token"),
            "operationId": "add_documents",
            "requestBody": _body({"documents": {"type": "array", "minItems": 1, "items": {
                **document, "properties": {**document_fields, "id": {"type": "string", "minLength": 1}}}}},
                ["documents"]),
            "responses": {**({"201": _json({"type": "object", "required": ["ids"], "properties": {
                "ids": {"type": "array", "items": {"type": "string"}}}}, "the ids written")} if writes else {}),
                **_errors(*write_errors)},
        }}
        paths["/documents/{doc_id}"] = {
            "put": {"summary": "Replace a document (or add it under this id)", "operationId": "replace_document",
                    "parameters": [doc_id], "requestBody": _body(document_fields, ["text"]),
                    "responses": {**({"200": _json({"type": "object"}, "the id written")} if writes else {}),
                                  **_errors(*write_errors)}},
            "delete": {"summary": "Delete a document and its sentences", "operationId": "delete_document",
                       "parameters": [doc_id],
                       "responses": {**({"200": _json({"type": "object"}, "deleted")} if writes else {}),
                                     **_errors(*(write_errors + ((404,) if writes else ())))}},
        }
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "NLQL", "version": __version__,
                 "description": "A declarative query language for semantic and hybrid retrieval over text. "
                                "Errors carry the NLQL diagnostic: line, column, message, hint."},
        "paths": paths,
        "components": {"schemas": copy.deepcopy(_SCHEMAS)},
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
