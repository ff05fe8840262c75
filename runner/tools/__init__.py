"""Developer tools on top of the backend: the op checker (opcheck, `cann-llm test-ops`).

This module stays light (no compiled backend import) so the CLI can build its parser without it.
"""

import argparse


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
