"""Splits a model's thinking from its answer: text inside <think>...</think> is returned as
reasoning_content, the rest as content, as vLLM and llama-server do for DeepSeek-R1/Qwen3-style
models. Streaming-safe: a tag split across tokens is held back until it is complete.
"""

from __future__ import annotations

from cann_llm.text_stream import partial_prefix

__all__ = ["ReasoningSplitter", "prompt_opens_thinking"]

OPEN, CLOSE = "<think>", "</think>"


def prompt_opens_thinking(prompt: str) -> bool:
    """The rendered prompt ends inside a think block (a template that opens it for the model)."""
    return prompt.rfind(OPEN) > prompt.rfind(CLOSE)


class ReasoningSplitter:
    """add(text) -> (reasoning, content) deltas; finish() -> the held-back rest."""

    def __init__(self, thinking: bool = False):
        # "start": a think block may still open (only whitespace so far); "think"; "answer"
        self.mode = "think" if thinking else "start"
        self._buf = ""

    def add(self, text: str) -> tuple[str, str]:
        self._buf += text
        reasoning, content = "", ""
        while self._buf:
            if self.mode == "start":
                stripped = self._buf.lstrip()
                if stripped.startswith(OPEN):
                    self.mode, self._buf = "think", stripped[len(OPEN):]
                    continue
                if OPEN.startswith(stripped):        # maybe the tag's beginning: wait
                    break
                self.mode = "answer"
            elif self.mode == "think":
                i = self._buf.find(CLOSE)
                if i >= 0:
                    reasoning += self._buf[:i]
                    self._buf = self._buf[i + len(CLOSE):].lstrip("\n")
                    self.mode = "answer_start"
                    continue
                keep = partial_prefix(self._buf, CLOSE)
                reasoning += self._buf[:len(self._buf) - keep]
                self._buf = self._buf[len(self._buf) - keep:]
                break
            elif self.mode == "answer_start":       # drop the blank lines after </think>
                self._buf = self._buf.lstrip("\n")
                if not self._buf:
                    break
                self.mode = "answer"
            else:
                content += self._buf
                self._buf = ""
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        rest, self._buf = self._buf, ""
        if self.mode == "think":
            return rest, ""
        return "", rest

