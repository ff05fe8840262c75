"""TextStream (stop strings across token boundaries, held back, never shown; complete UTF-8)
on the default model's tokenizer, and the server's ReasoningSplitter (<think> blocks)."""

import pytest
from hypothesis import given, settings, strategies as st

from cann_llm.text_stream import TextStream
from cann_llm.server.reasoning import ReasoningSplitter, prompt_opens_thinking


@pytest.fixture(scope="module")
def tok(default_model_path):
    from cann_llm.tokenizer import Tokenizer
    return Tokenizer.from_gguf(default_model_path)


def _run(tok, text, stop):
    ts = TextStream(tok, stop)
    pieces = [ts.add(t) for t in tok.tokenize(text, add_special=False)]
    return pieces, pieces + [ts.finish()], ts


def test_a_stop_string_spanning_tokens_is_cut_and_never_shown(tok):
    text = "The capital of France is Paris. It is large."
    pieces, out, ts = _run(tok, text, ["is Par"])
    assert "".join(out) == "The capital of France " and ts.stopped
    assert not any("Par" in p for p in pieces)


def test_text_that_only_starts_a_stop_string_is_released_at_the_end(tok):
    _, out, ts = _run(tok, "Hello wor", ["world"])
    assert "".join(out) == "Hello wor" and not ts.stopped
    pieces, out, _ = _run(tok, "Hello there friend", ["xyz"])
    assert "".join(pieces) == "Hello there friend"     # nothing held back without a match


def test_multibyte_characters_come_out_whole(tok):
    _, out, _ = _run(tok, "Größe 日本語 🙂 ok", [])
    assert "".join(out) == "Größe 日本語 🙂 ok" and all("\ufffd" not in p for p in out)


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet="ab c.", min_size=0, max_size=30),
       stop=st.text(alphabet="ab c.", min_size=1, max_size=4))
def test_the_output_is_the_text_up_to_the_first_stop(tok, text, stop):
    ts = TextStream(tok, [stop])
    ids = tok.tokenize(text, add_special=False)
    shown = "".join(ts.add(t) for t in ids) + ts.finish()
    full = tok.detokenize(ids)
    cut = full.find(stop)
    assert shown == (full if cut < 0 else full[:cut])


@pytest.mark.parametrize("chunks, thinking, reasoning, content", [
    (["<think>", "plan", "</think>", "\n\nanswer"], False, "plan", "answer"),
    (["<th", "ink>a b</th", "ink>c"], False, "a b", "c"),
    (["  <think>x</think>y"], False, "x", "y"),
    (["just text"], False, "", "just text"),
    (["<thi"], False, "", "<thi"),                   # never completed: it was text
    (["step 1", "</think>", "done"], True, "step 1", "done"),
    (["still thinking"], True, "still thinking", ""),
])
def test_reasoning_splitter(chunks, thinking, reasoning, content):
    sp = ReasoningSplitter(thinking)
    got_r, got_c = "", ""
    for c in chunks:
        r, t = sp.add(c)
        got_r, got_c = got_r + r, got_c + t
    r, t = sp.finish()
    assert (got_r + r, got_c + t) == (reasoning, content)


def test_a_prompt_that_opens_a_think_block():
    assert prompt_opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_thinking("<think>\n\n</think>\n\n")
    assert not prompt_opens_thinking("hello")
