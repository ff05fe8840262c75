"""What the `cann-llm` commands share: the one-line error types, argparse errors as one line, the
model-path resolver, the --device flag, table formatting and the stderr helpers.

Standard library only at import time: building the parser must not load the backend or a tool.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

__all__ = ["CliError", "RunError", "one_line_errors", "resolve_model", "check_device_flag",
           "parse_device", "format_table", "human_bytes", "size_text", "err", "log", "Stream"]


class CliError(Exception):
    """A failure to report as one line on stderr (exit 1)."""


class RunError(CliError, ValueError):
    """A bad argument or input, reported as one line."""


def one_line_errors(p: argparse.ArgumentParser) -> None:
    """argparse's own errors (`-n abc`) as one line and exit status 1, like every other failure
    of the subcommand, instead of the usage text and status 2."""
    name = p.prog.split()[-1]

    def error(message):
        sys.stderr.write(f"cann-llm: {name}: {message} (see cann-llm {name} --help)\n")
        sys.exit(1)
    p.error = error


# ---- the model path ---------------------------------------------------------------------------

def resolve_model(model: str | None, fetch: bool = True, check: bool = True) -> str:
    """The .gguf path a command loads: MODEL as given, or (none, or "default") the default model.

    fetch: the default model is fetched into the cache on first use (progress on stderr), as
    `run` does; without it only the cache is looked in (`info`). check: a given MODEL must be an
    existing file (else the loader reports it)."""
    if not model or model == "default":
        from .. import model_store
        if not fetch:
            try:
                return str(model_store.default_model_path(download=False))
            except (FileNotFoundError, model_store.ModelDownloadError) as exc:
                raise CliError(str(exc)) from None
        try:
            return str(model_store.default_model_path(download=True))
        except model_store.ModelDownloadError as e:
            raise RunError(f"default model: {e}".replace("\n", " | ")) from None
    if check:
        if not os.path.exists(model):
            hint = "" if model.endswith(".gguf") else \
                " (MODEL is a .gguf path; give the prompt with -p to use the default model)"
            raise RunError(f"{model}: no such file{hint}")
        if os.path.isdir(model):
            raise RunError(f"{model}: is a directory, not a .gguf file")
    return model


# ---- the --device flag ------------------------------------------------------------------------

_DEVICE_RE = re.compile(r"^(CPU|CANN\d+)(,(CPU|CANN\d+))*$")


def check_device_flag(value: str, flag: str = "--device") -> None:
    """The spelling of a device flag (run, bench): CANN0, CANNn, CPU or a comma list, no spaces
    and no empty entries. What the names mean (CPU alone, each device once) is parse_device's,
    checked when the model loads, as cann_llm.load does for the Python API."""
    if not _DEVICE_RE.match(value.upper()):
        raise RunError(f"{flag} {value!r}: expected CANN0, CANNn, CPU or a comma list")


def parse_device(value: str) -> list[str]:
    """Device names from a flag's value, by model.parse_devices, the parser of load(device=...):
    upper case, CPU alone, each device once; the same rules and messages as the Python API."""
    from ..model import parse_devices
    return parse_devices(value)


# ---- text -------------------------------------------------------------------------------------

def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def human_bytes(n_bytes: int) -> str:
    """GiB with one decimal, else whole MiB (device memory)."""
    if n_bytes >= 1 << 30:
        return f"{n_bytes / (1 << 30):.1f} GiB"
    return f"{n_bytes / (1 << 20):.0f} MiB"


def size_text(n_bytes: int) -> str:
    """GiB, MiB or KiB with one decimal, else bytes (file and tensor sizes)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n_bytes >= 1 << shift:
            return f"{n_bytes / (1 << shift):.1f} {unit}"
    return f"{n_bytes} B"


# ---- stderr and the streamed answer -----------------------------------------------------------

def err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def log(msg: str) -> None:
    """The model's log lines (-v: summary, graph splits): each prefixed, and never inside a
    streamed answer's line (stdout and stderr share a terminal)."""
    if Stream.current is not None and sys.stdout.isatty() and sys.stderr.isatty():
        Stream.current.end()        # one terminal: the answer's open line ends first
    for line in str(msg).splitlines():
        err(line if line.startswith("cann-llm") else f"cann-llm: {line}")


class Stream:
    """Writes pieces to stdout as they come and remembers whether the line is open."""
    current = None      # the stream being written, so log lines can end its open line first

    def __init__(self):
        self.text = []
        self.open_line = False
        Stream.current = self

    def write(self, piece: str) -> None:
        if piece:
            sys.stdout.write(piece)
            sys.stdout.flush()
            self.text.append(piece)
            self.open_line = not piece.endswith("\n")

    def end(self) -> None:
        if self.open_line:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.open_line = False
