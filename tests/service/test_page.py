"""The web page end to end: uvicorn on a loopback port, Debian's Chromium driven by Playwright.

Types a question key by key, waits for the debounced search to show results, takes a
screenshot, then compares two questions. Without Chromium or Playwright the test is skipped
with the reason, except where ``DUPQ_REQUIRE_BROWSER=1`` (CI), where that is a failure.
Set ``DUPQ_SCREENSHOT=path.png`` to keep the screenshot.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support.servicekit import EXTRA, LiveServer, build_collection, questions

CHROMIUM = Path("/usr/bin/chromium")
QUESTION = "How can I lose weight quickly?"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def browser_missing() -> str | None:
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium chromium-driver)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = browser_missing()
    if reason:
        if os.environ.get("DUPQ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"DUPQ_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(f"BROWSER TEST NOT RUN: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir, small_splits):
    from dupq.service.app import create_app

    folder = build_collection(tmp_path_factory.mktemp("page") / "coll", tiny_model_dir, questions(small_splits, 3000))
    with LiveServer(create_app(folder, token="page-token")) as live:
        yield live


def test_typing_shows_similar_questions(browser, server, tmp_path):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 900, "height": 900})
    searches = []
    page.on("request", lambda r: searches.append(r) if r.url.endswith("/search") else None)
    page.goto(server.url + "/")
    # Locator assertions, not wait_for_function: the page's Content-Security-Policy forbids eval.
    expect(page.locator("#status")).to_contain_text("questions stored")
    assert "3,000 questions stored" in page.inner_text("#status")

    page.locator("#question").press_sequentially(QUESTION, delay=15)
    page.wait_for_selector("#results li")
    expect(page.locator("#search-info")).not_to_contain_text("searching")
    screenshot = tmp_path / "page.png"
    page.screenshot(path=str(screenshot), full_page=True)
    assert screenshot.stat().st_size > 10_000
    if os.environ.get("DUPQ_SCREENSHOT"):
        shutil.copy(screenshot, os.environ["DUPQ_SCREENSHOT"])

    assert 1 <= len(searches) <= 3, f"{len(searches)} searches for one typed question: the input is not debounced"
    rows = page.locator("#results li")
    assert rows.count() == 10
    scores = [float(s) for s in page.locator("#results .score").all_inner_texts()]
    assert scores == sorted(scores, reverse=True)
    threshold = float(page.request.get(server.url + "/health").json()["threshold"])
    flagged = page.locator("#results li.duplicate").count()
    assert flagged == page.locator("#results .badge").count()
    assert flagged == sum(s > threshold + 0.005 for s in scores) or abs(scores[flagged - 1] - threshold) < 0.01
    texts = page.locator("#results .text").all_inner_texts()
    assert any("weight" in t.lower() for t in texts), texts
    # Stored text is shown as text: a question with <b> in it renders its tags literally.
    page.fill("#question", EXTRA[1])
    expect(page.locator("#results .text").first).to_contain_text("<b>")
    assert page.locator("#results b").count() == 0

    page.click("#tab-compare")
    assert page.is_hidden("#search-panel") and page.is_visible("#compare-panel")
    page.fill("#q1", QUESTION)
    page.fill("#q2", QUESTION)
    page.wait_for_selector("#verdict .big")
    assert page.inner_text("#verdict .big") == "1.00"
    assert page.inner_text("#verdict .word") == "likely duplicates"
    page.close()


# The x position of the first and the last letter of ``word`` in the first text node under an element
# that holds it: left to right as written, or null when no text node holds it.
LETTER_ORDER = """(element, word) => {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.textContent.indexOf(word);
    if (at < 0) continue;
    const left = (i) => {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      return range.getBoundingClientRect().left;
    };
    return left(at) < left(at + word.length - 1);
  }
  return null;
}"""


def test_right_to_left_text_cannot_reorder_the_page(browser, tmp_path, tiny_model_dir, small_splits):
    """A right-to-left override (U+202E) in a stored question or its metadata stays inside it: the
    page's own words after it (the "likely duplicate" badge, the next metadata entry) still read left to right."""
    from playwright.sync_api import expect

    from dupq.collection.collection import Collection
    from dupq.modeling.model import Model
    from dupq.service.app import create_app

    flipped = "Why is the sky \u202eblue at noon?"
    texts = [*questions(small_splits, 50), flipped]
    metadata = [{"note": "\u202eflipped", "zz": "marker"} if t == flipped else {} for t in texts]
    Collection.build(tmp_path / "rtl", texts, Model.load(tiny_model_dir), metadata=metadata).close()
    with LiveServer(create_app(tmp_path / "rtl", token="page-token")) as live:
        # Measuring layout runs script in the page, which its Content-Security-Policy forbids: bypassed for this test.
        context = browser.new_context(bypass_csp=True, viewport={"width": 900, "height": 900})
        page = context.new_page()
        page.goto(live.url + "/")
        page.fill("#question", flipped)
        row = page.locator("#results li", has_text="marker")
        expect(row).to_have_count(1)
        expect(row.locator(".badge")).to_have_text("likely duplicate")
        assert row.locator(".badge").evaluate(LETTER_ORDER, "likely") is True, "the badge reads right to left"
        assert row.evaluate(LETTER_ORDER, "marker") is True, "the metadata after the override reads right to left"
        context.close()
