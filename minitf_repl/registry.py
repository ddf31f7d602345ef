"""What a command is: plain data that every front end reads, so none of them decides by a command's name.

A `Command` declares everything the REPL, piped input and the one-shot shell need to know about it:
its options (`Param`s, with their type, help, choices, limits, aliases and what completes them), its
free text (the positional option), whether it needs torch, whether it exists only in the REPL,
whether Ctrl-C should interrupt it outright, and how the shell takes its options. A `Registry` is a
table of commands; the commands themselves register into one (commands/base.py's REGISTRY). `:help`,
completion, the shell's subcommands and `--json` are generated from it, so they cannot drift from the code.

This module is only data and small pure functions: it imports no other module of the shell.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .core.config import SettingSpec
from .core.errors import UsageError, UserError
from .syntax import REPL, SHELL, cmd, syntax, without_setting


@dataclass
class Param:
    name: str
    type: type  # int | float | str | bool
    default: Any = None  # None: not given (the session's setting applies)
    help: str = ""
    choices: tuple | None = None
    positional: bool = False  # the free text of a command (PROMPT, NAME, COMMAND); at most one per command
    nullable: bool = False  # accepts "none" to clear the setting (`:set top_k=none`)
    aliases: tuple = ()  # other accepted spellings (`batch` for `batch_size`)
    short: str | None = None  # a one-letter form: `-n 50` (the REPL and the shell alike)
    low: float | None = None  # smallest value allowed (checked when given)
    limit: int | None = None  # largest value a person may type
    setting: SettingSpec | None = None  # the declaration this option was made from, if any: it checks the value
    default_from: str | None = None  # not made from it, the setting whose value applies when it is not given
    kept: bool = False  # the option changes its setting for good, as :set does (`:train lr=`), not for one command
    # What Tab offers for the value: a function of the session (checkpoint names, say). Choices and
    # on/off complete without it.
    complete: Callable[[Any], list[str]] | None = None
    refusal: str | None = None  # this key is known but cannot be given; the message says why and what to do
    meta: str | None = None  # how the usage line names the value, when the type does not say it (N|all)
    # A positional made of two texts (`:patch CLEAN CORRUPT`): given as two words or two quoted texts,
    # they reach the command joined by this separator, which it also accepts typed (CLEAN vs CORRUPT).
    pair: str | None = None
    blank: bool = False  # spaces alone are a value (`target=" "`: the space token); else "needs a value"
    # A positional of several words each from its completions (`:checks batch init`): Tab offers the rest after
    # one. Any other completes its first word only (a second checkpoint name after `:load run1` is an error).
    several: bool = False
    required: bool = False  # a positional the command cannot run without (`:load NAME`): its usage has no brackets
    # the words of a `several` text that begin it (`:ablate off`, which may name the parts it puts back): Tab offers
    # them first only
    alone: tuple = ()
    # What Tab offers after one of `alone`, where that word changes what the rest may name (`:ablate off` puts back
    # parts that are off: offering every head there named parts it would refuse). None: the same words as before it.
    after_alone: Callable[[Any], list[str]] | None = None
    # A positional text may start with '-' given after `--` (`minitf gen -- -5 apples`); False where it never may
    # (a new checkpoint's name: core.checkpoint.check_new_name), so the shell does not offer `--` for it.
    dash: bool = True
    # A file or a folder (`:data PATH`, `:save hf:PATH`): a double-quoted Windows path given to its command keeps its
    # backslashes (parsing.WINDOWS_PATH), where a prompt's "\n" is a newline.
    path: bool = False
    # What Tab finds on the disk for the value: "files" (a file, and the folders on the way to it), "folders", or
    # "hf" (folders, after `hf:`). A data file's path completed to nothing: `:data ./my<Tab>` left it all to type.
    browse: str | None = None
    # The options whose `key=value` pairs a text holds (:compare's contenders are :set's settings): Tab completes their
    # keys and values there, as a command's own (`:compare n_la<Tab>` offered nothing).
    pairs: Callable[[], list[Param]] | None = None
    # Other spellings of the text's words, each -> the word Tab completes it to (:help's settings by nanoGPT's names:
    # block_size -> max_seq_len), as an option's aliases complete to its name.
    spellings: Callable[[], dict[str, str]] | None = None

    def positional_text(self, words: list[str]) -> str:
        """The positional's value from the words typed for it: two texts of a pair joined by its separator,
        anything else by spaces (the REPL's parser and the shell's arguments both read it so)."""
        return (self.pair if self.pair and len(words) == 2 else " ").join(words)

    @property
    def spec(self) -> SettingSpec:
        """What checks a value: the setting this option was made from, or one made from its own fields."""
        if self.setting is not None:
            return self.setting
        return SettingSpec(name=self.name, type=self.type, default=self.default, help=self.help, choices=self.choices,
                           low=self.low, limit=self.limit, nullable=self.nullable)

    def completions(self, session) -> list[str]:
        """What Tab offers for the value, in the REPL and in bash/zsh/fish: choices, on/off, `complete`'s list."""
        if self.choices:
            values = [str(c) for c in self.choices]
        elif self.type is bool:
            values = ["on", "off"]
        elif self.complete is not None:
            values = list(self.complete(session))
        else:
            values = []
        return values + (["none"] if self.nullable else [])

    @property
    def metavar(self) -> str:
        if self.meta:
            return self.meta
        if self.choices:
            return "|".join(map(str, self.choices))
        return {int: "N", float: "X", bool: "on|off"}.get(self.type, "NAME")


def param_from_setting(spec: SettingSpec, **changes) -> Param:
    """The option that sets or overrides a declared setting: same name, type, help, choices and checks."""
    param = Param(
        name=spec.name, type=spec.type, help=spec.help, choices=spec.choices, nullable=spec.nullable,
        aliases=spec.aliases, limit=spec.limit, setting=spec,
        refusal=None if spec.derived_from is None else f"{spec.name} comes from {spec.derived_from}",
        complete=(lambda session, values=spec.suggestions: list(values)) if spec.suggestions else None,
        path=spec.folder, browse="folders" if spec.folder else None,
    )
    return replace(param, **changes)


@dataclass
class Command:
    name: str
    func: Callable  # func(session, args: dict, reporter) -> a result dataclass
    summary: str  # one line, ends with a period
    aliases: tuple = ()
    params: list[Param] = field(default_factory=list)
    needs_torch: bool = True  # False: runs before the background torch import has finished
    repl_only: bool = False  # no shell subcommand (`:quit` means nothing to a one-shot `minitf`)
    # Ctrl-C during most commands asks them to stop at the next step or token (Reporter.should_stop).
    # An interruptible command polls nothing: the front door lets Ctrl-C raise KeyboardInterrupt inside
    # it, and the command cleans up and reports (`:save` keeps the previous checkpoint).
    interruptible: bool = False
    # True: the shell takes the options as KEY=VALUE arguments rather than one --flag each (`:set` has
    # dozens of keys, and `minitf set lr=1e-3 n_layers=2` reads like the REPL line).
    pairs: bool = False
    takes_plain_text: bool = False  # a typed line without ':' runs this command with the line as its text
    # Words that, typed alone without ':', run this command instead of being a prompt (`exit`, `help`),
    # as ipython, pgcli and ollama users expect. `:gen exit` still continues the text "exit".
    bare_words: tuple = ()
    # True: a `key=value` that is not one of its options is part of its free text, not an error
    # (`:compare norm=rmsnorm vs preset=llama` takes settings as its text).
    pairs_in_text: bool = False
    # True: its text is another command's name (`:help train`), so `--NAME` of it typed after a command is
    # this command about that one (`:train --help` is `:help train`, as `minitf train --help` is).
    about_commands: bool = False
    ends_session: bool = False  # the REPL ends after it (`:quit`)
    # True: it says itself what is wrong with the device setting (:device lists the devices beside it), so the shell
    # runs it with a --device that names no device, which it refuses before any other command
    reports_device: bool = False
    # Names users look for here that are no option of it, each with where that lives instead (a function, as the
    # front end then speaking writes commands): `:set schedule=cosine` is :train's schedule=
    elsewhere: dict = field(default_factory=dict)
    # The page and section of the repository's docs/ that work its output through, as "inside-views.md#anchor":
    # `:help NAME` names it (a view's terms, q, d_k, x̂, the KV cache, are explained there, not in one line of help)
    guide: str = ""
    # Words a learner looks for that name what it shows, no name or alias of it (`:resid`: embedding, wte, position):
    # `:help WORD` lists every command, and every setting, that declares WORD (`:help position` found only the alias
    # :positions of :context, the loss by position), as it finds a setting by nanoGPT's spelling
    topics: tuple = ()
    # The version of its --json fields ("schema": "minitf.NAME/N"): raise it whenever a field of its
    # result changes (name, type, removal or addition); schema.py and its test say when.
    json_version: int = 1

    @property
    def positional(self) -> Param | None:
        return next((p for p in self.params if p.positional), None)

    @property
    def takes_a_path(self) -> bool:
        """Whether a value of this command names a file or a folder (a Param marked `path`)."""
        return any(p.path for p in self.params)

    @property
    def options(self) -> list[Param]:
        return [p for p in self.params if not p.positional and p.refusal is None]

    def param_named(self, key: str) -> Param | None:
        """The option spelt `key` (its name, an alias or its short form; dashes and underscores alike, any case),
        refused ones included, or None."""
        key = key.replace("-", "_").lower()
        return next((p for p in self.params if not p.positional
                     and (p.name == key or key in p.aliases or (p.short is not None and key == p.short))), None)

    def switch_named(self, word: str) -> Param | None:
        """The on/off option `word` names alone (its name or an alias, not its short form), or None: `:ls all` and
        `minitf ls all` set all=on, as `--all` does."""
        param = self.param_named(word)
        named = param is not None and word.replace("-", "_").lower() in (param.name, *param.aliases)
        return param if named and param.type is bool and param.refusal is None else None

    def find_param(self, key: str) -> Param:
        """The option `key` (dashes and underscores alike, aliases included), or a UserError naming valid keys."""
        p = self.param_named(key)
        if p is not None:
            if p.refusal is not None:
                raise UserError(p.refusal)
            return p
        shown, key = key, key.replace("-", "_").lower()  # named as typed: `foo-bar`, not `foo_bar`
        if key == "json" and syntax() == REPL:  # docs/json.md's `minitf CMD --json`, typed at the REPL's prompt
            raise UserError(f"--json belongs to one-shot commands run from your system's shell (minitf {self.name} "
                            f"--json prints one JSON document); here the result is shown as text: leave --json out")
        # the keys its help lists: from the shell, not those given as minitf's own options (checkpoint_dir is
        # --checkpoint-dir there; "lists its 48 keys" sent a user to a help of 47)
        names = [p.name for p in self.options
                 if syntax() != SHELL or p.setting is None or p.setting.shell_option is None]
        if not names:
            raise UsageError(f"{cmd(self.name)} takes no options; got {clip(shown)!r}")
        close = self.close_option(key)
        hint = f"; did you mean {close}?" if close else ""
        if key in self.elsewhere:
            with without_setting(key):  # its lines leave out the --set that was refused (they failed alike)
                hint = f": {self.elsewhere[key]()}"
        chosen = self.options_choosing(key)  # `:set gpt2`, `:set rope`: a value typed without its key
        if len(chosen) == 1:
            hint = f"; did you mean {chosen[0].name}={key}?"
        valid = f"valid: {', '.join(names)}" if len(names) <= 12 else f"{cmd('help', self.name)} lists its {len(names)} keys"
        # the REPL's :help counts those too: said, where the two front ends' counts differ (47 here, 48 there)
        own = [f"{p.name} is {p.setting.shell_option}" for p in self.options if syntax() == SHELL
               and p.setting is not None and p.setting.shell_option is not None]
        valid += f", and {' and '.join(own)} from the shell" if own else ""
        if self.pairs and syntax() == SHELL:  # `minitf set bogus=1` and `--set bogus=1` alike: "for --set" named an
            raise UsageError(f"unknown key {clip(shown)!r}{hint} ({valid})")  # option the first did not type
        raise UsageError(f"unknown option {clip(shown)!r} for {cmd(self.name)}{hint} ({valid})")

    def close_option(self, key: str) -> str | None:
        """The option a key that names none may have meant: one whose setting declares it a beginner's word for it
        (SettingSpec.meant_by: `context` for max_seq_len), the one option it begins (`temp`: temperature; difflib
        offered steps), else the closest spelling, an alias named by its option (`n_embed` -> d_model, through
        nanoGPT's n_embd); None: none is close."""
        key = key.replace("-", "_").lower()
        meant = [p.name for p in self.options if p.setting is not None and key in p.setting.meant_by]
        if meant:
            return meant[0]
        spelled = {spelling: p.name for p in self.options for spelling in (p.name, *p.aliases)}
        begun = {name for spelling, name in spelled.items() if len(key) >= 3 and spelling.startswith(key)}
        if len(begun) == 1:
            return begun.pop()
        close = difflib.get_close_matches(key[:40], list(spelled), n=1, cutoff=0.6)
        return spelled[close[0]] if close else None

    def options_choosing(self, word: str) -> list[Param]:
        """The options (not the text) one of whose choices `word` is, in any case: what a lone word may have meant."""
        word = word.strip().lower()
        return [p for p in self.options if not p.positional and p.choices
                and word in (str(c).lower() for c in p.choices)]

    def usage(self) -> str:
        """One line such as ":train [steps=N] [lr=X] ..."."""
        if self.pairs:
            shows = f" | :{self.name} {self.positional.metavar} ..." if self.positional is not None else ""
            return f":{self.name} key=value ...{shows}"
        parts = [f":{self.name}"]
        for p in self.params:
            if p.refusal is not None:
                continue
            if p.positional:
                named = p.meta or p.name.upper()  # :patch CLEAN CORRUPT, as its help and the docs name the two
                parts.append(named if p.required else f"[{named}]")
            elif p.type is bool and p.default is False:
                parts.append(f"[--{p.name}]")
            else:
                parts.append(f"[{p.name}={p.metavar}]")
        return " ".join(parts)


class Registry(Mapping):
    """The commands of one application: a read-only mapping name -> Command; `command(...)` adds one."""

    def __init__(self):
        self.commands: dict[str, Command] = {}

    def command(self, name: str, summary: str, *, aliases: tuple = (), params: list[Param] | tuple = (),
                **flags) -> Callable:
        """Decorator: register `func(session, args, reporter) -> result` as command `name`."""

        def register(func: Callable) -> Callable:
            self.add(Command(name, func, summary, tuple(aliases), list(params), **flags))
            return func

        return register

    def add(self, command: Command) -> Command:
        taken = {n for c in self.commands.values() for n in (c.name, *c.aliases)}
        clash = sorted(taken & {command.name, *command.aliases})
        if clash and self.commands.get(command.name) is None:
            raise ValueError(f"command name(s) {', '.join(clash)} already registered")
        spellings = [s for p in command.params if not p.positional for s in (p.name, *p.aliases)]
        twice = sorted({s for s in spellings if spellings.count(s) > 1})
        if twice:  # find_param would take the first silently
            raise ValueError(f":{command.name} spells option(s) {', '.join(twice)} twice")
        self.commands[command.name] = command
        return command

    def remove(self, name: str) -> None:
        self.commands.pop(name, None)

    def __iter__(self):
        return iter(self.commands)

    def __len__(self) -> int:
        return len(self.commands)

    def __getitem__(self, name: str) -> Command:
        return self.commands[name]

    def names(self) -> dict[str, Command]:
        """Every name and alias -> its command."""
        out: dict[str, Command] = {}
        for c in self.values():
            out[c.name] = c
            for alias in c.aliases:
                out.setdefault(alias, c)
        return out

    def find(self, name: str) -> Command:
        """The command called `name` (or one of its aliases; a leading ':' is ignored)."""
        key = name.strip().lstrip(":").lower()
        names = self.names()
        if key in names:
            return names[key]
        close = difflib.get_close_matches(key[:40], list(names), n=1, cutoff=0.6)
        hint = f"; did you mean {cmd(names[close[0]].name)}?" if close else ""
        raise UserError(f"unknown command :{clip(key)}{hint} ({cmd('help')} lists commands)")

    def bare_word(self, line: str) -> Command | None:
        """The command a line that is just one of its bare words runs (`exit`), else None."""
        word = line.strip().lower()
        return next((c for c in self.commands.values() if word in c.bare_words), None)

    @property
    def plain_text_command(self) -> Command | None:
        return next((c for c in self.values() if c.takes_plain_text), None)


def clip(text: str, width: int = 40) -> str:
    """A user's text shortened for a one-line message."""
    return text if len(text) <= width else text[: width - 3] + "..."
