"""Equal vectors get equal scores wherever they sit in the built-in store's matrix, so equal texts tie
and break on insertion order (SPEC §6). BLAS scores the rows of a product's last, partial block with
another kernel; the built-in store once took its newest rows' scores from it, and a copy of an older text
among them could come out 1e-6 apart from it after rounding (about one query in 300)."""

from __future__ import annotations

import numpy as np
import pytest

from nlql import Engine
from nlql.embedders import HashEmbedder
from nlql.kernels import BLOCK, block_rows, full_scan, matmul_t


@pytest.mark.parametrize("dim", [8, 64, 384])
@pytest.mark.parametrize("extra", [1, 2, 3])
def test_a_copy_in_the_last_block_has_its_twins_bits(dim: int, extra: int) -> None:
    rng = np.random.default_rng(dim * 10 + extra)
    n = 10 * BLOCK + extra
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix[-1] = matrix[5]
    queries = rng.standard_normal((4000, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    keys = np.array([2, 5, n - 1])
    gather, pos = block_rows(keys, n, dim)
    for q in queries:
        full = full_scan(matrix, q)
        assert full[n - 1] == full[5]
        # a few rows scored alone have the full scan's bits
        assert np.array_equal(matmul_t(q[None, :], matrix[gather])[0][pos], full[keys])


def test_equal_texts_tie_in_insertion_order_when_one_is_the_newest() -> None:
    texts = [f"Sentence about topic {i} with words {i * 7 % 13}." for i in range(41)]
    engine = Engine(embedder=HashEmbedder(dim=64), warm_up=False)
    engine.add_texts([*texts, texts[5]], ids=[str(i) for i in range(41)] + ["copy"])
    for a in range(40):
        for b in range(10):
            for where in ("", 'WHERE doc_id IN ("5", "copy")'):
                hits = engine.search(f'SELECT SENTENCE LET s = SIMILARITY(content, "query words {a} {b} topic") '
                                     f"{where} ORDER BY s DESC")
                twins = [h for h in hits if h.doc_id in ("5", "copy")]
                assert [h.doc_id for h in twins] == ["5", "copy"]
                assert twins[0].scores["s"] == twins[1].scores["s"]
