"""`:help` and `:quit`: the commands about the shell itself, both REPL-only."""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.errors import UserError
from ..registry import Command, Param, clip
from ..render import fmt
from ..render.renderers import render
from ..render.tables import add_row, fits
from ..render.words import note, say
from ..reporter import Reporter
from ..syntax import REPL, cmd, named, syntax
from ..session import Session
from .base import REGISTRY, command, complete_command

if TYPE_CHECKING:
    from .settings import SettingHelp

FAMILY = "the shell"  # the heading :help lists this module's commands under


@dataclass
class HelpEntry:
    name: str
    aliases: tuple
    summary: str
    usage: str  # e.g. ":train [steps=N] [lr=X] ..."
    family: str = ""  # the heading it is listed under: its module's FAMILY ("training", "worked out by hand")
    guide: str = field(default="", metadata={"view_only": True})  # Command.guide: docs/PAGE#SECTION


@dataclass
class HelpResult:
    entries: list[HelpEntry]
    detail: HelpEntry | None = None  # set by `:help COMMAND`
    params: list[Param] = field(default_factory=list)  # the detail's options
    setting: SettingHelp | None = None  # set by `:help KEY` for a setting (commands.settings)
    # `:help WORD` of a word commands or settings declare a topic of theirs (Command.topics, settings.SETTING_TOPICS):
    # the word, and what declares it; beside a command's detail where the word also names one (`:help positions`)
    topic: str | None = field(default=None, metadata={"view_only": True})
    topical: list[HelpEntry] = field(default_factory=list, metadata={"view_only": True})
    topic_settings: list[SettingHelp] = field(default_factory=list, metadata={"view_only": True})
    # the topic's meaning in minitf's words where it is GPT-2's and nanoGPT's name (settings.TOPIC_GLOSSES): `c_attn`
    # is q_proj, k_proj and v_proj here
    gloss: str | None = field(default=None, metadata={"view_only": True})
    # an option whose default is a setting's (`:gen`'s n, temperature): that setting's value in this session, by option
    setting_values: dict = field(default_factory=dict, metadata={"view_only": True})


def _entry(cmd: Command) -> HelpEntry:
    family = getattr(sys.modules.get(cmd.func.__module__), "FAMILY", "more")  # each family module names itself
    return HelpEntry(cmd.name, cmd.aliases, cmd.summary, cmd.usage(), family, cmd.guide)


@command("help", "List the commands, or show one command's options or one setting.", params=[
    Param("command", str, help="a command, e.g. train, or a setting, e.g. lr", positional=True,
          complete=lambda session: complete_command(session) + _setting_keys(), spellings=lambda: _spellings()),
], aliases=("h", "?"), needs_torch=False, repl_only=True, bare_words=("help", "?", "help()"),
   about_commands=True, pairs_in_text=True)  # fmt: skip  (the shell has --help; `:help qkv at=` asks about at=)
def cmd_help(session: Session, args: dict, reporter: Reporter) -> HelpResult:
    entries = [_entry(cmd) for cmd in REGISTRY.values()]
    name = args["command"]
    if name is None or not name.strip():
        return HelpResult(entries)
    word = name.split()[0].split("=")[0] or name.split()[0]  # `:help lr=`: the setting lr, as `:set lr=` spells it
    try:
        cmd = REGISTRY.find(word)
    except UserError:
        from .settings import setting_help, shown_setting

        setting = shown_setting(session, word)  # `:help lr`: a setting, not a command; `:help preset` as `:set preset`
        if setting is None and len(name.split()) > 1:  # `:help learning rate`: learning_rate, its words joined
            setting = setting_help(session, "_".join(name.split()))
        if setting is None:
            # `:help position`, `:help wte`, `:help token embedding`: what shows it, as its commands declare it
            topic = next((t for t in (topic_word(word), topic_word(name)) if any(on_topic(t))), None)
            if topic is None:
                raise no_such_help(word, session) from None
            return _topic_help(session, entries, topic)
        return HelpResult(entries, setting=setting)
    if len(name.split()) > 1:  # `:help train steps`: that option alone
        return _option_help(session, entries, cmd, name.split()[1])
    # `:help positions`, an alias of :context (the loss by position): the commands that show the positions themselves
    # follow its options, where the alias alone hid them
    commands, settings = on_topic(topic_word(word))
    params = [p for p in cmd.params if p.refusal is None]
    return HelpResult(entries, detail=_entry(cmd), params=params,
                      topic=topic_word(word) if commands or settings else None,
                      topical=[_entry(c) for c in commands if c is not cmd],
                      topic_settings=_settings(session, settings), setting_values=_setting_values(session, params))


def _setting_values(session: Session, params: list[Param]) -> dict[str, str]:
    """The session's value of each setting an option defaults to: `:help gen`'s default column was blank for n,
    temperature, top_k and top_p ("default: the n setting"), and their values (200, 0.8) needed :config."""
    from .settings import SET, setting_help

    values = {}
    for p in params:
        name = p.default_from or (p.setting.name if p.setting is not None else None)
        # an option whose help says it defaults to that setting (`:gen`'s n=), not :set's own keys, whose value now
        # read "default 64" after :set n_embd=64 (:help KEY says "default 128, now 64")
        if p.default is not None or name is None or f"the {name} setting" not in (p.help or ""):
            continue
        if session is None:  # (help asked with no session: the value a new one starts from)
            param = SET.param_named(name)
            value = param.setting.default if param is not None and param.setting is not None else None
        elif (h := setting_help(session, name)) is not None:
            value = h.now if h.now is not None else h.default
        else:
            continue
        values[p.name] = "none" if value is None else fmt.value(value)
    return values


def topic_word(text: str) -> str:
    """The topic `:help WORDS` asks about, spelt as topics are declared: `Token embedding` is token_embedding."""
    return "_".join(text.strip().lstrip(":").replace("-", "_").lower().split())


def on_topic(word: str) -> tuple[list[Command], list[str]]:
    """The commands, in the registry's order, and the settings' keys that declare `word` a topic of theirs."""
    from .settings import SETTING_TOPICS

    return ([c for c in REGISTRY.values() if word in c.topics],
            [key for key, words in SETTING_TOPICS.items() if word in words])


def _settings(session: Session, keys: list[str]) -> list[SettingHelp]:
    from .settings import setting_help

    return [h for key in keys if (h := setting_help(session, key)) is not None]


def shell_topic(words: list[str]) -> HelpResult | str | None:
    """`minitf help WORDS` of a topic (`help position`, `help token embedding`, its words joined as `:help` joins
    them): what `:help WORDS` lists, the shell's commands alone, with no session to read the settings' values from;
    a setting's key where the topic is that setting alone (`help tied`: tie_embeddings, which `minitf set KEY`
    shows). None where the words name no topic. The shell said "error: no command or setting named 'position'" and
    exited 2 before listing what covers it, and `help token embedding` was asked "did you mean minitf tok?"."""
    from .settings import SET, SettingHelp

    if not words:
        return None
    topic = next((t for t in (topic_word(words[0]), topic_word(" ".join(words))) if any(on_topic(t))), None)
    if topic is None:
        return None
    commands, settings = on_topic(topic)
    commands = [c for c in commands if not c.repl_only]  # `minitf quit` is no command
    if not commands and not settings:
        return None
    if not commands and len(settings) == 1:
        return settings[0]
    specs = [SET.param_named(key).setting for key in settings]
    # what render_topic reads of a setting (its name, section and line); its value is a session's, and there is none
    shown = [SettingHelp(s.name, s.aliases, s.section, s.help, "", "", s.default, None, False, []) for s in specs]
    return HelpResult([], topic=topic, topical=[_entry(c) for c in commands], topic_settings=shown,
                      gloss=gloss_of(topic))


def _topic_help(session: Session, entries: list[HelpEntry], topic: str) -> HelpResult:
    """`:help WORD` of a topic: the commands that declare it and the settings that do; one setting alone is its own
    help (`:help tied`: tie_embeddings), as its spelling would show it."""
    commands, settings = on_topic(topic)
    shown = _settings(session, settings)
    if not commands and len(shown) == 1:
        return HelpResult(entries, setting=shown[0])
    return HelpResult(entries, topic=topic, topical=[_entry(c) for c in commands], topic_settings=shown,
                      gloss=gloss_of(topic))


def gloss_of(topic: str) -> str | None:
    """What the topic, a name of GPT-2's and nanoGPT's, means in minitf's words, as settings.TOPIC_GLOSSES declares
    it; None for a word of minitf's own."""
    from .settings import TOPIC_GLOSSES

    return TOPIC_GLOSSES.get(topic)


def _option_help(session: Session, entries: list[HelpEntry], command_: Command, key: str) -> HelpResult:
    """`:help CMD KEY`: an option made from a setting as `:help KEY` shows the setting; any other, its line."""
    key = key.split("=")[0]
    # the text (`:help checks which`) by the name :help CMD lists it under (WHICH), as the options are
    param = command_.param_named(key) or next((p for p in command_.params if p.positional
                                               and p.name == key.lower()), None)
    if param is None or param.refusal is not None:
        raise UserError(f"{cmd(command_.name)} has no option {clip(key)!r}; {cmd('help', command_.name)} lists its "
                        "options")
    if param.setting is not None:
        from .settings import setting_help

        setting = setting_help(session, param.setting.name)
        if setting is not None:
            return HelpResult(entries, setting=setting)
    return HelpResult(entries, detail=_entry(command_), params=[param])


def _setting_keys() -> list[str]:
    from .settings import setting_keys

    return setting_keys()


def _spellings() -> dict[str, str]:
    from .settings import setting_spellings

    return setting_spellings()


def no_such_help(word: str, session: Session | None = None) -> UserError:
    """`:help WORD` of a word that names no command and no setting: where :set declares it lives instead (worked out
    for `session`'s model where one is at hand), else the closest command or setting, if one is close."""
    from .settings import SET, setting_keys, setting_spellings

    key = word.strip().lstrip(":").lower()
    commands, settings = on_topic(topic_word(key))
    commands = [c for c in commands if syntax() == REPL or not c.repl_only]
    if commands or settings:  # `minitf help position`: the shell's help lists commands alone, so say what shows it
        shown = [f"what shows it: {', '.join(cmd(c.name) for c in commands)}"] if commands else []
        if settings:
            keys = [f"{name} ({cmd('help' if syntax() == REPL else 'set', name)})" for name in settings]
            shown.append(f"the setting{'s' if len(settings) > 1 else ''} about it: {', '.join(keys)}")
        return UserError(f"no command or setting named {clip(key)!r}; {'; '.join(shown)}")
    if (elsewhere := SET.elsewhere.get(key.replace("-", "_"))) is not None:  # `:help head_size` was "did you mean
        return UserError(f"no setting named {clip(key)!r}: {elsewhere(session)}")  # :heads?", where :set explains it
    # preset=, an action of :set shown as a setting: `:help preset` shows it, but `minitf help` hands set the keys
    # of settings alone (cli._setting), so the shell's help of it comes here: point to what shows it
    if (param := SET.param_named(key)) is not None and not param.positional and param.setting is None:
        return UserError(f"{key} is no setting but what {cmd('set', **{key: param.metavar})} changes: "
                         f"{cmd('set', key)} shows it")
    # a setting's help: `:help lr`, from the shell `minitf set lr` (`minitf lr --help` is no command)
    # from the shell, no command of the REPL alone (`minitf quit` is refused)
    spelled = {name: cmd(name) for name, c in REGISTRY.names().items() if syntax() == REPL or not c.repl_only} | \
        {key: cmd("help", key) if syntax() == REPL else cmd("set", key)
         for key in [*setting_keys(), *setting_spellings()]}  # `:help blok_size`: did you mean :help block_size?
    close = difflib.get_close_matches(key[:40], list(spelled), n=1, cutoff=0.6)
    hint = f"; did you mean {spelled[close[0]]}?" if close else ""
    return UserError(f"no command or setting named {clip(key)!r}{hint} ({cmd('help')} lists the commands, "
                     f"{cmd('config')} the settings)")


@render.register(HelpResult)
def render_help(result: HelpResult, console: Console) -> None:
    if result.setting is not None:
        from .settings import render_setting_help

        render_setting_help(result.setting, console)
        return
    if result.detail is not None:
        render_command_help(result, console)
        if result.topic is not None:
            also_on_topic(result, console)
        return
    if result.topic is not None:
        render_topic(result, console)
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
        if fits(console, table) and console.width - width - 1 >= MIN_SUMMARY:
            console.print(table)
            continue
        # 40-odd columns: a summary beside the names would cut its words ("mixture-of-expe…"), or, whole, take a
        # line for every two words in a column 16 wide (:help ran to some 400 lines)
        for entry in entries:
            say(console, Text(names(entry).strip(), style="bold"), indent=2)  # a second line of names stays in
            say(console, entry.summary, indent=4)
    note(console, "A line without ':' is a prompt: the model continues it (like :gen PROMPT).")
    note(console, ":help COMMAND shows its options, :help KEY a setting; Tab completes; Ctrl-C stops a running "
                  "command.")
    # a script of these lines is a lesson to hand on; docs/commands.md has the rest (comments, errors by line)
    note(console, "Lines piped in run as a script, each as typed here: minitf --transcript < lesson.txt (--transcript "
                  "prints each line before its output).")


def render_topic(result: HelpResult, console: Console) -> None:
    """`:help position`: the commands that show it, each with its summary, then the settings about it."""
    # a name of GPT-2's and nanoGPT's is spelt as their code spells it (`ln_f`, not "ln f"), then said in minitf's words
    word = result.topic if result.gloss is not None else result.topic.replace("_", " ")
    say(console, Text(word, style="bold") + Text(": what shows it, and the settings about it"))
    if result.gloss is not None:
        say(console, Text(word, style="bold") + Text(f": {result.gloss}"))
    # from the shell its name as a line starts it, `minitf embed` (its other names are the REPL's to list)
    rows = [(", ".join(":" + n for n in (e.name, *e.aliases)) if syntax() == REPL else named(e.name), e.summary)
            for e in result.topical]
    rows += [(h.name, f"{h.section} setting: {h.help}") for h in result.topic_settings]
    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column("name", style="bold", no_wrap=True)
    table.add_column("what", ratio=1)
    for row in rows:
        add_row(table, *row)
    if fits(console, table) and console.width - max((len(r[0]) for r in rows), default=0) - 1 >= MIN_SUMMARY:
        console.print(table)
    else:  # 40-odd columns: each summary under its name, as :help lays its families out there
        for name, what in rows:
            say(console, Text(name, style="bold"), indent=2)
            say(console, what, indent=4)
    # from the shell a setting is `minitf set KEY`: "minitf KEY --help" is no command
    setting = cmd("help", "KEY") if syntax() == REPL else cmd("set", "KEY")
    note(console, f"{cmd('help', 'COMMAND')} shows a command's options, {setting} a setting")


def also_on_topic(result: HelpResult, console: Console) -> None:
    """After `:help positions` (:context's alias): the other commands and the settings about that word."""
    names = [cmd(e.name) for e in result.topical] + [f"the setting {h.name}" for h in result.topic_settings]
    if names:
        note(console, f"also about {result.topic.replace('_', ' ')}: {', '.join(names)} ({cmd('help', 'NAME')} "
                      "says more of each)")


def render_command_help(result: HelpResult, console: Console) -> None:
    """One command: its names, summary, usage line and a table of its options."""
    from .settings import also

    entry = result.detail
    names = ", ".join(":" + n for n in (entry.name, *entry.aliases))
    say(console, Text(names, style="bold") + Text(f"  {entry.summary}"))
    say(console, Text("usage: ", style="dim") + Text(entry.usage))
    if entry.guide:  # where its terms are explained: a clone's docs/ (a pip install has the repository's on the web)
        note(console, f"worked through, with what each term means: docs/{entry.guide} in minitf's repository")
    if not result.params:
        return
    with_default = any(p.default is not None or p.name in result.setting_values for p in result.params)
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("option", no_wrap=True)
    table.add_column("type")
    if with_default:
        table.add_column("default")
    table.add_column("meaning", ratio=1)
    rows = []
    for p in result.params:
        # a switch (on/off, off unless given) as the usage line above names it, [--all]: `all=` there read as
        # another form of option (both work: --all, all=on)
        switch = p.type is bool and p.default is False and not p.positional
        name = p.name.upper() if p.positional else f"--{p.name}" if switch else f"{p.name}="
        kind = "|".join(map(str, p.choices)) if p.choices else getattr(p.type, "__name__", str(p.type))
        if p.type is bool and not p.choices:
            kind = "on|off"
        if p.nullable:
            kind += "|none"
        default = fmt.value(p.default) if p.default is not None else result.setting_values.get(p.name, "")
        rows.append((name, kind, default, p.help + also(p.aliases)))
        add_row(table, name, choice_lines(kind), *([rows[-1][2]] if with_default else []), rows[-1][3])
    if fits(console, table):
        console.print(table)
        return
    # 40-odd columns: the table's columns cut its words ("int|no…", "likelie…"); one option a paragraph instead
    for name, kind, default, meaning in rows:
        kinds = choice_lines(kind, max(CHOICE_WIDTH, console.width - len(name) - 6)).split("\n")
        say(console, Text(name, style="bold") + Text(f"  {kinds[0]}" + ("" if len(kinds) > 1 or not default
                                                                         else f"  default {default}")))
        for k, line in enumerate(kinds[1:], 2):
            say(console, line + (f"  default {default}" if default and k == len(kinds) else ""), indent=4)
        say(console, meaning, indent=4)


MIN_SUMMARY = 30  # the narrowest summary column :help lays beside the names; below it, a summary under its names
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
