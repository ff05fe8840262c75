"""Write docs/cli-reference.md from the argparse definitions of `cann-llm` (runner/cli/).

    python scripts/gen_cli_docs.py            # rewrite docs/cli-reference.md
    python scripts/gen_cli_docs.py --check    # exit 1 if it is stale (tests/test_docs.py)

One section per subcommand, in the order of `cann-llm --help`: its description, the usage line
and a table of its arguments with their defaults and help. Needs cann_llm installed (any build).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "cli-reference.md"
WIDTH = 100         # usage lines are wrapped at this width, whatever the terminal

HEADER = """\
# `cann-llm` command reference

Generated from the argparse definitions in `runner/cli/` by `python scripts/gen_cli_docs.py`; do
not edit by hand (tests/test_docs.py fails when this page and the code differ). The prose, the
examples, the sampling order and the benchmark method are in [cli.md](cli.md); the server's
endpoints and fields in [server.md](server.md); the op checker in [test-ops.md](test-ops.md);
`diff` in [debugging.md](debugging.md).

Every command prints one line on stderr and exits 1 on failure; `cann-llm COMMAND --help` lists
the same arguments.
"""


def _parser() -> argparse.ArgumentParser:
    # Defaults that come from the environment (--api-key reads CANN_LLM_API_KEY) must not leak
    # into the page: build the parser without the project's variables.
    for key in [k for k in os.environ if k.startswith("CANN_LLM_")]:
        del os.environ[key]
    from cann_llm.cli import build_parser
    return build_parser()


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(action: argparse.Action) -> str:
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return ""
    value = action.default
    if value is None or value == [] or value is argparse.SUPPRESS:
        return ""
    return f"`{value}`"


def _name(action: argparse.Action, formatter: argparse.HelpFormatter) -> str:
    if not action.option_strings:
        return f"`{formatter._metavar_formatter(action, action.dest.upper())(1)[0]}`"
    if action.nargs == 0:
        return ", ".join(f"`{s}`" for s in action.option_strings)
    args = formatter._format_args(action, action.dest.upper())
    return ", ".join(f"`{s} {args}`" for s in action.option_strings)


def _synopsis(sub: argparse.ArgumentParser, formatter: argparse.HelpFormatter) -> str:
    """`cann-llm run [options] [MODEL] [PROMPT ...]`: built here rather than by format_usage,
    whose wrapping differs between Python versions."""
    parts = [sub.prog]
    if any(a.option_strings and not isinstance(a, argparse._HelpAction) for a in sub._actions):
        parts.append("[options]")
    parts += [formatter._format_args(a, a.dest.upper()) for a in sub._actions
              if not a.option_strings]
    return " ".join(parts)


def _section(name: str, sub: argparse.ArgumentParser, summary: str) -> list[str]:
    sub.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    formatter = sub._get_formatter()
    lines = [f"## cann-llm {name}", "", _cell(sub.description or summary), ""]
    lines += ["```text", _synopsis(sub, formatter), "```", ""]
    rows = [a for a in sub._actions if a.help is not argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction)]
    if rows:
        lines += ["| argument | default | meaning |", "|---|---|---|"]
        for action in rows:
            help_text = formatter._expand_help(action) if action.help else ""
            name = _name(action, formatter).replace("|", "\\|")
            lines.append(f"| {name} | {_default(action)} | {_cell(help_text)} |")
        lines.append("")
    return lines


def render() -> str:
    parser = _parser()
    choices = parser.commands.choices
    summaries = {a.dest: a.help for a in parser.commands._choices_actions}
    lines = [HEADER, "| command | what |", "|---|---|"]
    for name in choices:
        lines.append(f"| [`{name}`](#cann-llm-{name}) | {_cell(summaries.get(name, ''))} |")
    lines.append("")
    for name, sub in choices.items():
        lines += _section(name, sub, summaries.get(name, ""))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = TARGET.read_text() if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(REPO)} is stale: run python scripts/gen_cli_docs.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
