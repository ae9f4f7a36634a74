"""schemathesis against the served OpenAPI description (issue 33, item 12): every operation, generated
bodies (valid and invalid), every check schemathesis runs by default: no 500, every status and header
documented, every response matching its schema, the schema's refusals matching the server's.

Kept short for a shared machine: a few examples per operation, on a small corpus, with the hash embedder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
httpx = pytest.importorskip("httpx")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402
from nlql.errors import NLQLError  # noqa: E402
from nlql.serve import BackgroundServer, ServeConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "schemathesis-token-1"
EXAMPLES = 12


@pytest.fixture(scope="module", params=["token", "open"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    e = Engine(embedder=HashEmbedder(dim=32), warm_up=False)
    e.add_texts(["Solar panels make power. Rivers flow to the sea.", "Cats sleep all day. Agents call tools."],
                ids=["a", "b"], metadatas=[{"year": 2024}, {"year": 2021}])
    for warm in ("SELECT SENTENCE LIMIT 1", "0"):  # the parser is built once per process, not inside a request's
        try:                                         # 5 s (a loaded machine took longer than that: a 504)
            e.search(warm)
        except NLQLError:  # ("0" is a syntax error: only its parse is wanted)
            pass
    token = TOKEN if request.param == "token" else None
    with BackgroundServer(e, ServeConfig(port=0, token=token, timeout=5.0)) as s:
        yield s.url, ({"Authorization": f"Bearer {TOKEN}"} if token else {})


def test_every_operation_conforms_to_the_served_schema(served: tuple[str, dict[str, str]]) -> None:
    url, headers = served
    doc = httpx.get(url + "/openapi.json", headers=headers, timeout=10).json()
    config = schemathesis.config.SchemathesisConfig.from_path(ROOT / "schemathesis.toml")
    schema = schemathesis.openapi.from_dict(doc, config=config)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 7

    for op in operations:
        @given(case=op.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            try:
                case.call_and_validate(base_url=url, headers=headers, timeout=10)
            except BaseException as exc:  # noqa: BLE001 - collected, reported together
                failures.append(f"{case.operation.label}: {str(exc)[:800]}")

        run()
    assert not failures, "\n\n".join(failures[:8])
