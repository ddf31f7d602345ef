"""What a sweep of the items earlier sweeps left on the terminal and the shell found: each test failed before its fix.

On a terminal that cannot redraw (TERM=dumb, Emacs' shell), and in a log of `minitf train --watch lens > run.log
2>&1`, `:train watch=` printed its last frame under its evaluation's line and again under the final table; where the
frames came as lines on the result's own output (one console, or two on the same file or terminal), the final
rendering now leaves the last one out (render.after_lines), and a result sent elsewhere keeps it.
A refused number was quoted as typed by rewriting the check's message with a string replace of its first
"got <float>", wherever that stood; the typed text now goes into the check (SettingSpec.check, check_value), which
quotes it itself.
A script piped in (`minitf < lesson.txt | tee log`) was told "now type a question for the model to answer" after its
first :train, where no one types; the hint is said at the prompt only (FrontEnd.keyboard, syntax.at_keyboard).
A script pasted on a terminal without bracketed paste comes a line at a time, and each `# comment` line ran as a prompt
to :gen (an error, or 200 characters generated); a line starting with # at the prompt is a comment now, as in a piped
script, and the first one typed alone says so and names `:gen #TEXT` for text that starts with #. (Nothing a user
relies on goes: text that starts with # is continued by :gen, as the docs said.)
`:save hf:PATH` killed part-way (kill -9) left a hidden `.NAME.tmp-*` folder with a model's weights beside PATH for
good; a save now holds a flock on the folder it writes, and the next save into that folder removes those of dead
saves (a save's own files only, unlocked, older than 10 s), never one another save is writing. The folder it saved
was its owner's alone (mkdtemp's 0700, the weights 0600), where a checkpoint's is the umask's 0755 and 0644: it is
now made and written as the others are.
`minitf data missing.txt` and `minitf --data missing.txt tok hi` (or patch) imported torch (1.3 s) before saying the
file is not there; a stat says it now, without torch.
The REPL with its output sent to a file (`minitf > session.log`, the prompt on stderr's terminal) showed the person at
the keyboard nothing while a :train ran, and a script piped in with its output in a file (`minitf < lesson.txt >
out.txt`) likewise: where the results go to a file and stderr is a terminal, progress and notices go there, as the
one-shot shell's do; a transcript to one place stays as it was.
COLUMNS=0 (a terminal that reports no size, passed on in an environment) gave Rich a width of 0: minitf wrote nothing
at all, errors included (`minitf --data missing.txt tok hi` ended with status 1 and not a word); a $COLUMNS or $LINES
of 0 is now no size known.
A command copied from the README with its prompt (`minitf> :train`) trained nothing: on pydoc it was text for :gen
(200 characters generated from "minitf> :train"), on a task an error about the vocabulary; the prompt before a
command is now dropped, as IPython drops a pasted ">>> " (text that starts with "minitf>" stays text).
A script with old Mac line endings (a lone \r) piped in was read as one line: its first command took all the others
as its words (":set ... not both: :set :set shows"); a lone \r ends a line there now, as in a paste and a data file.
"""

import io

import pytest
from rich.console import Console

from minitf_repl.dispatch import run_command
from minitf_repl.session import Session

TINY = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "batch_size": 4,
        "autosave": False, "eval_batches": 1}


def session(data: str = "sort") -> Session:
    s = Session(data_spec=data)
    run_command(s, "set", dict(TINY))
    return s


def plain(width: int = 80) -> Console:
    return Console(file=io.StringIO(), width=width, color_system=None)


# --- a dumb terminal: the last watched frame once ------------------------------------------------------------------
def test_where_frames_come_as_lines_the_last_one_is_not_printed_again_under_the_table():
    from minitf_repl.render.live import RichReporter

    c = plain()
    reporter = RichReporter(c, live=False, lines=True)
    reporter.finish(run_command(session(), "train", {"steps": 4, "eval_every": 2, "watch": "lens"}, reporter))
    out = c.file.getvalue()
    assert out.count("step 4, val loss") == 1, out
    assert out.index("step 4 (run 4/4)") < out.index("step 4, val loss") < out.index("trained 4 steps")


def test_where_the_frames_went_elsewhere_the_result_keeps_its_last_frame():
    from minitf_repl.render.live import RichReporter

    progress, out = plain(), plain()  # `minitf train --watch lens > run.log`: frames on stderr, the result in a file
    reporter = RichReporter(progress, live=False, lines=True, out=out)
    reporter.finish(run_command(session(), "train", {"steps": 4, "eval_every": 2, "watch": "lens"}, reporter))
    assert progress.file.getvalue().count("step 4, val loss") == 1
    assert out.file.getvalue().count("step 4, val loss") == 1


def test_two_consoles_on_one_log_write_to_the_same_output(tmp_path):
    from minitf_repl.render.live import same_output

    log = tmp_path / "run.log"  # `minitf train --watch lens > run.log 2>&1`: stdout and stderr on one file
    with open(log, "w") as out, open(log, "a") as err, open(tmp_path / "other.log", "w") as other:
        assert same_output(Console(file=out), Console(file=err))
        assert not same_output(Console(file=out), Console(file=other))


# --- a refused number quoted as typed, by the check itself --------------------------------------------------------
def test_the_check_quotes_the_value_as_typed_and_nothing_rewrites_its_message(monkeypatch):
    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.core.config import TrainConfig
    from minitf_repl.core.errors import UserError
    from minitf_repl.parsing import check_value, parse_line

    lr = next(spec for spec in TrainConfig.specs() if spec.name == "lr")
    with pytest.raises(UserError, match=r"lr must be positive, got 0$"):
        lr.check(0.0, typed="0")
    with pytest.raises(UserError, match=r"got -0\.5e0$"):
        check_value(REGISTRY["set"].param_named("lr"), -0.5, typed="-0.5e0")
    # a message that happens to hold the float's own spelling elsewhere is left as the check wrote it
    monkeypatch.setattr(type(lr), "_range_words", lambda self: "above 0.0 (got 0.0 means zero)")
    with pytest.raises(UserError) as e:
        parse_line(":set lr=0", REGISTRY)
    assert str(e.value).endswith("lr must be above 0.0 (got 0.0 means zero), got 0"), str(e.value)


# --- a hint for the person at the keyboard, not for a script's output ----------------------------------------------
SET_TINY = ":set n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4 autosave=off eval_batches=1"


def test_a_piped_script_is_not_told_to_type_a_question_after_its_first_run():
    from minitf_repl import repl

    out, err = plain(100), plain(100)
    assert repl.run_lines([SET_TINY, ":train steps=60 eval_every=30"], Session(data_spec="sort"), out, err) == 0
    text = out.file.getvalue()
    assert "trained 60 steps" in text and "now type" not in text, text


def test_at_the_prompt_the_first_run_still_says_what_to_type_next():
    from test_repl import drive

    code, out, err, _ = drive(f":data sort\n{SET_TINY}\n:train steps=60 eval_every=30\n")
    assert "trained 60 steps" in out and "now type a question for the model to answer" in out, out + err


# --- a script pasted a line at a time (no bracketed paste): its comments are comments ------------------------------
def test_comment_lines_typed_or_pasted_one_at_a_time_are_comments_said_once():
    from test_repl import drive

    code, out, err, s = drive(":data sort\n# a lesson: sampling\n:set temperature=0.5\n# then greedily\n:set top_k=3\n")
    assert "not in the vocabulary" not in err and "tokens in" not in out, err  # nothing ran as a prompt to :gen
    assert s.gen_config.temperature == 0.5 and s.gen_config.top_k == 3
    said = " ".join(err.split())
    assert said.count("is a comment") == 1 and ":gen #TEXT continues a text that starts with #" in said, said


# --- :save hf:PATH killed part-way: its hidden temporary folder goes at the next save there ------------------------
GPT2_LIKE = {"activation": "gelu_tanh", "n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 48, "max_seq_len": 24,
             "batch_size": 4, "autosave": False}


def test_a_killed_hf_saves_temporary_folder_goes_at_the_next_save_and_a_live_ones_stays(tmp_path):
    import fcntl
    import os

    def left(name: str, files=("model.safetensors",), age: float = 600.0):
        folder = tmp_path / name
        folder.mkdir()
        for f in files:
            (folder / f).write_bytes(b"\0" * 64)
        os.utime(folder, (folder.stat().st_atime - age, folder.stat().st_mtime - age))
        return folder

    dead = left(".m1.tmp-tdgw294w")  # as kill -9 in the middle of `:save hf:m1` leaves it
    live = left(".m3.tmp-ab12cd34")  # another session's save, still writing
    fresh = left(".m4.tmp-zz99yy88", age=0)  # made a moment ago: its writer may not hold its lock yet
    foreign = left(".notes.tmp-abcdefgh", files=("notes.txt",))  # not what a save writes
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a save holds the folder it writes
    try:
        s = Session(data_spec="sort")
        run_command(s, "set", dict(GPT2_LIKE))
        run_command(s, "train", {"steps": 1})
        run_command(s, "save", {"name": f"hf:{tmp_path / 'm2'}"})
        assert (tmp_path / "m2" / "model.safetensors").is_file()
        assert not dead.exists()
        assert live.exists() and fresh.exists() and foreign.exists()
    finally:
        os.close(held)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".m3.tmp-ab12cd34", ".m4.tmp-zz99yy88",
                                                          ".notes.tmp-abcdefgh", "m2"]


def test_an_hf_save_holds_its_temporary_folder_while_it_writes_so_no_other_save_removes_it(tmp_path, monkeypatch):
    import fcntl
    import os

    from minitf_repl.core import hf

    seen = []
    serialise = hf.write_safetensors  # the weights are written a tensor at a time (test_sweep_am)

    def writing(path, tensors, metadata):  # while the save writes its weights
        folder = next(tmp_path.glob(".m.tmp-*"))
        os.utime(folder, (0, 0))  # old enough to be taken for a dead save's, were it not held
        hf.remove_dead_saves(tmp_path)  # another session's save into the same folder, now
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            seen.append("free")
        except BlockingIOError:
            seen.append("held")
        finally:
            os.close(fd)
        return serialise(path, tensors, metadata)

    monkeypatch.setattr(hf, "write_safetensors", writing)
    s = Session(data_spec="sort")
    run_command(s, "set", dict(GPT2_LIKE))
    run_command(s, "train", {"steps": 1})
    run_command(s, "save", {"name": f"hf:{tmp_path / 'm'}"})
    assert seen == ["held"] and (tmp_path / "m" / "model.safetensors").is_file()


# --- a data file that is not there: said without importing torch ------------------------------------------------
@pytest.mark.parametrize("args", [("data", "missing.txt"), ("--data", "missing.txt", "tok", "hi"),
                                  ("--data", "missing.txt", "patch", "ab", "cd"), ("data", "https://x.org/a.txt")],
                         ids=["data", "tok", "patch", "url"])
def test_data_tok_and_patch_say_a_missing_data_file_without_importing_torch(tmp_path, args):
    from test_sweep_ss import _one_shot

    rc, out, err, torch = _one_shot(tmp_path, *args)
    said = " ".join(err.split())
    assert rc == 1 and ("no such file: missing.txt (in " in said or "is a URL" in said), said
    assert not torch, "minitf " + " ".join(args) + " imported torch"


# --- the REPL with its results sent to a file: progress and notices on the terminal ------------------------------
def test_the_repl_with_its_output_in_a_file_shows_progress_and_notices_where_the_prompt_is():
    from prompt_toolkit.history import InMemoryHistory
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from minitf_repl import repl

    out = plain(100)  # `minitf > session.log`: a file
    err = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)  # the terminal
    with create_pipe_input() as inp:
        inp.send_text(f":data sort\n{SET_TINY}\n:train steps=4 eval_every=2\n:gen 314159= n=3\n\x04")
        assert repl.run_repl(Session(), out, err, input=inp, output=DummyOutput(), history=InMemoryHistory()) == 0
    log, screen = out.file.getvalue(), " ".join(err.file.getvalue().split())
    assert "trained 4 steps" in log and "314159=" in log  # the results: the table, the text generated
    assert "train" in screen and "4/4" in screen, screen  # the bar, drawn on the terminal
    assert "3 tokens in" in screen and "3 tokens in" not in log  # what a person reads after the text


# --- $COLUMNS=0: no size known, not a width of 0 ------------------------------------------------------------------
def test_columns_of_zero_is_no_width_known_and_results_and_errors_are_still_written(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])  # this tree's package

    def minitf(*args, stdin=None):
        env = dict(os.environ, COLUMNS="0", LINES="0", PYTHONPATH=root)
        return subprocess.run([sys.executable, "-m", "minitf_repl", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, input=stdin, timeout=120)

    done = minitf("--data", "missing.txt", "tok", "hi")  # nothing at all was written, with status 1
    assert done.returncode == 1 and "no such file: missing.txt" in done.stderr, done
    done = minitf("--data", "sort", "config")
    assert "max_seq_len" in done.stdout, done
    done = minitf("--data", "sort", stdin=":config\n:bogus\n")  # piped input too
    assert "max_seq_len" in done.stdout and "unknown command :bogus" in done.stderr, done


def test_a_script_piped_in_with_its_output_in_a_file_shows_its_progress_on_the_terminal_of_stderr():
    from minitf_repl import repl

    out = plain(100)  # `minitf < lesson.txt > out.txt`
    err = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)
    lines = [":data sort", SET_TINY, ":train steps=4 eval_every=2", ":gen 314159= n=3"]
    assert repl.run_lines(lines, Session(), out, err) == 0
    log, screen = out.file.getvalue(), " ".join(err.file.getvalue().split())
    assert "trained 4 steps" in log and "step 2 (run 2/4)" in screen and "(run 2/4)" not in log, screen
    assert "3 tokens in" in screen and "3 tokens in" not in log


def test_a_script_piped_in_to_files_sends_its_notices_to_stderr_as_the_one_shot_shell_does():
    from minitf_repl import repl

    # both to files (`minitf < s.txt > log 2> err`, a cron job): the notices ran among the results (50th session), a
    # run's evaluations were never written, and `> log 2>&1` put a stop notice above its own run's table
    out, err = plain(100), plain(100)
    lines = [":data sort", SET_TINY, ":train steps=4 eval_every=2", ":gen 314159= n=3"]
    assert repl.run_lines(lines, Session(), out, err) == 0
    log, notes = out.file.getvalue(), err.file.getvalue()
    assert "trained 4 steps" in log and "step 2 (run 2/4)" in notes and "(run 2/4)" not in log
    assert "3 tokens in" in notes and "3 tokens in" not in log and "error" not in notes


def test_a_script_piped_in_on_a_terminal_stays_one_transcript():
    from minitf_repl import repl

    # `printf ... | minitf` at a terminal: results and notices on the screen in the order they came, as the REPL's
    out = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)
    err = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)
    assert repl.run_lines([":data sort", SET_TINY, ":train steps=4 eval_every=2", ":gen 314159= n=3"], Session(), out,
                          err) == 0
    screen = " ".join(out.file.getvalue().split())
    assert "trained 4 steps" in screen and "3 tokens in" in screen and err.file.getvalue() == ""



def test_a_folder_saved_for_transformers_is_readable_as_the_umask_lets_files_be(tmp_path):
    import os
    import stat

    mask = os.umask(0o022)  # the usual one; the test's own, whatever the runner's
    try:
        s = Session(data_spec="sort")
        run_command(s, "set", dict(GPT2_LIKE))
        run_command(s, "train", {"steps": 1})
        run_command(s, "save", {"name": f"hf:{tmp_path / 'shared'}"})
    finally:
        os.umask(mask)
    folder = tmp_path / "shared"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # it was 0700 (tempfile.mkdtemp's), the owner's alone
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir()}["model.safetensors"] == 0o644  # 0600


# --- a script with old Mac line endings ---------------------------------------------------------------------------
def test_a_piped_script_with_lone_carriage_returns_runs_line_by_line():
    from minitf_repl import repl

    out, err = plain(100), plain(100)
    s = Session(data_spec="sort")
    script = io.BytesIO(b":set steps=7\r:set top_k=3\r:bogus\r\n:set seed=5\r\n")  # \r alone, then \r\n
    assert repl.run_lines(repl.stdin_lines(script), s, out, err) == 1
    assert s.train_config.steps == 7 and s.gen_config.top_k == 3 and s.train_config.seed == 5
    assert err.file.getvalue().splitlines() == ["error: line 3: unknown command :bogus (:help lists commands)"]


# --- a command copied from the README with its prompt -------------------------------------------------------------
def test_a_command_copied_with_the_prompt_before_it_runs_as_the_command():
    from test_repl import drive

    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.parsing import parse_line

    command, args = parse_line("minitf> :set steps=7", REGISTRY)  # as the README shows it
    assert command.name == "set"
    code, out, err, s = drive(":data sort\nminitf> :set steps=7\n")  # typed (or pasted a line at a time)
    assert s.train_config.steps == 7 and err == "", err
    # pasted in one go (bracketed paste): each line runs as its command
    code, out, err, s = drive("\x1b[200~minitf> :set steps=9\rminitf> :set top_k=2\x1b[201~\r")
    assert s.train_config.steps == 9 and s.gen_config.top_k == 2 and err == "", err
    command, args = parse_line("minitf> hello", REGISTRY)  # text that starts with the prompt's word stays text
    assert command is REGISTRY.plain_text_command and "minitf> hello" in args.values()
