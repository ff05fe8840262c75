"""The `cann-llm` command: entry point of the package for people and scripts.

Subcommands dispatch to the rest of cann_llm; today `devices` lists what the CANN registry sees.
Failures print one line to stderr and exit 1, never a traceback. Later: run, pull, info, test-ops,
diff, bench.
"""

import argparse
import sys

from . import __version__


class CliError(Exception):
    """A failure to report as one line on stderr."""


def _human_bytes(n_bytes: int) -> str:
    if n_bytes >= 1 << 30:
        return f"{n_bytes / (1 << 30):.1f} GiB"
    return f"{n_bytes / (1 << 20):.0f} MiB"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def cmd_devices(args: argparse.Namespace) -> int:
    """List the CANN devices with their free / total memory and the runtime in use."""
    from . import backend

    runtime = backend.runtime_name()
    rows = []
    for device in backend.Registry().devices:
        free, total = device.memory()
        rows.append([device.name, device.description,
                     f"{_human_bytes(free)} / {_human_bytes(total)}", runtime])
    if not rows:
        raise CliError(f"no CANN devices found (runtime {runtime})")
    print(format_table(["device", "description", "memory free / total", "runtime"], rows))
    return 0


def cmd_test_ops(args: argparse.Namespace) -> int:
    """Check the device's ops against the CPU reference (cann_llm.tools.opcheck)."""
    from .tools import opcheck

    return opcheck.main_args(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cann-llm", description="Run GGUF language models on Ascend NPUs (or acl_host).")
    parser.add_argument("--version", action="version", version=f"cann-llm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    devices = commands.add_parser("devices", help="list CANN devices and their memory")
    devices.set_defaults(handler=cmd_devices)
    test_ops = commands.add_parser(
        "test-ops", help="check the device's ops against the CPU reference (test-backend-ops)")
    from .tools import add_arguments as add_test_ops_arguments
    add_test_ops_arguments(test_ops)
    test_ops.set_defaults(handler=cmd_test_ops)
    from .run_cli import add_run_arguments, cmd_run
    run = commands.add_parser(
        "run", help="chat with a model, or answer one prompt (default: SmolLM2-135M-Instruct)",
        description="One-shot chat answer with a prompt (-p or PROMPT), an interactive chat "
                    "without one (or with -i); --raw for plain completion. Timings on stderr.")
    add_run_arguments(run)
    run.set_defaults(handler=cmd_run)
    from .bench import add_bench_arguments, cmd_bench
    bench = commands.add_parser(
        "bench", help="prompt and generation tokens/s, llama-bench style (vs llama.cpp if found)")
    add_bench_arguments(bench)
    bench.set_defaults(handler=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("cann-llm: interrupted", file=sys.stderr)
        return 130
    except (CliError, ImportError, OSError, ValueError) as exc:
        print(f"cann-llm: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # CannError and anything unforeseen: still one line
        print(f"cann-llm: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
