"""Generated token ids to the text a client sees: complete UTF-8 characters only, and stop
strings matched across token boundaries and never shown.

Used by Model.chat and the server (one TextStream per choice). Text that could be the start of
a stop string is held back until the next tokens decide; the first stop string found ends the
stream and neither it nor anything after it is emitted.
"""

from __future__ import annotations

__all__ = ["TextStream", "partial_prefix"]


def partial_prefix(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (text that may be
    the start of `tag` and must wait for the next tokens)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class TextStream:
    """add(token) -> the text that became safe to show; finish() -> the rest."""

    def __init__(self, tokenizer, stop=()):
        self._detok = tokenizer.incremental()
        self.stops = [s for s in ([stop] if isinstance(stop, str) else (stop or []))
                      if isinstance(s, str) and s]
        self._pending = ""
        self.stopped = False          # a stop string was found: nothing more comes out
        self.text = ""                # everything emitted so far

    def add(self, token: int) -> str:
        if self.stopped:
            return ""
        self._pending += self._detok.add(token)
        return self._release(final=False)

    def finish(self) -> str:
        """The held-back text at the end of generation (a partial stop string is text too)."""
        if self.stopped:
            return ""
        self._pending += self._detok.flush()
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        pending = self._pending
        cut = min((i for i in (pending.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            out, self._pending = pending[:cut], ""
        else:
            hold = 0 if final else self._partial_stop(pending)
            out, self._pending = pending[:len(pending) - hold], pending[len(pending) - hold:]
        self.text += out
        return out

    def _partial_stop(self, text: str) -> int:
        """Length of the longest suffix of `text` that begins some stop string."""
        return max((partial_prefix(text, s) for s in self.stops), default=0)
