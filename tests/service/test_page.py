"""The web page end to end: uvicorn on a loopback port, Debian's Chromium driven by Playwright.

Types a question key by key, waits for the debounced search to show results, takes a
screenshot, then compares two questions. Without Chromium or Playwright the test is skipped
with the reason, except where ``DUPQ_REQUIRE_BROWSER=1`` (CI), where that is a failure.
Set ``DUPQ_SCREENSHOT=path.png`` to keep the screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlencode

import pytest

from dupq.collection.collection import Collection
from dupq.modeling.model import Model
from dupq.service.app import create_app
from support.servicekit import EXTRA, LiveServer, build_collection, questions

CHROMIUM = Path("/usr/bin/chromium")
QUESTION = "How can I lose weight quickly?"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
ARGS += ["--disable-background-networking", "--disable-component-update", "--disable-sync"]


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


QUEUED = [
    ("new-1", "How can I lose weight fast without a diet?", "health"),
    ("new-2", "How do I learn Python in a month?", "code"),
    ("new-3", "What is the quickest way to lose weight?", "health"),
    ("new-4", "Which book teaches Python best?", "code"),
]


def test_a_moderator_walks_the_review_queue(browser, tmp_path, tiny_model_dir, small_splits):
    """Open the queue, give the token (and a name) once at the first decision, decide one with a click and one
    with a key, undo it, filter by category, and read the past decisions, checking each against the server."""
    from playwright.sync_api import expect

    texts = questions(small_splits, 200)
    coll = Collection.build(tmp_path / "desk", texts, Model.load(tiny_model_dir), keys=[f"q{i}" for i in range(200)])
    coll.add(
        [t for _, t, _ in QUEUED], [{"category": c} for _, _, c in QUEUED], [k for k, _, _ in QUEUED], pending=True
    )
    coll.close()
    with LiveServer(create_app(tmp_path / "desk", token="page-token")) as live:
        page = browser.new_page(viewport={"width": 900, "height": 1200})
        page.goto(live.url + "/")
        page.click("#tab-queue")
        rows = page.locator("#queue li.queued")
        expect(rows).to_have_count(4)
        expect(page.locator("#queue-info")).to_contain_text("4 questions waiting")
        first = rows.nth(0)
        expect(first).to_have_class(re.compile(r"\bselected\b"))
        expect(first.locator(".candidates > li")).to_have_count(5)
        assert page.is_hidden("#token-form")

        candidate = first.locator(".candidates > li").first.locator(".meta bdi").first.inner_text()
        first.get_by_role("button", name="Duplicate of this (1)").click()  # the first action asks for the token
        expect(page.locator("#token-form")).to_be_visible()
        page.fill("#token", "page-token")
        page.fill("#moderator", "Ana María")
        page.click("#token-form button[type=submit]")
        expect(first).to_have_class(re.compile(r"\bdecided\b"))
        expect(first.locator("button.decide")).to_have_count(0)  # a decided row offers no buttons again
        expect(first.locator(".outcome")).to_contain_text(f"duplicate of {candidate} by Ana María")

        second = rows.nth(1)
        expect(second).to_have_class(re.compile(r"\bselected\b"))
        page.keyboard.press("n")  # not a duplicate of any, by key: no token asked again
        expect(second).to_have_class(re.compile(r"\bdecided\b"))
        assert page.is_hidden("#token-form")
        past = page.locator("#decided li.past")
        expect(past).to_have_count(2)
        expect(past.first).to_contain_text(QUEUED[1][1])
        expect(past.first).to_contain_text("by Ana María")
        expect(past.nth(1)).to_contain_text(f"duplicate of {candidate}")
        decided = page.request.get(live.url + "/queue/decided").json()["decisions"]
        assert [(d["key"], d["action"], d["by"]) for d in decided] in (
            [("new-2", "distinct", "Ana María"), ("new-1", "duplicate", "Ana María")],
            [("new-1", "duplicate", "Ana María"), ("new-2", "distinct", "Ana María")],  # within the same second
        )
        assert decided[[d["key"] for d in decided].index("new-1")]["keys"] == [candidate]

        page.keyboard.press("u")  # undo the last decision: new-2 waits again, with its buttons
        expect(past).to_have_count(1)
        expect(rows).to_have_count(3)
        expect(page.locator("#queue li.queued", has_text=QUEUED[1][1]).locator("button.decide")).not_to_have_count(0)
        waiting = page.request.get(live.url + "/queue").json()
        assert [item["key"] for item in waiting["items"]] == ["new-2", "new-3", "new-4"]

        page.select_option("#queue-category", "code")
        expect(rows).to_have_count(2)
        expect(page.locator("#queue-info")).to_contain_text("2 questions waiting in code")
        assert [r.get_attribute("data-key") for r in rows.all()] == ["new-2", "new-4"]
        assert all("category code" in t for t in rows.all_inner_texts())
        screenshot = tmp_path / "queue.png"
        page.screenshot(path=str(screenshot), full_page=True)
        if os.environ.get("DUPQ_SCREENSHOT"):
            shutil.copy(screenshot, Path(os.environ["DUPQ_SCREENSHOT"]).with_name("queue.png"))

        # A ticket system links to a ticket's search (?key=): deciding it against one hit, then against another,
        # re-decides it, sent as a change (no 409) and stored with what it replaced.
        sent = []
        page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/new-4/decision") else None)
        page.goto(live.url + "/?" + urlencode({"q": QUEUED[3][1], "key": "new-4"}))
        results = page.locator("#results > li")
        expect(results).to_have_count(10)
        keys = [
            hit["key"]
            for hit in page.request.post(live.url + "/search", data={"question": QUEUED[3][1]}).json()["results"]
        ]
        for n in (0, 1):
            results.nth(n).get_by_role("button", name="duplicate of this").click()
            expect(results.nth(n).locator(".decide")).to_contain_text(f"marked: new-4 duplicates {keys[n]}")
        assert sent == [{"duplicate_of": keys[0]}, {"duplicate_of": keys[1], "change": True}]
        stored = page.request.get(live.url + "/questions/new-4").json()["metadata"]
        assert stored["duplicate_of"] == keys[1]
        assert [c["was"] for c in stored["decision_changes"]] == [{"duplicate_of": keys[0]}]
        page.close()
