"""The web playground in a real browser: headless Chromium (Debian's chromium + chromium-driver) via selenium.

With ``NLQL_SCREENSHOTS=1`` the test also writes the screenshots used by docs/serving.md into docs/img/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
selenium = pytest.importorskip("selenium")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import TimeoutException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from nlql.data import load_demo  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.engine import Engine  # noqa: E402
from nlql.serve import BackgroundServer, ServeConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1440,1000", "--force-device-scale-factor=1"]
TYPO = 'SELECT SENTENCE\nLET rel = SIMILARITY(content, "serialize an object to a JSON string")\nWHERE rell > 0.1\nLIMIT 5'
FIXED = 'SELECT SENTENCE\nLET rel = SIMILARITY(content, "serialize an object to a JSON string")\nWHERE rel > 0.1\nLIMIT 5'


def _browser_paths() -> tuple[str, str]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip("headless Chromium is not installed here: apt-get install -y chromium chromium-driver "
                    "(.ci/run installs them in CI)")
    return chromium, driver


@pytest.fixture(scope="module")
def engine() -> Engine:
    e = Engine(embedder=HashEmbedder(dim=384), warm_up=False)
    docs = load_demo()
    e.add_texts([d["text"] for d in docs], ids=[d["id"] for d in docs], metadatas=[d["metadata"] for d in docs])
    return e


@pytest.fixture(scope="module")
def server(engine: Engine) -> Iterator[BackgroundServer]:
    with BackgroundServer(engine, ServeConfig(port=0)) as s:
        yield s


@pytest.fixture
def browser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[webdriver.Chrome]:
    chromium, driver = _browser_paths()
    monkeypatch.setenv("SE_OFFLINE", "true")  # selenium must not look for drivers on the network
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium-profile'}")
    try:
        b = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    except WebDriverException as exc:
        pytest.skip(f"Chromium would not start here: {exc.msg}")
    try:
        yield b
    finally:
        b.quit()


def _wait(browser: webdriver.Chrome, what: str, condition, timeout: float = 20.0):  # type: ignore[no-untyped-def]
    try:
        return WebDriverWait(browser, timeout, poll_frequency=0.1).until(lambda _: condition())
    except TimeoutException:
        raise AssertionError(f"timed out waiting for {what}; status: "
                             f"{browser.find_element(By.ID, 'status').text!r}") from None


def _type(browser: webdriver.Chrome, text: str) -> None:
    editor = browser.find_element(By.ID, "editor")
    editor.click()
    editor.send_keys(Keys.CONTROL, "a")
    editor.send_keys(Keys.DELETE)
    for line_no, line in enumerate(text.split("\n")):
        if line_no:
            editor.send_keys(Keys.SHIFT, Keys.ENTER)  # a plain newline (Ctrl+Enter would run)
        editor.send_keys(line)


def _shot(browser: webdriver.Chrome, name: str) -> None:
    if os.environ.get("NLQL_SCREENSHOTS") == "1":
        IMG.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(IMG / name))


def test_playground_checks_as_you_type_then_runs(browser: webdriver.Chrome, server: BackgroundServer,
                                                 engine: Engine) -> None:
    browser.get(server.url + "/")
    assert browser.title == "NLQL playground"
    info = browser.find_element(By.ID, "server-info")
    _wait(browser, "the server info", lambda: "sentences" in info.text)
    assert f"{len(engine):,} sentences" in info.text

    # a typo: the diagnostic appears under the query, with its line and a caret under the name
    _type(browser, TYPO)
    assert browser.find_element(By.ID, "editor").get_property("value") == TYPO
    status = browser.find_element(By.ID, "status")
    _wait(browser, "the diagnostic", lambda: "problem" in status.text)
    diag = browser.find_element(By.CSS_SELECTOR, "#diagnostics .diagnostic")
    text = diag.text
    assert "unknown name 'rell'" in text and "line 3, column 7" in text
    caret_line = next(line for line in text.splitlines() if "^" in line)
    source_line = next(line for line in text.splitlines() if "WHERE rell > 0.1" in line)
    assert caret_line.index("^") == source_line.index("rell") and caret_line.count("^") == 4
    marks = browser.find_elements(By.CSS_SELECTOR, "#mirror mark")
    assert [m.get_attribute("textContent") for m in marks] == ["rell"]  # the editor underlines the name
    _shot(browser, "playground-diagnostic.png")

    # fixed: the check passes and the underline goes
    _type(browser, FIXED)
    _wait(browser, "the valid status", lambda: status.text == "✓ valid")
    assert browser.find_elements(By.CSS_SELECTOR, "#diagnostics .diagnostic") == []
    assert browser.find_elements(By.CSS_SELECTOR, "#mirror mark") == []

    # run: the rows are the engine's rows, with their scores
    browser.find_element(By.ID, "run").click()
    rows = _wait(browser, "result rows", lambda: browser.find_elements(By.CSS_SELECTOR, "#results tbody tr"))
    expected = engine.search(FIXED)
    assert len(rows) == len(expected) == 5
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#results thead th")]
    assert headers == ["#", "id", "rel", "content", "metadata"]
    for row, hit in zip(rows, expected):
        cells = row.find_elements(By.TAG_NAME, "td")
        assert cells[1].text == hit.id
        assert float(cells[2].text) == pytest.approx(hit.scores["rel"], abs=5e-5)
        assert cells[3].text == hit.content
    assert "5 rows" in browser.find_element(By.ID, "stats").text
    _shot(browser, "playground-results.png")

    # the plan, as a tree
    browser.find_element(By.CSS_SELECTOR, ".tabs button[data-tab=plan]").click()
    plan = browser.find_element(By.ID, "plan")
    _wait(browser, "the plan tree", lambda: "recall" in plan.text)
    assert "scores (deduplicated)" in plan.text and "rel > 0.1" in plan.text
    _shot(browser, "playground-plan.png")


def test_playground_params_and_run_errors(browser: webdriver.Chrome,
                                                           server: BackgroundServer) -> None:
    browser.get(server.url + "/")
    _wait(browser, "the first check", lambda: browser.find_element(By.ID, "status").text == "✓ valid")
    _type(browser, "SELECT SENTENCE LET rel = SIMILARITY(content, $q) LIMIT 2")
    params = browser.find_element(By.ID, "params")
    params.send_keys('{"q": ')
    status = browser.find_element(By.ID, "status")
    _wait(browser, "the params error", lambda: "params are not valid JSON" in status.text)
    params.send_keys('"read a file"}')
    _wait(browser, "the valid status", lambda: status.text == "✓ valid")
    browser.find_element(By.ID, "run").click()
    _wait(browser, "two rows", lambda: len(browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")) == 2)
    # a query that no longer uses $q: running it shows the error with its caret instead of rows
    _type(browser, 'SELECT SENTENCE WHERE content CONTAINS "<img src=x onerror=alert(1)>" LIMIT 1')
    browser.find_element(By.ID, "run").click()
    run_error = browser.find_element(By.ID, "run-error")
    _wait(browser, "the run error", lambda: "unused" in run_error.text)
    assert browser.find_elements(By.CSS_SELECTOR, "#results tbody tr") == []
    # without params it runs; markup in the query text is data, never rendered as HTML
    params.clear()
    params.send_keys(" ")
    _wait(browser, "the valid status", lambda: status.text == "✓ valid")
    browser.find_element(By.ID, "run").click()
    _wait(browser, "the empty result", lambda: "no matching content" in browser.find_element(By.ID, "results").text)
    assert browser.find_elements(By.CSS_SELECTOR, "#results img") == []


DOCS = ('SELECT DOCUMENT\nLET rel = SIMILARITY(content, "run several tasks at the same time"),\n'
        '    hl = HIGHLIGHT(content, "tasks time")\nLIMIT 4')
WARNED = 'SELECT SENTENCE\nLET rel = SIMILARITY(content, "read a file")\nWHERE meta.yeer > 2000\nLIMIT 3'


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def _background(browser: webdriver.Chrome, element) -> str:  # type: ignore[no-untyped-def]
    return browser.execute_script("return getComputedStyle(arguments[0]).backgroundColor", element)


def test_playground_document_hits_show_the_best_sentence_highlighted(browser: webdriver.Chrome,
                                                                    server: BackgroundServer,
                                                                    engine: Engine) -> None:
    browser.get(server.url + "/")
    status = browser.find_element(By.ID, "status")
    _wait(browser, "the first check", lambda: status.text == "✓ valid")
    _type(browser, DOCS)
    _wait(browser, "the valid status", lambda: status.text == "✓ valid")
    browser.find_element(By.ID, "run").click()
    rows = _wait(browser, "result rows", lambda: browser.find_elements(By.CSS_SELECTOR, "#results tbody tr"))
    expected = engine.search(DOCS)
    assert len(rows) == len(expected) == 4
    headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#results thead th")]
    assert headers == ["#", "id", "rel", "content", "metadata"]  # HIGHLIGHT is marks, not a column
    marked = shorter = 0
    for row, hit in zip(rows, expected):
        assert hit.best is not None
        cell = row.find_element(By.CSS_SELECTOR, "td.content")
        best = cell.find_element(By.CSS_SELECTOR, ".best")
        assert best.text == hit.best.content  # the sentence that matched, not the document
        at = hit.content.index(hit.best.content)
        want = [hit.content[s:e] for s, e in hit.highlights["hl"] if at <= s and e <= at + len(hit.best.content)]
        assert [m.text for m in best.find_elements(By.CSS_SELECTOR, "mark.hl")] == want
        marked += bool(want)
        full = cell.find_element(By.CSS_SELECTOR, "details.whole .full")
        assert not full.is_displayed()  # the whole document is folded away ...
        if hit.content != hit.best.content:
            shorter += 1
            assert hit.content not in cell.text
        cell.find_element(By.CSS_SELECTOR, "details.whole summary").click()  # ... and opens on a click
        assert full.is_displayed() and full.text == hit.content
        assert len(full.find_elements(By.CSS_SELECTOR, "mark.hl")) == len(hit.highlights["hl"])
    assert marked and shorter  # the query was chosen so that both happen
    mark = browser.find_element(By.CSS_SELECTOR, "#results .best mark.hl")
    assert _background(browser, mark) not in ("rgba(0, 0, 0, 0)", "transparent")
    _shot(browser, "playground-documents.png")


@pytest.mark.parametrize("width", [1440, 900])
def test_playground_schema_panel_is_readable_and_beside_the_results(browser: webdriver.Chrome,
                                                                    server: BackgroundServer,
                                                                    engine: Engine, width: int) -> None:
    browser.set_window_size(width, 1000)
    browser.get(server.url + "/")
    panel = browser.find_element(By.ID, "schema-panel")
    _wait(browser, "the schema panel", lambda: panel.is_displayed()
          and browser.find_elements(By.CSS_SELECTOR, "#schema table.schema-keys tbody tr"))
    schema = engine.schema()
    keys = {r.find_element(By.CSS_SELECTOR, "td.key").text: r
            for r in browser.find_elements(By.CSS_SELECTOR, "#schema table.schema-keys tbody tr")}
    assert set(keys) == {"meta." + k["key"] for k in schema.to_dict()["keys"]}
    kind = keys["meta.kind"].find_elements(By.TAG_NAME, "td")
    assert kind[1].text == "string" and kind[2].text == "522" and kind[3].text.startswith("function (243)")
    assert "documents\n522" in browser.find_element(By.CSS_SELECTOR, "#schema dl.schema-summary").text
    _type(browser, FIXED.replace("LIMIT 5", "LIMIT 30"))  # enough rows to reach past the panel
    _wait(browser, "the valid status", lambda: browser.find_element(By.ID, "status").text == "✓ valid")
    browser.find_element(By.ID, "run").click()
    _wait(browser, "30 rows", lambda: len(browser.find_elements(By.CSS_SELECTOR, "#results tbody tr")) == 30)
    results = browser.find_element(By.ID, "results")
    table = results.find_element(By.CSS_SELECTOR, "table.hits")
    for scroll in (0, 600, 1200):
        browser.execute_script("window.scrollTo(0, arguments[0])", scroll)
        assert not _overlap(panel.rect, results.rect), (width, scroll, panel.rect, results.rect)
        # the table stays inside its box (a wide one scrolls there), so nothing runs under the panel
        assert browser.execute_script("const r = arguments[0].getBoundingClientRect(), "
                                      "t = arguments[1].getBoundingClientRect(); return t.left >= r.left - 1 && "
                                      "(t.right <= r.right + 1 || getComputedStyle(arguments[0]).overflowX "
                                      "!== 'visible')", results, table)
        visible = browser.execute_script("return arguments[0].getBoundingClientRect().right", results)
        panel_left = browser.execute_script("return arguments[0].getBoundingClientRect().left", panel)
        if width >= 1000:
            assert visible <= panel_left  # side by side
    if width >= 1000:
        assert panel.rect["x"] > results.rect["x"] + results.rect["width"] - 1
    else:
        assert panel.rect["y"] >= results.rect["y"] + results.rect["height"] - 1  # stacked below


def test_playground_warnings_look_like_warnings(browser: webdriver.Chrome, server: BackgroundServer) -> None:
    browser.get(server.url + "/")
    status = browser.find_element(By.ID, "status")
    _wait(browser, "the first check", lambda: status.text == "✓ valid")
    _type(browser, TYPO)  # an error first, for its colours
    _wait(browser, "the error", lambda: "problem" in status.text)
    error = browser.find_element(By.CSS_SELECTOR, "#diagnostics .diagnostic")
    assert "error" in error.get_attribute("class").split()
    error_bg, error_ink = _background(browser, error), status.value_of_css_property("color")

    _type(browser, WARNED)  # a metadata key no document has: the query runs, with a warning
    _wait(browser, "the warning", lambda: status.text == "✓ valid · 1 warning")
    assert "warn" in status.get_attribute("class").split() and status.value_of_css_property("color") != error_ink
    diag = browser.find_element(By.CSS_SELECTOR, "#diagnostics .diagnostic")
    assert "warning" in diag.get_attribute("class").split() and "error" not in diag.get_attribute("class").split()
    assert diag.get_attribute("role") == "note"
    assert "no document has metadata key meta.yeer" in diag.text and diag.text.startswith("warning")
    assert _background(browser, diag) != error_bg
    assert _background(browser, diag) == "rgb(255, 248, 225)"  # --warn-bg
    assert [m.get_attribute("class") for m in browser.find_elements(By.CSS_SELECTOR, "#mirror mark")] == ["warn"]

    browser.find_element(By.ID, "run").click()
    warning = _wait(browser, "the run warning", lambda: browser.find_elements(By.CSS_SELECTOR, "#warnings .warning"))[0]
    assert "meta.yeer" in warning.text and warning.get_attribute("role") == "note"
    assert _background(browser, warning) == "rgb(255, 248, 225)"
    assert browser.find_elements(By.CSS_SELECTOR, "#run-error .diagnostic") == []
    assert browser.find_element(By.ID, "results").text == "no matching content"
    _shot(browser, "playground-warning.png")
