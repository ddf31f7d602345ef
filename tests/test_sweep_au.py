"""Commands in any order: a seeded harness plays random sequences of REPL commands (a tiny model, 3 to 10 training
steps) in one in-process session, a learner's session of train, change a setting, look, ablate, load, generate, switch
data, save, compare, look again, and checks after every command: no traceback, an error in one line, the session goes
on; the settings describe the model loaded (its shapes, its vocabulary, its tokenizer); the weights change only on the
commands that change them, and the settings only on those that set them; `:save` then `:load` in a fresh session gives
the same logits, as a later `:load` of it in the same session does; ablations hook the model there is. One short
seeded run is in the default run, the broad ones are marked slow, with a replay: the same lines played twice end with
the same model.

This sweep found nothing to fix: some 10,000 lines of seeded sessions (on a task and on a text file read by a BPE)
and every pair of (:ablate, :patch, :quantize, :set of 10 kinds) followed by (:save, :train, :compare, :gen, :data,
:load, the views, :report, :lrfind) kept every invariant above. The harness stays as the guard of that: a rebuild
that left the old model's ablations on, planted by hand, is caught within six seeds.
"""

import io
import random

import pytest
import torch
from rich.console import Console

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.dispatch import FAILED, OK, FrontDoor, FrontEnd
from minitf_repl.session import Session

from test_commands import TEXT, TINY

# --- the harness ------------------------------------------------------------------------------------------------
# STEPS, WATCH and TEXTFILE are filled in at random (3 to 10 steps, a watched view, the text file of the test)
LINES = [
    ":train steps=STEPS", ":train steps=STEPS seed=2", ":train steps=STEPS watch=WATCH",
    ":train steps=STEPS data=reverse:3", ":train schedule=continue steps=3", ":train steps=STEPS data=TEXTFILE",
    ":train steps=3 lr=0.003 batch_size=8",
    ":set lr=0.003", ":set d_model=48 n_heads=4", ":set n_layers=2", ":set n_layers=1", ":set max_seq_len=24",
    ":set pos_encoding=rope", ":set norm=rmsnorm", ":set dropout=0.1", ":set activation=relu", ":set seed=3",
    ":set tokenizer=bpe:300", ":set tokenizer=char", ":set n_experts=2", ":set n_experts=0", ":set n_kv_heads=1",
    ":set tie_embeddings=off", ":set causal=off", ":set causal=on", ":set optimizer=muon", ":set optimizer=adamw",
    ":set preset=llama", ":set preset=seed", ":set dtype=float32", ":set norm_placement=post", ":set max_seq_len=16",
    ":set experts_per_token=1", ":set n=4", ":set gen_seed=3", ":set rope_base=100", ":set attention=sdpa",
    ":set qk_norm=on", ":set autosave=off", ":set autosave=on",
    ":data sort:4", ":data reverse:3", ":data TEXTFILE", ":data add:2", ":data random:12", ":data",
    ":gen n=5", ":gen n=5 gen_seed=1", ":gen 12 n=4", ":gen the n=4", ":config", ":shapes", ":params", ":qkv",
    ":attn", ":resid", ":lens", ":ln", ":ffn", ":kv", ":step", ":score", ":embed", ":tok 12", ":grad", ":heads",
    ":experts", ":plot", ":rope", ":attrib", ":mistakes n=2", ":muon", ":patch 1234 4321",
    ":ablate head=0.0", ":ablate head=0.1", ":ablate block=0", ":ablate mask", ":ablate positions", ":ablate off",
    ":ablate", ":quantize int8", ":quantize off", ":quantize",
    ":save a", ":save b", ":save", ":load a", ":load b", ":load last", ":load autosave", ":ls", ":help",
]  # fmt: skip
# Lines that take seconds on a tiny model: the broad runs only
SLOW_LINES = [":compare current preset=modern steps=3", ":compare current n_layers=2 steps=3 data=random:12",
              ":compare lr=0.001 lr=0.01 steps=3 data=TEXTFILE", ":lrfind steps=20", ":checks steps=5",
              ":context", ":ngram n=2", ":report"]
WATCH = ["attn", "lens", "samples", "heads"]
# The commands that may change the weights or the settings; any other leaves both as they were
CHANGES_WEIGHTS = {"train", "set", "data", "load"}
CHANGES_SETTINGS = {"train", "set", "data", "load"}


def console(width: int = 100_000) -> Console:
    return Console(file=io.StringIO(), width=width, color_system=None)  # no wrapping: one error is one line


# The results' console: a wide terminal's width. At the errors' 100,000 columns `:plot` drew a chart 100,000 columns
# wide, a third of the default run's 11 s, and no invariant reads how a result is laid out (test_wrapping.py does)
RESULTS_WIDTH = 200


def new_session(folder) -> Session:
    return Session(ModelConfig(**TINY), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                   data_spec="sort:4", device_name="cpu", checkpoint_dir=folder / "ck")


def weights(session) -> dict:
    return {k: v.detach().clone() for k, v in session.model.state_dict().items()} if session.has_model else {}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def settings(session) -> tuple:
    return (session.model_config, session.train_config, session.gen_config, session.data_spec,
            session.tokenizer_setting)


def logits(session) -> torch.Tensor | None:
    """The model's logits on a fixed text, dropout off; None while parts are switched off (hooks, never saved)."""
    if session.ablations:
        return None
    model, config = session.model, session.model_config
    was_training = model.training
    model.eval()
    with torch.no_grad():
        out = model(torch.arange(min(8, config.max_seq_len))[None] % config.vocab_size)
    model.train(was_training)
    return (out[0] if isinstance(out, tuple) else out).detach().clone()


def same_logits(a, b) -> bool:
    return a is None or b is None or (a.shape == b.shape and torch.allclose(a, b))


def loaded_fresh(folder, name: str) -> Session | None:
    """A new session that has loaded checkpoint `name` of `folder`, as a learner's next day starts; None if it could
    not."""
    session = new_session(folder)
    return session if FrontDoor(session, console(), console(), FrontEnd(live=False)).run_line(f":load {name}") == OK \
        else None


def described_as_loaded(session) -> list[str]:
    """What the settings say that the session's model is not: its shapes, its vocabulary, its tokenizer."""
    if not session.has_model:
        return []
    model, config, problems = session.model, session.model_config, []
    if model.config != config:
        problems.append(f"the model is {model.config}, the settings say {config}")
    table = model.token_embedding.weight
    if tuple(table.shape) != (config.vocab_size, config.d_model):
        problems.append(f"the embedding is {tuple(table.shape)}, the settings {config.vocab_size} x {config.d_model}")
    data = session.loaded_data
    if data is not None:
        if data.tokenizer.vocab_size != table.shape[0]:
            problems.append(f"the data has {data.tokenizer.vocab_size} tokens, the model {table.shape[0]}")
        if (session.tokenizer is None) != (data.tokenizer.kind == "char"):
            problems.append(f"the tokenizer setting is {session.tokenizer_setting}, the data's {data.tokenizer.kind}")
    if session.ablations and session._ablations.model is not model:
        problems.append("the ablations hook a model that is gone")
    return problems


def play(seed: int, count: int, folder, lines=LINES) -> tuple[list[str], torch.Tensor | None]:
    """Play `count` random lines of `lines` into one session: (what broke an invariant, with the lines before it;
    the logits of the model it ended with)."""
    rng = random.Random(f"au:{seed}")
    textfile = folder / "fox.txt"
    textfile.write_text(TEXT, encoding="utf-8")
    session = new_session(folder)
    session.data  # read now: its first read sets vocab_size, which no command is to be blamed for
    out, err = console(RESULTS_WIDTH), console()
    door = FrontDoor(session, out, err, FrontEnd(live=False))
    played, problems, at_save = [], [], {}
    for _ in range(count):
        line = (rng.choice(lines).replace("STEPS", str(rng.randint(3, 10))).replace("WATCH", rng.choice(WATCH))
                .replace("TEXTFILE", str(textfile)))
        played.append(line)
        name, words = line.split()[0][1:], line.split()[1:]
        held, before, said = weights(session), settings(session), len(err.file.getvalue())
        status = door.run_line(line)
        error = err.file.getvalue()[said:]

        def broke(what: str) -> None:
            problems.append(f"seed {seed}, after {played[-8:]}: {what}")

        if "internal error" in error or "Traceback" in error + out.file.getvalue():
            broke(f"an internal error: {error.strip()[:300]}")
        if status not in (OK, FAILED):
            broke(f"status {status}")
        if status == FAILED and len(error.strip().splitlines()) != 1:
            broke(f"an error of {len(error.strip().splitlines())} lines: {error!r}")
        if name not in CHANGES_WEIGHTS and held and not same_weights(held, weights(session)):
            broke("the weights changed")
        if name not in CHANGES_SETTINGS and settings(session) != before:
            broke(f"the settings changed: {[(a, b) for a, b in zip(before, settings(session)) if a != b]}")
        problems += [f"seed {seed}, after {played[-8:]}: {p}" for p in described_as_loaded(session)]
        if status == OK and name == "save" and words:
            at_save[words[0]] = logits(session)
            fresh = loaded_fresh(folder, words[0])
            if fresh is None:
                broke(f"a new session could not :load {words[0]}")
            elif not same_logits(at_save[words[0]], logits(fresh)):
                broke(f"a new session's :load {words[0]} gives other logits")
            elif settings(fresh)[:2] != before[:2] or fresh.data_spec != session.data_spec:
                broke(f"a new session's :load {words[0]} has other settings")
        if status == OK and name == "load" and words and words[0] in at_save:
            if not same_logits(at_save[words[0]], logits(session)):
                broke(f"{line} gives other logits than the model it saved")
    if door.run_line(":config") != OK:
        problems.append(f"seed {seed}: :config failed at the end: {err.file.getvalue()[-300:]}")
    return problems, logits(session) if session.has_model else None


# --- the runs ----------------------------------------------------------------------------------------------------
def test_a_short_seeded_session_in_any_order_keeps_every_invariant(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # :report and friends write into the current folder
    assert play(0, 120, tmp_path)[0] == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 25))
def test_seeded_sessions_in_any_order_keep_every_invariant(seed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert play(seed, 60, tmp_path, LINES + SLOW_LINES)[0] == []


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
def test_the_same_session_played_twice_ends_with_the_same_model(seed, tmp_path, monkeypatch):
    """Every seed, batch order and random state a command uses is the session's own: played again, the same lines
    end with the same weights (nothing carried over from the process, the clock or the first session's files)."""
    ends = []
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
        monkeypatch.chdir(tmp_path / run)
        ends.append(play(seed, 40, tmp_path / run)[1])
    assert (ends[0] is None) == (ends[1] is None)
    assert ends[0] is None or torch.equal(ends[0], ends[1])
