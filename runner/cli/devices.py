"""`cann-llm devices`: the CANN devices the registry sees, their memory and the runtime."""

from __future__ import annotations

import argparse

from .common import CliError, format_table, human_bytes

__all__ = ["register", "cmd_devices"]


def register(commands) -> None:
    devices = commands.add_parser("devices", help="list CANN devices and their memory")
    devices.set_defaults(handler=cmd_devices)


def cmd_devices(args: argparse.Namespace) -> int:
    """List the CANN devices with their free / total memory and the runtime in use."""
    from .. import backend

    runtime = backend.runtime_name()
    rows = []
    for device in backend.Registry().devices:
        free, total = device.memory()
        rows.append([device.name, device.description,
                     f"{human_bytes(free)} / {human_bytes(total)}", runtime])
    if not rows:
        raise CliError(f"no CANN devices found (runtime {runtime})")
    print(format_table(["device", "description", "memory free / total", "runtime"], rows))
    return 0
