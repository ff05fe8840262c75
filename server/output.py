"""What one choice shows the client, built token by token: its text (stop strings held back and
never shown), its thinking split from its answer (chat), its tool calls parsed out of the answer
(chat with tools), and its logprobs in OpenAI's chat or legacy completion shape.
"""

from __future__ import annotations

from cann_llm.text_stream import TextStream

from .reasoning import ReasoningSplitter
from .tools import ToolCallParser

__all__ = ["ChoiceOutput"]


class ChoiceOutput:
    def __init__(self, index: int, tokenizer, stop, *, chat: bool, thinking: bool = False,
                 logprobs: int | None = None, text_offset: int = 0, tools=None):
        self.index = index
        self.tokenizer = tokenizer
        self.text = TextStream(tokenizer, stop)
        self.split = ReasoningSplitter(thinking) if chat else None
        self.calls = ToolCallParser(tools) if chat and tools is not None else None
        self._fresh_calls: list[dict] = []
        self.chat = chat
        self.logprobs = logprobs
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.lp_chat: list[dict] = []
        self.lp_legacy = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                          "text_offset": []}
        self._offset = text_offset
        self.finish_reason: str | None = None
        self.n_tokens = 0

    def _piece(self, token: int) -> tuple[str, list[int]]:
        raw = self.tokenizer.token_to_piece(int(token), False)
        return raw.decode("utf-8", errors="replace"), list(raw)

    def _add_logprob(self, lp) -> list[dict]:
        text, raw = self._piece(lp.token)
        if self.chat:
            top = []
            for tid, val in lp.top:
                t, b = self._piece(tid)
                top.append({"token": t, "logprob": val, "bytes": b})
            entry = {"token": text, "logprob": lp.logprob, "bytes": raw, "top_logprobs": top}
            self.lp_chat.append(entry)
            return [entry]
        legacy = self.lp_legacy
        legacy["tokens"].append(text)
        legacy["token_logprobs"].append(lp.logprob)
        legacy["top_logprobs"].append({self._piece(t)[0]: v for t, v in lp.top})
        legacy["text_offset"].append(self._offset)
        self._offset += len(text)
        return [{"tokens": [text], "token_logprobs": [lp.logprob],
                 "top_logprobs": [legacy["top_logprobs"][-1]],
                 "text_offset": [legacy["text_offset"][-1]]}]

    def add(self, token: int | None, lp=None) -> tuple[str, str, list[dict]]:
        """(reasoning, content, logprob entries) that became visible with this token."""
        entries = []
        if token is None:
            return "", "", entries
        self.n_tokens += 1
        if lp is not None and self.logprobs is not None and not self.text.stopped:
            entries = self._add_logprob(lp)
        return self._show(self.text.add(token)) + (entries,)

    def finish(self, reason: str) -> tuple[str, str]:
        self.finish_reason = reason
        reasoning, content = self._show(self.text.finish())
        if self.split is not None:
            r2, c2 = self.split.finish()
            c2 = self._calls(c2)
            self.reasoning.append(r2)
            self.content.append(c2)
            reasoning, content = reasoning + r2, content + c2
        if self.calls is not None:
            c3, new = self.calls.finish()
            self._fresh_calls += new
            self.content.append(c3)
            content += c3
            if self.calls.calls and reason == "stop":
                self.finish_reason = "tool_calls"
        return reasoning, content

    def _calls(self, content: str) -> str:
        if self.calls is None or not content:
            return content
        content, new = self.calls.add(content)
        self._fresh_calls += new
        return content

    def take_calls(self) -> list[dict]:
        """The tool-call deltas since the last take (OpenAI's streamed tool_calls entries)."""
        new, self._fresh_calls = self._fresh_calls, []
        return new

    @property
    def tool_calls(self) -> list[dict]:
        return self.calls.calls if self.calls is not None else []

    def _show(self, text: str) -> tuple[str, str]:
        if not text:
            return "", ""
        if self.split is None:
            self.content.append(text)
            return "", text
        reasoning, content = self.split.add(text)
        content = self._calls(content)
        self.reasoning.append(reasoning)
        self.content.append(content)
        return reasoning, content

    @property
    def full_content(self) -> str:
        return "".join(self.content)

    @property
    def full_reasoning(self) -> str | None:
        r = "".join(self.reasoning)
        return r if r else None
