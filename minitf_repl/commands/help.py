"""`:help` and `:quit`: the commands about the shell itself, both REPL-only."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.errors import UserError
from ..registry import Command, Param
from ..render import fmt
from ..render.renderers import render
from ..render.tables import add_row
from ..render.words import note, say
from ..reporter import Reporter
from ..syntax import cmd
from ..session import Session
from .base import REGISTRY, command, complete_command

FAMILY = "the shell"  # the heading :help lists this module's commands under


@dataclass
class HelpEntry:
    name: str
    aliases: tuple
    summary: str
    usage: str  # e.g. ":train [steps=N] [lr=X] ..."
    family: str = ""  # the heading it is listed under: its module's FAMILY ("training", "worked out by hand")


@dataclass
class SettingHelp:
    """`:help KEY` for a key of `:set`: what the setting means, its values and where it is set."""

    name: str
    aliases: tuple  # its other spellings (nanoGPT's names)
    section: str  # "model", "training", "generation", "shell" or "data"
    help: str
    kind: str  # "int", "float", "on|off", "gelu|relu|..." (+ "|none" where it can be cleared)
    valid: str  # the valid range in words ("> 0", "in [0, 1)"), "" when any value of its kind is
    default: object
    now: object  # the session's value
    rebuilds: bool  # a model setting whose change rebuilds the model (weights reset)
    commands: list[str]  # other commands that take it as an option of the same name ("train")
    refusal: str | None = None  # a key :set does not take (vocab_size comes from the data)


@dataclass
class HelpResult:
    entries: list[HelpEntry]
    detail: HelpEntry | None = None  # set by `:help COMMAND`
    params: list[Param] = field(default_factory=list)  # the detail's options
    setting: SettingHelp | None = None  # set by `:help KEY` for a setting


def _entry(cmd: Command) -> HelpEntry:
    family = getattr(sys.modules.get(cmd.func.__module__), "FAMILY", "more")  # each family module names itself
    return HelpEntry(cmd.name, cmd.aliases, cmd.summary, cmd.usage(), family)


@command("help", "List the commands, or show one command's options or one setting.", params=[
    Param("command", str, help="a command, e.g. train, or a setting, e.g. lr", positional=True,
          complete=lambda session: complete_command(session) + _setting_keys()),
], needs_torch=False, repl_only=True, bare_words=("help",))  # fmt: skip  (the shell has --help)
def cmd_help(session: Session, args: dict, reporter: Reporter) -> HelpResult:
    entries = [_entry(cmd) for cmd in REGISTRY.values()]
    name = args["command"]
    if name is None or not name.strip():
        return HelpResult(entries)
    word = name.split()[0]
    try:
        cmd = REGISTRY.find(word)
    except UserError:
        setting = setting_help(session, word)  # `:help lr`: a setting, not a command
        if setting is None:
            raise
        return HelpResult(entries, setting=setting)
    return HelpResult(entries, detail=_entry(cmd), params=[p for p in cmd.params if p.refusal is None])


def _setting_keys() -> list[str]:
    """What `:help <Tab>` offers after the commands: the keys `:help KEY` explains, by the seed's names."""
    from .settings import SET

    return sorted(p.name for p in SET.params if not p.positional and p.setting is not None)


def setting_help(session: Session, key: str) -> SettingHelp | None:
    """What `:help KEY` says of the :set key `key` (its name or another spelling), or None if it is none."""
    from .settings import SET, setting_value

    param = SET.param_named(key.strip().lstrip(":"))
    if param is None or param.setting is None:  # preset= is an action, and its own :help set line says it
        return None
    spec = param.setting
    kind = "|".join(map(str, spec.choices)) if spec.choices else ("on|off" if spec.type is bool else spec.type.__name__)
    others = [c.name for c in REGISTRY.values() if c is not SET
              and any(p.name == spec.name and p.refusal is None for p in c.params)]
    return SettingHelp(spec.name, spec.aliases, spec.section, spec.help, kind + ("|none" if spec.nullable else ""),
                       spec.range_text(), spec.default, setting_value(session, spec),
                       spec.section == "model" and not spec.in_place and spec.derived_from is None, others,
                       param.refusal)


@render.register(HelpResult)
def render_help(result: HelpResult, console: Console) -> None:
    if result.setting is not None:
        render_setting_help(result.setting, console)
        return
    if result.detail is not None:
        render_command_help(result, console)
        return
    def names(entry: HelpEntry) -> str:
        return "  " + ", ".join(":" + n for n in (entry.name, *entry.aliases))

    width = max(len(names(entry)) for entry in result.entries)  # one column width for every family's table
    families: dict[str, list[HelpEntry]] = {}
    for entry in result.entries:  # in the registry's order, which keeps a family together
        families.setdefault(entry.family, []).append(entry)
    for family, entries in families.items():
        say(console, family, "bold cyan")
        table = Table(box=None, pad_edge=False, show_header=False)
        table.add_column("command", style="bold", no_wrap=True, min_width=width)
        table.add_column("summary", ratio=1)
        for entry in entries:
            add_row(table, names(entry), entry.summary)
        console.print(table)
    note(console, "A line without ':' is a prompt: the model continues it (like :gen PROMPT).")
    note(console, ":help COMMAND shows its options, :help KEY a setting; Tab completes; Ctrl-C stops a running "
                  "command.")


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
        add_row(table, name, choice_lines(kind), *default, p.help + _also(p.aliases))
    console.print(table)


CHOICE_WIDTH = 16  # the values column of :help COMMAND: lines of at most this many characters, at any width


def choice_lines(kind: str, width: int = CHOICE_WIDTH) -> str:
    """`attn|lens|samples|grad|heads` in lines of at most `width` characters, each broken after a `|`: a
    long list of values would otherwise be cut short ("attn|lens|samples|gra…"), since it has no space to
    wrap at. The same lines at every console width, so that a narrow terminal shows the same words."""
    lines, line = [], ""
    for value in kind.split("|"):
        piece = value if not line else f"|{value}"
        if line and len(line) + len(piece) > width:
            lines.append(line + "|")
            line = value
        else:
            line += piece
    return "\n".join(lines + [line])


def _also(aliases: tuple) -> str:
    """" (also block_size=)": an option's other spellings, as both help views name them."""
    return f" (also {', '.join(f'{alias}=' for alias in aliases)})" if aliases else ""


def render_setting_help(h: SettingHelp, console: Console) -> None:
    """`:help lr`: the setting's line of `:help set`, with its default, its value now and where it is set."""
    say(console, Text(h.name, style="bold") + Text(f"  {h.section} setting{_also(h.aliases)}"))
    say(console, h.help)
    valid = f", {h.valid}" if h.valid else ""
    default = "" if h.refusal else f"default {fmt.value(h.default)}, "  # a derived value's default means nothing
    say(console, f"{h.kind}{valid}; {default}now {fmt.value(h.now)}")
    if h.refusal:
        note(console, h.refusal)
        return
    where = cmd("set", **{h.name: "..."})
    if h.commands:
        where += ", or for one command as its option: " + ", ".join(f"{cmd(c, **{h.name: '...'})}" for c in h.commands)
    note(console, f"{where}{'; the model is rebuilt, weights reset (step 0)' if h.rebuilds else ''}")


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
