"""docs/routing.md prints the default router from the code: the block between its markers is exactly
``nlql.route.render_default_router()`` (``pytest --update-goldens`` rewrites it)."""

from __future__ import annotations

from pathlib import Path

from nlql.route import DEFAULT_RULES, DEFAULT_TEMPLATES, render_default_router

DOC = Path(__file__).resolve().parent.parent / "docs" / "routing.md"
BEGIN, END = "<!-- default-router:begin -->\n", "<!-- default-router:end -->"


def _split(text: str) -> tuple[str, str, str]:
    head, sep, rest = text.partition(BEGIN)
    block, sep2, tail = rest.partition(END)
    assert sep and sep2, f"{DOC} lost its default-router markers"
    return head, block, tail


def test_the_routing_page_prints_the_default_router_from_the_code(update_goldens: bool) -> None:
    text = DOC.read_text(encoding="utf-8")
    head, block, tail = _split(text)
    want = render_default_router() + "\n"
    if update_goldens and block != want:
        DOC.write_text(head + BEGIN + want + END + tail, encoding="utf-8")
        block = want
    assert block == want, "docs/routing.md is out of date: run pytest tests/test_route_docs.py --update-goldens"


def test_the_rendered_block_holds_every_rule_and_template() -> None:
    block = render_default_router()
    for pattern, intent in DEFAULT_RULES:
        assert f"{intent}" in block and pattern in block
    for intent, template in DEFAULT_TEMPLATES.items():
        assert f"Template `{intent}`:\n\n```sql\n{template}\n```" in block
