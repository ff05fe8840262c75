"""The `cann-llm` command: entry point of the package for people and scripts.

One module per command, each with a register(subparsers) that adds its subparser and handler:
devices, run, serve, bench, pull/info/quantize (model_files), test-ops, diff. common holds what they
share (errors, the model-path resolver, the --device flag, output helpers). Importing this
package and building the parser load no backend and no tool: each command imports what it uses
when it runs. Failures print one line to stderr and exit 1, never a traceback.
"""

import argparse
import sys

from .. import __version__
from . import bench, devices, diff, model_files, run, serve, test_ops
from .common import CliError, RunError

__all__ = ["main", "build_parser", "CliError", "RunError"]

# the order of `cann-llm --help`
COMMANDS = (devices, test_ops, run, serve, bench, model_files, diff)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cann-llm", description="Run GGUF language models on Ascend NPUs (or acl_host).")
    parser.add_argument("--version", action="version", version=f"cann-llm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(commands)
    parser.commands = commands
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:   # report through the subcommand's parser: its usage, not the top level's
        sub = parser.commands.choices.get(getattr(args, "command", None) or "", parser)
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
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
