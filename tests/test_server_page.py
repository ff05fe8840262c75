"""The chat page at / in a real headless Chromium (Debian's, driven by playwright): a question
typed in is answered by a streamed reply that appears on the page, with tokens/s shown; a
second turn keeps the conversation; the stop button ends a long answer."""

import os
import shutil

import pytest

from serve_util import Server

BROWSER_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _chromium() -> str | None:
    path = os.environ.get("CANN_LLM_CHROMIUM")
    if path:
        return path
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        message = ("no Chromium found (install Debian's chromium, or set CANN_LLM_CHROMIUM); "
                   ".ci/run installs it and sets CANN_LLM_REQUIRE_BROWSER=1")
        if os.environ.get("CANN_LLM_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=BROWSER_FLAGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(default_model_path):
    s = Server(default_model_path, "-c", "512", "--parallel", "2")
    yield s
    assert s.stop() == 0, s.log()


def test_the_page_streams_an_answer_and_keeps_the_conversation(browser, server):
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        page.wait_for_function("document.getElementById('model').textContent.includes('SmolLM2')")
        page.fill("#temp", "0")                        # greedy: the answer is known
        page.fill("#input", "What is the capital of France?")
        page.keyboard.press("Enter")
        answer = page.locator(".msg.assistant").first
        page.wait_for_selector(".msg.assistant[data-done='1']", timeout=60000)
        assert "Paris" in answer.inner_text()
        assert page.locator(".msg.user").first.inner_text() == "What is the capital of France?"
        assert "tokens/s" in page.inner_text("#stats")
        page.fill("#input", "And of Germany?")
        page.click("#send")
        page.wait_for_function("document.querySelectorAll(\".msg.assistant[data-done='1']\")"
                               ".length === 2", timeout=60000)
        assert page.locator(".msg.assistant").nth(1).inner_text().strip()
    finally:
        page.close()


def test_the_stop_button_ends_a_long_answer(browser, server):
    page = browser.new_page()
    try:
        page.goto(server.url + "/")
        page.fill("#input", "Write a very long story about a dragon.")
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('.msg.assistant span') && "
                               "document.querySelector('.msg.assistant span').textContent"
                               ".length > 20", timeout=60000)
        page.click("#stop")
        page.wait_for_selector(".msg.assistant[data-done='stopped']", timeout=10000)
        assert not page.is_disabled("#send")
    finally:
        page.close()
