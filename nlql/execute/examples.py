"""Query vectors that are not embedded (SPEC §11): SIMILARITY by a vector parameter or by ``DOC("id")``.

- A vector parameter (a sequence of floats of the embedder's dimension) is L2-normalised and used as
  it is; a wrong length, NaN or infinity, or a zero vector (no direction) is a
  :class:`~nlql.errors.PlanError` at the parameter.
- ``DOC("id")`` is the normalised mean of that document's sentence vectors, read from the store
  (``document_rows`` then ``vectors``); an id no document has is a :class:`~nlql.errors.PlanError` at
  the call. "More like this" is ``SIMILARITY(content, DOC("d7"))`` with ``WHERE doc_id != "d7"``.

Either vector goes to recall exactly as an embedded text's does (every store's ``knn``, ``score_all``,
``similarities``, a lowered statement's semantic arm).
"""

from __future__ import annotations

import numpy as np

from nlql import values as V
from nlql.errors import PlanError
from nlql.execute.candidates import Search

__all__ = ["example_vectors"]


def example_vectors(run: Search, dim: int | None) -> dict[str, np.ndarray]:
    """Each vector / DOC SIMILARITY slot's query vector, (1, dim) float32, L2-normalised."""
    out: dict[str, np.ndarray] = {}
    for s in run.plan.scores:
        if s.kind != "SIMILARITY":
            continue
        where = s.call.args[1].span if len(s.call.args) > 1 else s.call.span
        if s.vector is not None:
            v = np.asarray(s.vector, dtype=np.float64)
            if dim is not None and len(v) != dim:
                raise PlanError(f"the query vector has {len(v)} numbers; the embedder's vectors have {dim}",
                                where, hint=f"pass a vector of {dim} floats (the embedder's dim)")
            if not np.isfinite(v).all():
                raise PlanError("the query vector holds NaN or infinity", where, hint="pass finite numbers only")
            if not np.any(v):
                raise PlanError("the query vector is all zeros: it has no direction to compare with", where)
        elif s.doc is not None:
            rows = run.store.document_rows([s.doc]).get(s.doc)
            if not rows:
                raise PlanError(f"DOC({s.doc!r}): no document has this id", where,
                                hint="DOC takes the doc_id of a stored document")
            v = np.asarray(run.store.vectors([r.key for r in rows]), dtype=np.float64).mean(axis=0)
        else:
            continue  # an embedded text: no example vector
        out[s.slot] = V.normalize_rows(v.astype(np.float32)[None, :], zero_invalid=True)
    return out
