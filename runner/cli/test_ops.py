"""`cann-llm test-ops`: the op checker (cann_llm.tools.opcheck) against the CPU reference, in the
manner of llama.cpp's test-backend-ops. The flags live here; the checker is imported when the
command runs."""

from __future__ import annotations

import argparse

__all__ = ["register", "add_arguments", "cmd_test_ops"]


def register(commands) -> None:
    test_ops = commands.add_parser(
        "test-ops", help="check the device's ops against the CPU reference (test-backend-ops)")
    add_arguments(test_ops)
    test_ops.set_defaults(handler=cmd_test_ops)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", nargs="?", default="test", choices=["test", "support"],
                        help="test: compare with the CPU reference (default); support: only "
                             "ask supports_op")
    parser.add_argument("-o", dest="ops", metavar="OP[,OP]",
                        help="op names (ADD, MUL_MAT, SILU, SWIGLU, ...) or exact case strings")
    parser.add_argument("-b", dest="backends", metavar="BACKEND",
                        help="device name(s), e.g. CANN0 or CANN0,CANN1 (default: the first)")
    parser.add_argument("-p", dest="pattern", metavar="REGEX",
                        help="regex searched in the case parameters, e.g. 'type_a=q4_0'")
    parser.add_argument("--seed", type=int, default=0, help="input data seed (default 0)")
    parser.add_argument("--output", choices=["console", "csv", "json"], default="console")
    parser.add_argument("--list", action="store_true", help="list the case strings and exit")


def cmd_test_ops(args: argparse.Namespace) -> int:
    """Check the device's ops against the CPU reference; exit 1 when a case fails."""
    from ..tools import opcheck

    ops = opcheck.split_ops(args.ops)
    if args.list:
        for case in opcheck.select_cases(opcheck.make_cases(), ops, args.pattern):
            print(case.name)
        return 0
    return opcheck.run(args.mode, ops, args.backends, args.pattern, args.seed, args.output)
