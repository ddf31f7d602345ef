"""`:help` and `:quit`: the commands about the shell itself, both REPL-only."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..registry import Command, Param
from ..render import fmt
from ..render.renderers import render
from ..render.tables import add_row
from ..render.words import note, say
from ..reporter import Reporter
from ..session import Session
from .base import REGISTRY, command, complete_command


@dataclass
class HelpEntry:
    name: str
    aliases: tuple
    summary: str
    usage: str  # e.g. ":train [steps=N] [lr=X] ..."


@dataclass
class HelpResult:
    entries: list[HelpEntry]
    detail: HelpEntry | None = None  # set by `:help COMMAND`
    params: list[Param] = field(default_factory=list)  # the detail's options


def _entry(cmd: Command) -> HelpEntry:
    return HelpEntry(cmd.name, cmd.aliases, cmd.summary, cmd.usage())


@command("help", "List the commands, or show one command's options.", params=[
    Param("command", str, help="a command name, e.g. train", positional=True, complete=complete_command),
], needs_torch=False, repl_only=True, bare_words=("help",))  # fmt: skip  (the shell has --help)
def cmd_help(session: Session, args: dict, reporter: Reporter) -> HelpResult:
    entries = [_entry(cmd) for cmd in REGISTRY.values()]
    name = args["command"]
    if name is None or not name.strip():
        return HelpResult(entries)
    cmd = REGISTRY.find(name.split()[0])
    return HelpResult(entries, detail=_entry(cmd), params=[p for p in cmd.params if p.refusal is None])


@render.register(HelpResult)
def render_help(result: HelpResult, console: Console) -> None:
    if result.detail is not None:
        render_command_help(result, console)
        return
    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column("command", style="bold", no_wrap=True)
    table.add_column("summary", ratio=1)
    for entry in result.entries:
        names = ", ".join(":" + n for n in (entry.name, *entry.aliases))
        add_row(table, names, entry.summary)
    console.print(table)
    note(console, "A line without ':' is a prompt: the model continues it (like :gen PROMPT).")
    note(console, ":help COMMAND shows its options; Tab completes; Ctrl-C stops a running command.")


def render_command_help(result: HelpResult, console: Console) -> None:
    """One command: its names, summary, usage line and a table of its options."""
    entry = result.detail
    names = ", ".join(":" + n for n in (entry.name, *entry.aliases))
    say(console, Text(names, style="bold") + Text(f"  {entry.summary}"))
    say(console, Text("usage: ", style="dim") + Text(entry.usage))
    if not result.params:
        return
    with_default = any(p.default is not None for p in result.params)
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("option", no_wrap=True)
    table.add_column("type")
    if with_default:
        table.add_column("default")
    table.add_column("meaning", ratio=1)
    for p in result.params:
        name = p.name.upper() if p.positional else f"{p.name}="
        kind = "|".join(map(str, p.choices)) if p.choices else getattr(p.type, "__name__", str(p.type))
        if p.type is bool and not p.choices:
            kind = "on|off"
        if p.nullable:
            kind += "|none"
        default = [fmt.value(p.default) if p.default is not None else ""] if with_default else []
        also = f" (also {', '.join(f'{alias}=' for alias in p.aliases)})" if p.aliases else ""
        add_row(table, name, kind, *default, p.help + also)
    console.print(table)


@dataclass
class QuitResult:
    pass


@command("quit", "Leave minitf.", aliases=("q", "exit"), needs_torch=False, repl_only=True, ends_session=True,
         bare_words=("exit", "quit", "exit()", "quit()"))
def cmd_quit(session: Session, args: dict, reporter: Reporter) -> QuitResult:
    return QuitResult()


@render.register(QuitResult)
def render_quit(result: QuitResult, console: Console) -> None:
    pass  # the front end ends the session (dispatch: QUIT)
