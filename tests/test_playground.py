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
