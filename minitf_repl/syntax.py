"""How a message names a command: `:train` to a REPL user, `minitf train` to a shell user.

Messages say what to do next by naming a command: "the trained model was kept as checkpoint K:
:load K brings it back", "this model has no experts; :set n_experts=4 adds them". The same message
reaches a user of the REPL (or of piped REPL lines) and of the one-shot shell, and each must read it
in the syntax they type. So no message spells a command out: it calls `cmd(...)` (or `restore`,
`train_first`), which phrases the command in the syntax of the front end now speaking. The front
door says which one that is while a command runs and renders (`speaking`); the shell's entry point
says it for the whole invocation. Outside any front end (tests, `run_command`) it is the REPL's.
Like the registry, which phrases its own errors with it, this module imports nothing of the shell.

The shell's phrasing follows from what a one-shot command is: its session ends with it. Settings
therefore go with the global `--set` (`minitf --set n_experts=4 experts`), a checkpoint comes back
through the global `--load` (`minitf --load K gen`), and a command that needs an earlier command's
model names the checkpoint that model was saved as (`load=`). A one-shot command's session is made by the
global options typed before it (`--data sort`, `--checkpoint-dir DIR`, `--set lr=0.02`, `--load K`), so a command
line it suggests carries them too (`invoked_with`): `minitf --data sort gen 12=` is told `minitf --data sort train`,
which trains on sort, not `minitf train`, which would train on the default data.
"""

from __future__ import annotations

import contextlib
import contextvars
import shlex

REPL, SHELL = "repl", "shell"
_SYNTAX: contextvars.ContextVar[str] = contextvars.ContextVar("minitf_syntax", default=REPL)
# The global options of this one-shot invocation, as (option, value) pairs in the order a line gives them.
_INVOKED: contextvars.ContextVar[tuple] = contextvars.ContextVar("minitf_invoked_with", default=())
# minitf's own on/off options, given as it starts (cli.root declares them; a test holds the two equal): the REPL names
# them where a command is given one (`:train --debug`) without importing the front door, which imports the REPL
OWN_SWITCHES = ("--debug", "--transcript", "--version")
_KEPT_WITH_LOAD = ("--device", "--checkpoint-dir")  # what a line that starts from another checkpoint keeps


@contextlib.contextmanager
def _holding(var: contextvars.ContextVar, value):
    """Within this block, `var` holds `value`."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def speaking(syntax: str):
    """Within this block, messages name commands in `syntax` ("repl" or "shell")."""
    return _holding(_SYNTAX, syntax)


def syntax() -> str:
    return _SYNTAX.get()


# Whether the lines come from a person at a keyboard (the REPL's prompt), not from a script piped in: a hint of what to
# type next ("now type some text for the model to continue") is for that person only. True outside any front end.
_KEYBOARD: contextvars.ContextVar[bool] = contextvars.ContextVar("minitf_at_keyboard", default=True)


def typed_at_keyboard(keyboard: bool):
    """Within this block, the lines being run were typed at a keyboard (`keyboard`) or read from a script."""
    return _holding(_KEYBOARD, keyboard)


def at_keyboard() -> bool:
    return _KEYBOARD.get()


# The one-shot shell's command: its own words as typed after its name (`--steps 30`), for a message's line that runs
# it again with one thing changed (dispatch.phrase, a refused folder): the line left them out
_TYPED_AFTER: contextvars.ContextVar[str] = contextvars.ContextVar("minitf_typed_after", default="")


def typed_after(words: str):
    """Within this block, the running command's own words as typed after its name (`typed_again` reads them)."""
    return _holding(_TYPED_AFTER, words)


def typed_again() -> str:
    """" --steps 30": the running one-shot command's own words, to end a line that runs it again; "" in the REPL."""
    words = _TYPED_AFTER.get()
    return f" {words}" if words and syntax() == SHELL else ""


@contextlib.contextmanager
def invoked_with(options):
    """Within this block, a shell command line that `cmd` writes starts with `options`, the (option, value) pairs
    of minitf's own options that made this one-shot session (`("--data", "sort")`, `("--set", "lr=0.02")`)."""
    token = _INVOKED.set(tuple((o, str(v)) for o, v in options))
    try:
        yield
    finally:
        _INVOKED.reset(token)


def _minitf(load: str | None = None, given: tuple = ()) -> list[str]:
    """`minitf` and the global options of this session; with `load`, a line that starts from that checkpoint
    instead, which brings its own data and settings (so only where checkpoints live, the device and the shell's own
    settings stay; a Hugging Face folder brings no data, so --data stays too). `given`: an (option, value) pair to
    give as well, in place of the session's own (--data, --device) or after them (--set)."""
    kept = _KEPT_WITH_LOAD + (("--data",) if load and load.startswith("hf:") else ())
    pairs = _without(list(_INVOKED.get()) if load is None else
                     [*((o, v) for o, v in _INVOKED.get() if o in kept), *_unsaved_settings()], given)
    pairs += [("--load", load)] if load else []
    pairs += [given] if given else []
    return ["minitf", *(f"{o} {shlex.quote(v)}" for o, v in pairs)]


def _unsaved_settings() -> list[tuple]:
    """The session's --set pairs of settings no checkpoint brings (the shell's own, threads and autosave, and the
    sampling ones), which a line that starts from a checkpoint keeps: the stop line `minitf --load mine train --save
    mine` left `--set threads=1` out, and the run it continued summed in another order than the one it went on with."""
    out = []
    for option, value in _INVOKED.get():
        left = [pair for pair in set_pairs(value) if _setting_name(pair) in _UNSAVED[0]] if option == "--set" \
            else []
        if left:
            out.append((option, " ".join(shlex.quote(pair) for pair in left)))
    return out


def _without(pairs: list[tuple], given: tuple) -> list[tuple]:
    """The session's option `pairs` less what `given` replaces: the same option, or for --set the same settings, key
    by key under any of their spellings (one --set may hold several pairs, `--set 'lr=0.005 warmup_steps=5'`, of
    which the others stay; a `learning_rate=` kept beside a given `lr=` was refused as "given twice")."""
    if not given:
        return list(pairs)
    if given[0] != "--set":
        return [(o, v) for o, v in pairs if o != given[0]]
    replaced = {_setting_name(pair) for pair in set_pairs(given[1])}
    out = []
    for option, value in pairs:
        if option != "--set":
            out.append((option, value))
            continue
        left = [pair for pair in set_pairs(value) if _setting_name(pair) not in replaced]
        if len(left) == len(set_pairs(value)):
            out.append((option, value))
        elif left:
            out.append((option, " ".join(shlex.quote(pair) for pair in left)))
    return out


def set_pairs(value: str) -> list[str]:
    """The KEY=VALUE pairs of one --set (several may go in one, as the shell's quoting kept them)."""
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def pair_key(pair: str) -> str:
    """The key of a `KEY=VALUE` pair as typed, in one spelling: lower case, dashes as underscores."""
    return pair.partition("=")[0].strip().lower().replace("-", "_")


def _setting_name(pair: str) -> str:
    """The setting a `KEY=VALUE` pair sets, by its own name (`learning_rate=...` and `LR=...` set lr)."""
    return _SETTING_NAME[0](pair_key(pair))


# How a key of --set reads as its setting's name; the commands that know the settings say (spell_settings_with):
# this module imports nothing of the package
_SETTING_NAME: list = [lambda key: key]


# The settings no checkpoint brings, which a line from --load keeps (the commands that know the settings say)
_UNSAVED: list = [frozenset()]


def keep_with_load(names) -> None:
    """`names`: the settings a checkpoint does not bring, kept in a line that starts from one."""
    _UNSAVED[0] = frozenset(names)


def spell_settings_with(name_of) -> None:
    """`name_of(key)`: the name of the setting `key` spells (an alias: learning_rate is lr), or `key` itself."""
    _SETTING_NAME[0] = name_of


def loaded() -> bool:
    """Whether this one-shot session started from a checkpoint (`minitf --load NAME ...`)."""
    return any(o == "--load" for o, _ in _INVOKED.get())


def interactive() -> str:
    """The line that opens minitf's interactive shell on this one-shot session (`minitf --data sort`): its data,
    settings and checkpoint folder; `minitf` alone outside the shell."""
    return " ".join(_minitf())


def given_before(name: str, option: str, value, new_model_on: str | None = None, keep_load: bool = True,
                 autosaving: bool = False) -> str:
    """From the shell, the line that runs command `name` in this session with minitf's own `option` (--set, --data,
    --load) given `value`: `minitf --checkpoint-dir DIR --set lr=0.1 train`. What a one-shot `minitf set lr=0.1`,
    `minitf data sort` or `minitf load K` would have to be given as, for the command after it to see it.

    `new_model_on`: the setting rebuilds the model, which --load refuses (it would reset the loaded weights), so
    where this session was loaded the line starts a new model on that data instead (`--data sort`). `keep_load`
    False: the line leaves this session's --load out (--checkpoint-dir DIR moves where --load reads from).
    `autosaving`: the next line loads the autosave this train writes, so the line leaves out this session's `--set
    autosave=off`, as _saving_train does (kept, the train saved nothing, and `--load autosave` after it failed or,
    worse, opened an older autosave without a word)."""
    if autosaving:
        with _autosaving():
            return given_before(name, option, value, new_model_on, keep_load)
    if option == "--load":
        return cmd(name, load=str(value))
    if option == "--data" and name == "train" and loaded():
        # a loaded checkpoint brings its data, and --load refuses a --data of another: train's own --data switches
        # after the load, as :data after :load does (`minitf --load a1 --data sort train` was refused)
        return " ".join([*_minitf(), name, "--data", shlex.quote(str(value))])
    words = _minitf(given=(option, str(value)))
    if not keep_load and loaded():
        words = ["minitf", *(f"{o} {shlex.quote(v)}" for o, v in _without(_INVOKED.get(), (option, str(value)))
                             if o != "--load"), f"{option} {shlex.quote(str(value))}"]
    if new_model_on is not None and loaded():
        kept = [(o, v) for o, v in _without(_INVOKED.get(), (option, str(value))) if o != "--load"]
        pairs = [*(p for p in kept if p[0] != "--data"), ("--data", new_model_on), (option, str(value))]
        words = ["minitf", *(f"{o} {shlex.quote(v)}" for o, v in pairs)]
    return " ".join([*words, name])


def setting_text(value) -> str:
    """A setting's value as both syntaxes write it: on/off, none, 3 significant digits for a float."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def exact_text(value) -> str:
    """A value as setting_text writes it, but a float in full (`rope_base=1.23e+05` built another model than the
    checkpoint's 123456): for lines that rebuild a model as it was."""
    return repr(value) if isinstance(value, float) else setting_text(value)


def own_settings(config) -> dict:
    """The settings of `config` (a Settings, e.g. a ModelConfig) that are not their defaults, those derived from
    others aside (vocab_size: the data gives it): what a line that builds the same model again must carry."""
    return {spec.name: getattr(config, spec.name) for spec in type(config).specs()
            if spec.derived_from is None and getattr(config, spec.name) != spec.default}


def cmd(name: str, *positional, load: str | None = None, **options) -> str:
    """Command `name` with its positional text and options, as the front end now speaking writes it.

    REPL: `:name TEXT key=value`. Shell: `minitf name TEXT --key value` (`--key` / `--no-key` for on/off), after
    the global options of this invocation (`invoked_with`: `minitf --data sort name ...`, the same session); `:set`'s
    pairs as the global `--set key=value` (its names alone, which show those settings, as `minitf set KEY`); `:data
    X` and `:device X`, a switch, as the global `--data X` and `--device X` (a one-shot `minitf data X` only shows
    it). `load`: the checkpoint a one-shot command must start from to find this session's model (`minitf --load
    NAME name ...`, which brings its own data and settings); the REPL has that model already and leaves it out.
    """
    if syntax() == REPL:
        words = [f":{name}", *(_repl_text(p) if isinstance(p, PromptText) else str(p) for p in positional),
                 *(f"{k}={_repl_value(setting_text(v))}" for k, v in options.items())]
        return " ".join(words)
    if name == "set" and positional and not options and not any("=" in str(p) for p in positional):
        return " ".join([*_minitf(), "set", *map(str, positional)])  # names alone: the settings shown, nothing set
    if name == "set":
        pairs = [*map(str, positional), *(f"{k}={setting_text(v)}" for k, v in options.items())]
        return " ".join(f"--set {pair}" for pair in pairs) or "--set"
    if name in ("data", "device") and positional and not options:  # a switch: the global option, as set's --set
        return f"--{name} {shlex.quote(str(positional[0]))}"
    if name == "help":
        return f"minitf {positional[0]} --help" if positional else "minitf --help"
    words = _minitf(load) + [name]
    texts = [_shell_text(p) if isinstance(p, PromptText) else shlex.quote(str(p)) if " " in str(p) else str(p)
             for p in positional]
    # text that starts with a dash goes after `--`, the options before it: quoted or not, `minitf gen '-x'` reads
    # an option -x; so does text with a word that reads as KEY=VALUE (`minitf gen 'cache=off' --n 1` turned the cache
    # off, and 'n=5' was "n is given twice")
    dashed = any(isinstance(p, PromptText) and (p.startswith("-") or any(_reads_as_option(w) for w in p.split()))
                 for p in positional)
    words += [] if dashed else texts
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{key.replace('_', '-')}")
        else:
            words += [flag, setting_text(value)]
    return " ".join(words + (["--", *texts] if dashed else []))


def _reads_as_option(word: str) -> bool:
    """Whether the shell may read `word` as one of a command's options (KEY=VALUE), whatever it was meant as."""
    key, eq, _ = word.partition("=")
    return bool(eq) and key.replace("-", "_").isidentifier()


class PromptText(str):
    """Text a command reads as its words (a prompt), never as options or syntax: cmd writes it so that the line gives
    it back whole. The views' sample (commands.base.sample_prompt) is one: the data's own text, which can be code
    (`  x=1` and a newline). Other positional values (`:compare lr=0.01 lr=0.02`) are a command's syntax: as they
    are."""


def _repl_text(text: str) -> str:
    """Text as a REPL line reads it back: as it is where its words say it (`:gen the cat`), else in double quotes
    with the parser's escapes (parsing._tokenize): text with a newline, a tab, spaces at its ends or two in a row, a
    quote, a backslash, or a word the parser would take as an option (x=1, --x)."""
    plain = " ".join(text.split()) == text and not any(ch in text for ch in "\"'\\")
    if plain and not any("=" in word or word.startswith("-") for word in text.split()):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


def _repl_value(value: str) -> str:
    """An option's value as a REPL line reads it back: in quotes where it holds a space (`checkpoint_dir="my runs"`:
    unquoted, the line read `runs` as a second word). Double quotes keep a Windows path's backslashes (a path
    option's rule, parsing), so they are the first choice; single quotes where the value holds a double quote."""
    if not any(ch.isspace() for ch in value):
        return value
    return f'"{value}"' if '"' not in value else f"'{value}'"


def word(value: str) -> str:
    """`value` as one word of a line in the syntax speaking now: quoted where a space would split it."""
    return _repl_value(value) if syntax() == REPL else shlex.quote(value)


def _shell_text(text: str) -> str:
    """Text as one shell word: quoted where it needs it; a newline or a tab as bash's $'...' escapes, so that the
    line stays one line."""
    if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'":  # wholly in quotes: the shell's text would be
        text = _repl_text(text)  # what they hold (parsing.shell_text), so they go inside quotes of their own
    if "\n" in text or "\t" in text:
        return "$'" + "".join({"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t"}.get(ch, ch) for ch in text) + "'"
    return shlex.quote(text)


def option(key: str, value=None) -> str:
    """One option of a command, as the front end now speaking writes it in a sentence: `watch=attn` (`watch=` without
    a value) in the REPL, `--watch attn` (`--watch`) in the shell, whose command line takes no key=value."""
    if syntax() == REPL:
        return f"{key}=" + ("" if value is None else setting_text(value))
    flag = "--" + key.replace("_", "-")
    return flag if value is None else f"{flag} {setting_text(value)}"


def named(name: str) -> str:
    """Command `name` as prose names it (":ngram's counter", "as minitf gen does"): no line to run, so none of this
    session's options (cmd gives the line)."""
    return f":{name}" if syntax() == REPL else f"minitf {name}"


def restore(checkpoint: str) -> str:
    """What brings a saved checkpoint back: `:load NAME`, or from the shell `minitf --load NAME` (the REPL on it; a
    command after it starts from it), after the `--checkpoint-dir DIR` this session was given: "--load x restores
    it" sent a session saved elsewhere to look for x in the default folder, and a bare "--load x" pasted was no
    command at all."""
    if syntax() == REPL:
        return cmd("load", checkpoint)
    return " ".join(_minitf(checkpoint))  # the options a line that loads keeps (its folder, its device), as cmd's


def writes_one() -> str:
    """How a checkpoint gets written, as the words after "; ": `:save NAME` in the REPL; from the shell,
    where a command's session ends with it and `minitf save` has no model, `minitf train --save NAME`."""
    if syntax() == REPL:
        return f"{cmd('save', 'NAME')} writes one"
    return f"{cmd('train', save='NAME')} trains a model and writes one"


def train_first(then: str, autosave: str, **options) -> str:
    """"Train first, then run `then`": from the shell, `then` starts from the checkpoint `autosave`
    that the one-shot `minitf train` saves, since its own session has no model."""
    return f"{_saving_train()} first, then {cmd(then, load=autosave if syntax() == SHELL else None, **options)}"


@contextlib.contextmanager
def without_setting(key: str):
    """Within this block, a shell line `cmd` writes leaves out this invocation's `--set KEY=...` (one pair of a --set
    that gives several), as a fix that gives the value another way must."""
    def kept(value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError:
            return value
        return " ".join(shlex.quote(w) for w in words if w.partition("=")[0].strip() != key)

    pairs = tuple((o, kept(v) if o == "--set" else v) for o, v in _INVOKED.get())
    token = _INVOKED.set(tuple((o, v) for o, v in pairs if o != "--set" or v.strip()))
    try:
        yield
    finally:
        _INVOKED.reset(token)


@contextlib.contextmanager
def _autosaving():
    """Within this block, a shell line leaves out this invocation's autosave setting (one pair of a --set that gives
    several, under any spelling of its name): for a train whose autosave the next line loads. Only that pair goes: a
    `--set 'autosave=off lr=0.1'` lost its lr too, and a `--set 'lr=0.1 autosave=off'` kept autosave=off."""
    with _holding(_INVOKED, tuple(_without(list(_INVOKED.get()), ("--set", "autosave=on")))):
        yield


def _saving_train() -> str:
    """`cmd('train')`, for a line whose next command loads the autosave that train writes: from the shell, without
    this session's `--set autosave=off`, which would leave nothing to load."""
    if syntax() == REPL:
        return cmd("train")
    with _autosaving():
        return cmd("train")


def look_again(then: str, autosave: str, *positional, again: str = "look again", **options) -> str:
    """"Train, then look again" (`again`) with command `then`: from the shell, where a one-shot train's model ends
    with it, the look starts from the checkpoint `autosave` that train saves (a plain `minitf then` would look at a
    new model), with `positional` and `options`."""
    if syntax() == REPL:
        return f"{cmd('train')}, then {again}"
    return f"{_saving_train()} first, then {cmd(then, *positional, load=autosave, **options)}"


def rebuilt_with(then: str, autosave: str, data: str, config, **settings) -> str:
    """"Build a model with these settings, train it, look again with `then`". From the shell one line trains a new
    model with them, on this session's `data` (given_before: --load refuses a setting that rebuilds the model it
    loaded, so `minitf --load b3 --set pos_encoding=rope rope` was refused), and the look starts from its
    autosave. Where the model was loaded, the line carries its other settings that are not the defaults (`config`,
    its ModelConfig), as :set in the REPL keeps them: it built a default model, four times as wide as the one
    loaded."""
    if syntax() == REPL:
        return f"{cmd('set', **settings)} builds one (weights reset), then {cmd('train')} and look again"
    if loaded():
        settings = {**{k: v for k, v in own_settings(config).items() if k not in settings}, **settings}
    pairs = " ".join(f"{k}={exact_text(v)}" for k, v in settings.items())
    return (f"{given_before('train', '--set', pairs, new_model_on=data, autosaving=True)} trains one, then "
            f"{cmd(then, load=autosave)} looks again")


def watch_first(view: str, then: str, **options) -> str:
    """"Train watching `view` first", said by `then` (with `options`), which charts what that run saw. The frames
    of a `:train watch=` run stay in its session (a checkpoint keeps the model, not them), so from the shell, where
    a command's session ends with it, the advice is the interactive shell's: train watching, then `then`, there."""
    if syntax() == REPL:
        return f"train with {cmd('train', watch=view)} first"
    with speaking(REPL):
        steps = f"{cmd('train', watch=view)}, then {cmd(then, **options)}"
    shell = interactive()  # the interactive shell of this same session: its data, settings, checkpoint
    return (f"a checkpoint keeps no watched frames, so a one-shot minitf {then} has none; in minitf's interactive "
            f"shell ({shell} with no command): {steps}")
