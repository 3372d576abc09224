"""Every command's options in docs/commands.md, generated from the command line's own parser.

`python docs/_hooks/commands.py` writes the section between the two markers of the page;
tests/test_documentation.py fails when the page differs from what the parser gives, so an
option added to a command is in the reference the same day.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "commands.md"
BEGIN = "<!-- generated from the parser: python docs/_hooks/commands.py -->"
END = "<!-- end of the generated options -->"
SHARED = {"-h", "--help", "-v", "--verbose", "-p", "--progress", "--no-progress"}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {"default": action.default, "prog": parser.prog}
    return _cell(text)


def _spelling(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    flags = ", ".join(action.option_strings)
    takes = action.nargs != 0
    if takes:
        metavar = action.metavar or action.dest.upper()
        flags += f" {metavar if isinstance(metavar, str) else ' '.join(metavar)}"
    return f"`{flags}`"


def _usage(parser: argparse.ArgumentParser) -> str:
    usage = parser.format_usage().strip()
    return " ".join(usage.removeprefix("usage:").split())


def generated() -> str:
    """The Markdown of every command: its usage and a row per option (the options every
    command shares, -v, -p and --no-progress, are said once above)."""
    sys.path.insert(0, str(PAGE.parents[1]))
    from model_explorer.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [BEGIN, ""]
    for name, command in commands.choices.items():
        lines += [f"### {name}", "", f"`{_usage(command)}`", ""]
        if command.description:
            lines += [_cell(command.description), ""]
        rows = [a for a in command._actions if not (set(a.option_strings) & SHARED)]
        if rows:
            lines += ["| argument | what it does |", "|---|---|"]
            lines += [f"| {_spelling(a)} | {_help(a, command)} |" for a in rows]
            lines.append("")
    lines.append(END)
    return "\n".join(lines)


def page_with(section: str) -> str:
    text = PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + section + text[end:]


if __name__ == "__main__":
    PAGE.write_text(page_with(generated()))
    print(f"wrote {PAGE}")
