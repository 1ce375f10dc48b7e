"""The real dashboard in headless Chromium (Debian's package, driven by playwright).

Never downloads a browser: it launches ``/usr/bin/chromium`` (``SNERD_CHROMIUM``
overrides). Without it the test fails under CI (``CI=true``; ``.ci/run`` installs it)
and is skipped, loudly, elsewhere.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from dashkit import EXPECTED_COUNTS, progress_record, reader_engine, seed_storage

from snerd.dashboard import start_dashboard, url_of
from snerd.dispatcher.engine import Engine

CHROMIUM = os.environ.get("SNERD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
TIMEOUT_MS = 10_000


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"browser test cannot run in CI: {reason}")
    pytest.skip(f"BROWSER TEST SKIPPED: {reason} (install with: apt-get install -y chromium)")


# One Chromium per module (launching it is most of a test's time); each test gets a
# fresh browser context (no shared cookies, storage or cache), its own storage, engine
# and dashboard. Everything here runs on the module's event loop, where the browser is.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def browser() -> AsyncIterator[Any]:
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM}")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest_asyncio.fixture(loop_scope="module")
async def storage(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    await seed_storage(path)
    return path


@pytest_asyncio.fixture(loop_scope="module")
async def engine(storage: Path) -> AsyncIterator[Engine]:
    eng = reader_engine(storage)
    await eng.start()
    yield eng
    await eng.drain(0)


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any, engine: Engine) -> AsyncIterator[object]:
    runner = await start_dashboard(engine, port=0)
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    tab = await context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.base_url = url_of(runner)  # type: ignore[attr-defined]
    try:
        yield tab
    finally:
        await context.close()
        await runner.cleanup()
    assert not errors, f"JavaScript errors on the page: {errors}"


async def _text(page, selector: str) -> str:
    return (await page.locator(selector).inner_text()).strip()


async def test_overview_shows_the_counts_of_the_storage(page):
    from playwright.async_api import expect

    await page.goto(page.base_url)
    for state, count in EXPECTED_COUNTS.items():
        await expect(page.locator(f'.card[data-state="{state}"] .n')).to_have_text(str(count))
    await expect(page.locator("#conn")).to_have_class("conn live")
    await expect(page.locator('tr[data-group="smtp"]')).to_contain_text("2/2")
    await expect(page.locator("#dlq-count")).to_have_text("2")


async def test_task_timeline_shows_its_history(page):
    from playwright.async_api import expect

    await page.goto(page.base_url + "#/task/flaky")
    items = page.locator("#timeline li")
    await expect(items).to_have_count(3)
    events = [await items.nth(i).get_attribute("data-event") for i in range(3)]
    assert events == ["enqueued", "claimed", "retry_scheduled"]
    await expect(items.nth(2)).to_contain_text("card declined")
    await expect(items.nth(1)).to_contain_text("worker-1")
    await expect(page.locator(".detail-head .badge")).to_have_text("scheduled")


async def test_a_completed_tasks_page_shows_its_result(page):
    from playwright.async_api import expect

    await page.goto(page.base_url + "#/task/fetch-a")
    await expect(page.locator(".detail-head .badge")).to_have_text("completed")
    await expect(page.locator("#task-result")).to_contain_text('"rows": 3')


async def test_live_progress_appears_without_reload(page, engine):
    from playwright.async_api import expect

    await page.goto(page.base_url + "#/task/fetch-b")
    await expect(page.locator("#progress .pct")).to_have_text("40%")
    await expect(page.locator("#conn")).to_have_class("conn live")
    await page.evaluate("window.__sameDocument = true")
    record = progress_record(engine.state, "fetch-b", {"pct": 85, "step": "parsing"}, 0.0)
    record["ts"] = round(engine.clock.now() * 1000)
    await engine.log.append([record], durable=False)
    await expect(page.locator("#progress .pct")).to_have_text("85%")
    await expect(page.locator("#progress-data")).to_contain_text("parsing")
    assert await page.evaluate("window.__sameDocument === true")  # no reload happened


async def test_requeue_from_the_dlq_end_to_end(page, engine):
    from playwright.async_api import expect

    # no live updates (the WebSocket never reaches the server): the list and the counts
    # change only through the reload the click itself asks for
    await page.route_web_socket("**/ws", lambda ws: None)
    await page.goto(page.base_url + "#/dlq")
    row = page.locator('#dlq tr[data-task-id="doomed"]')
    await expect(row).to_contain_text("import exploded")
    await row.get_by_role("button", name="Requeue").click()
    await expect(row).to_have_count(0)
    await expect(page.locator(".toast").first).to_contain_text("Requeued doomed")
    assert "doomed" in engine.state.tasks and "doomed" not in engine.state.dlq
    assert engine.state.tasks["doomed"].retry_count == 0
    await expect(page.locator("#dlq-count")).to_have_text("1")
    await page.goto(page.base_url + "#/tasks?state=pending")
    await expect(page.locator('#tasks tr[data-task-id="doomed"] .badge')).to_have_text("pending")


async def test_cancel_from_the_task_page_shows_it_cancelled_at_once(page, engine):
    from playwright.async_api import expect

    # No live updates for this page (its WebSocket never reaches the server): only the
    # reload the click itself asks for can show the change.
    await page.route_web_socket("**/ws", lambda ws: None)
    await page.goto(page.base_url + "#/task/later")
    badge = page.locator(".detail-head .badge").first
    await expect(badge).to_have_text("scheduled")
    await page.get_by_role("button", name="Cancel task").click()
    await expect(page.locator(".toast").first).to_contain_text("Cancelled")
    await expect(badge).to_have_text("cancelled")
    assert "later" not in engine.state.tasks
    await expect(page.get_by_role("button", name="Cancel task")).to_have_count(0)
