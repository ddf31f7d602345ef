"""The 48th session's own look: each test failed before its fix."""

import os
import time

import pytest

from minitf_repl.core.errors import UserError
from test_commands import run, tiny_session


@pytest.fixture(scope="module")
def cache_entry(tmp_path_factory):
    """A Hugging Face cache's models--NAME folder as transformers leaves it: two revisions under snapshots/, refs/main
    naming the older one, and the newer (by time) one of another model's size."""
    entry = tmp_path_factory.mktemp("hub") / "models--me--tiny"
    for revision, width in (("1111aaaa", 32), ("2222bbbb", 48)):
        s = tiny_session()
        run(s, f":set d_model={width} steps=1")
        run(s, ":train")
        run(s, f":save hf:{entry / 'snapshots' / revision}")
        time.sleep(0.01)
    os.utime(entry / "snapshots" / "2222bbbb")  # the newest: the revision a guess by time would take
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("1111aaaa")  # as the hub writes it: the hash, no newline
    return entry


def test_load_of_a_cache_entry_reads_the_revision_refs_main_names(cache_entry):
    from test_cli import invoke

    s = tiny_session()
    result = run(s, f":load hf:{cache_entry}")  # was: "has no config.json, but 2 folders in it have one (the newest:
    # snapshots/2222bbbb); give the model's own folder"
    assert result.path == str(cache_entry / "snapshots" / "1111aaaa")
    assert result.model_config["d_model"] == 32
    assert s.weights_from == f"hf:{cache_entry / 'snapshots' / '1111aaaa'}"  # read again by :save hf: and :parity
    shell = invoke("--load", f"hf:{cache_entry}", "config", "--json")
    assert shell.exit_code == 0, shell.output
    assert '"d_model": 32' in shell.stdout


@pytest.mark.parametrize("main", ["", "../../elsewhere", "3333cccc", "1111aaaa/../2222bbbb"])
def test_a_refs_main_that_names_no_snapshot_here_is_not_followed(cache_entry, tmp_path, main):
    import shutil

    from minitf_repl.core.errors import UserError

    entry = tmp_path / "models--me--tiny"
    shutil.copytree(cache_entry, entry)
    (entry / "refs" / "main").write_text(main)
    with pytest.raises(UserError, match="has no config.json, but 2 folders in it have one"):
        run(tiny_session(), f":load hf:{entry}")


def test_parity_of_a_cache_entry_compares_with_the_revision_refs_main_names(cache_entry):
    pytest.importorskip("transformers")
    s = tiny_session()
    run(s, f":load hf:{cache_entry}")
    result = run(s, f":parity hf:{cache_entry}")  # was: "the session's model is not the model in ..." or no config
    assert result.path == str(cache_entry / "snapshots" / "1111aaaa")
    assert result.max_logit_diff <= result.tolerance


def test_a_narrow_gradient_norm_chart_says_the_spike_its_columns_average_away():
    from minitf_repl.commands.train import PlotResult, PlotSeries
    from test_render import plain

    steps = list(range(1, 301))
    norms = [1.0 + 0.01 * (step % 5) for step in steps]
    norms[11] = 4.34  # one spike: 12 steps of 300 share a column at 40 columns
    result = PlotResult("grad_norm", [PlotSeries("grad_norm", steps, norms)])
    narrow = " ".join(plain(result, width=40).split())
    top = float(narrow.split("┤")[0].split()[-1])
    assert top < 4.34  # the column's mean: the top label read as the largest norm, and nothing said otherwise
    assert "the largest, 4.34 at step 12, lies above the top label" in narrow, narrow
    wide = " ".join(plain(result, width=400).split())
    assert wide.split("┤")[0].split()[-1] == "4.34" and "lies above" not in wide  # a column a step: drawn, not said
    losses = PlotResult("loss", [PlotSeries("train", steps, [5.0 - step / 100 for step in steps])], vocab_size=65)
    assert "lies above" not in " ".join(plain(losses, width=40).split())  # a loss's first steps: not said


@pytest.mark.parametrize("value, shown", [(0.99785, "99.8%"), (0.9996, ">99.9%"), (1.0, "100%"), (0.994, "99%"),
                                          (0.5, "50%"), (0.0004, "<0.1%")])
def test_a_share_short_of_the_whole_is_never_written_as_100_percent(value, shown):
    from minitf_repl.render import fmt

    assert fmt.share(value) == shown  # 0.99785 was "100%": :ngram's val seen where 100 positions were never counted


def test_ngram_val_seen_of_a_counter_that_backed_off_is_not_100_percent():
    from test_render import text_of

    result = run(tiny_session(), ":ngram sample=off")
    row = next(r for r in result.rows if r.n == 3)
    row.seen = 1 - 100 / 46503  # the tester's: 100 of 46,503 val positions with a context never counted
    line = next(line for line in text_of(result, width=120).splitlines() if line.lstrip().startswith("3 "))
    assert "99.8%" in line and "100%" not in line, line


def test_the_package_tree_in_docs_code_md_lists_every_module():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    tree = (root / "docs" / "code.md").read_text().split("```", 2)[1]  # the first block: the package's tree
    listed = {word.rstrip(",") for word in tree.split() if word.rstrip(",").endswith(".py")}
    modules = {p.name for p in (root / "minitf_repl").rglob("*.py") if p.name != "__init__.py"}
    assert not modules - listed  # was: device_names.py, notices.py, numbers.py, values.py, startup.py, __main__.py


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_ffn_counts_every_unit_firing_below_or_at_zero(activation):
    import re

    from test_render import plain

    s = tiny_session()
    run(s, f":set activation={activation}")
    result = run(s, ":ffn")
    words = plain(result, width=200)
    zero = result.width - result.positive - result.negative
    assert zero == 0 or f"{zero} at exactly 0" in words, words  # ReLU's zeros went unsaid: 511 of 512 accounted
    said = re.search(r"firing \(u_n > 0\): (\d+) of (\d+)", words)
    assert said and int(said.group(1)) == result.positive
    if activation == "relu":
        assert zero > 0 and "none below 0" in words


@pytest.mark.parametrize("line", [":patch 654081= vs 654781=", ":attrib 654081="])
def test_patch_and_attrib_on_an_untrained_model_say_so(line):
    from test_render import plain

    s = tiny_session()
    result = run(s, line)
    assert result.untrained
    assert "this model has not trained yet" in plain(result, width=200)  # was: a heat map of noise, read as a result
    run(s, ":train steps=1")
    trained = run(s, line)
    assert not trained.untrained and "has not trained" not in plain(trained, width=200)


def test_the_shell_patch_of_an_untrained_model_names_the_line_that_looks_again():
    from test_cli import invoke

    shown = invoke("patch", "654081=", "654781=")
    assert shown.exit_code == 0, shown.output
    words = " ".join(shown.stdout.split())
    assert "this model has not trained yet" in words
    assert "then minitf --load autosave patch 654081= 654781=" in words


def test_a_history_write_failure_is_said_between_prompts_in_the_words_of_the_error(monkeypatch, tmp_path):
    import errno
    import io

    from prompt_toolkit.application.current import get_app_or_none
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.session import Session

    class Written(io.StringIO):
        during_prompt = []

        def write(self, text):
            self.during_prompt.append(get_app_or_none() is not None)
            return super().write(text)

    def full(self, string):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setenv("MINITF_HISTORY", str(tmp_path / "history"))
    monkeypatch.setattr(repl.SafeFileHistory, "_append", full)
    out, err = (Console(file=io.StringIO(), width=100, color_system=None),
                Console(file=Written(), width=100, color_system=None))
    with create_pipe_input() as inp:
        inp.send_text(":config\r:q\r")
        assert repl.run_repl(Session(), out, err, input=inp, output=DummyOutput()) == 0
    said = " ".join(err.file.getvalue().split())
    assert said.count("warning: cannot write history file") == 1
    assert "(No space left on device)" in said and "Errno" not in said  # was: ([Errno 28] No space left on device)
    assert not any(Written.during_prompt)  # was: written while the prompt was drawn, onto its line


def test_compare_by_bits_per_character_says_better_only_past_the_noise():
    from minitf_repl.commands.lab import compare_verdict
    from minitf_repl.core.compare import Evaluation, Outcome

    def outcome(label, loss, bits, spread):
        return Outcome(label, 1000, [Evaluation(label, 60, loss, 0.1, bpc=bits, bpc_spread=spread)])

    # the tester's: 3.575 ±0.052 against 3.738 ±0.158 over 2 seeds, a gap of 0.163 under twice the spread (0.333)
    noisy = compare_verdict([outcome("tokenizer=char", 2.5912, 3.738, 0.158),
                             outcome("tokenizer=bpe:300", 3.7786, 3.575, 0.052)], 2, "bits per character")
    assert noisy.startswith("tokenizer=bpe:300 has the fewest bits per character: 3.575 on the val text"), noisy
    assert "better" not in noisy and "the gap is within the noise of 2 seeds" in noisy  # was: "is better ...; within"
    clear = compare_verdict([outcome("tokenizer=char", 2.5912, 3.738, 0.01),
                             outcome("tokenizer=bpe:300", 3.7786, 3.575, 0.01)], 2, "bits per character")
    assert clear.startswith("tokenizer=bpe:300 is better by bits per character: 3.575") and "beats" in clear


@pytest.mark.parametrize("option, said", [(("--data", "nosuch"), "error: --data: no such file: nosuch"),
                                          (("--device", "foo"), "error: unknown device 'foo'")])
def test_piped_commands_with_a_wrong_data_or_device_option_fail_before_their_first_line(option, said):
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke(*option, input=":config\n"))  # was: exit 0, a warning amid :config's table
    assert line.startswith(said), line
    assert invoke(*option, input="").exit_code == 1  # was: exit 0 without a word


@pytest.mark.parametrize("show", [(), ("--show", "probs")])
def test_one_shot_gen_keeps_its_notes_off_standard_output_with_or_without_probs(show):
    from test_cli import invoke

    result = invoke("gen", "hello", "-n", "5", "--seed", "1", *show)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("hello")
    assert "tokens in" not in result.stdout and "tokens in" in result.stderr  # was: on stdout with --show probs
    assert "has not trained" in result.stderr and "has not trained" not in result.stdout


def test_the_checkpoint_dir_line_a_loaded_one_shot_set_suggests_runs(tmp_path):
    import re
    import shlex

    from test_cli import invoke

    folder = tmp_path / "ck"
    assert invoke("--checkpoint-dir", str(folder), "--set", "n_layers=1", "--set", "autosave=off", "train", "--steps",
                  "1", "--save", "small").exit_code == 0
    told = invoke("--checkpoint-dir", str(folder), "--load", "small", "set", f"checkpoint_dir={tmp_path / 'new'}")
    line = re.search(r"e\.g\. (minitf .*)$", " ".join(told.stderr.split())).group(1)
    assert "--load" not in line  # was: minitf --load small --checkpoint-dir NEW ls: "no checkpoint named 'small'"
    again = invoke(*shlex.split(line)[1:])
    assert again.exit_code == 0, again.output
    empty = " ".join(invoke("--set", "checkpoint_dir=", "config").stderr.split())
    assert "checkpoint_dir= names no folder" in empty and "''" not in empty  # was: minitf --checkpoint-dir '' config


def test_command_line_mistakes_are_said_as_what_they_are():
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("--data"), code=2)
    assert "requires an argument" in line, line  # was: "--data is an option of commands ..., so it goes after one"
    line = assert_one_error_line(invoke("gen", "hi", "--n", "--json"), code=2)  # was: status 1, "got '--json'"
    assert line == "error: --n needs a value, e.g. --n 10", line
    shown = invoke("help", "--json")
    assert shown.exit_code == 0 and "Usage: minitf" in shown.output  # was: "--json ... goes after one", status 2
    line = assert_one_error_line(invoke("tok", "\udcff\udcfe"), code=2)  # the bytes ff fe as Python reads them
    assert "not UTF-8 text (bytes \\xff \\xfe)" in line and "udc" not in line, line  # was: '\udcfe' '\udcff'


def test_small_shell_messages_name_what_runs():
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("--set", "n_layers=1", "train", "save="), code=2)
    assert line.endswith("save needs a value, e.g. --save NAME"), line  # was "e.g. --save ..."
    line = assert_one_error_line(invoke("set"))
    assert "checkpoint_dir" not in line and "lr" in line  # minitf set refuses it from the shell: it was listed
    shown = invoke("--set", "max_seq_len=9", "lens")
    assert shown.exit_code == 0, shown.output
    assert "longer than max_seq_len" not in shown.stderr  # no prompt was given: the view's sample fits the window
    for view in ("score", "grad"):  # the scored views read their own sample too (the review's)
        assert "longer than max_seq_len" not in invoke("--set", "max_seq_len=9", view).stderr
    told = invoke("--set", "max_seq_len=9", "lens", "a longer prompt than nine")
    assert "the prompt is longer than max_seq_len=9" in " ".join(told.stderr.split())  # a user's prompt: said


def test_save_refuses_a_folder_that_holds_other_files_and_no_checkpoint(checkpoint_dir):
    from minitf_repl.core.errors import CheckpointError

    s = tiny_session(steps=1)
    s.checkpoint_dir = checkpoint_dir
    run(s, ":train")
    (checkpoint_dir / "mydir").mkdir(parents=True)
    (checkpoint_dir / "mydir" / "notes.txt").write_text("my notes")
    with pytest.raises(CheckpointError, match="holds no checkpoint but 1 other file \\(notes.txt\\)"):
        run(s, ":save mydir")  # was: "replaced checkpoint mydir", its files written among the notes
    assert sorted(p.name for p in (checkpoint_dir / "mydir").iterdir()) == ["notes.txt"]
    (checkpoint_dir / "empty").mkdir()
    assert run(s, ":save empty").name == "empty"  # an empty folder is no one's files
    assert run(s, ":save empty").replaced  # a checkpoint saved over: as before


def test_an_autosave_that_moves_a_checkpoint_saved_by_name_aside_says_where(checkpoint_dir):
    from test_render import plain

    s = tiny_session(steps=2)
    s.checkpoint_dir = checkpoint_dir
    run(s, ":train")
    run(s, ":save autosave")  # a checkpoint the user named autosave: rotation keeps it, under another name
    result = run(s, ":train steps=2 schedule=new")
    assert result.saved == "autosave" and result.moved_aside == "autosave-1"
    words = plain(result, width=200)
    assert "autosave held a checkpoint saved by name, not a run's autosave: it is kept as autosave-1" in words
    again = run(s, ":train steps=2 schedule=new")  # a run's own autosave moving down the rotation: nothing said
    assert again.moved_aside is None and "kept as" not in plain(again, width=200)


@pytest.mark.parametrize("one_file", [True, False])
def test_a_failed_save_is_said_once_where_output_and_errors_share_a_file(monkeypatch, tmp_path, one_file):
    import io

    from rich.console import Console

    from minitf_repl.core import checkpoint
    from minitf_repl.core.errors import CheckpointError
    from minitf_repl.dispatch import FrontDoor, FrontEnd

    def full(*args, **kwargs):
        raise CheckpointError("could not save checkpoint 'autosave' (No space left on device); free some space")

    monkeypatch.setattr(checkpoint, "save_checkpoint", full)  # the autosave fails, the training stands
    s = tiny_session(steps=2)
    s.checkpoint_dir = tmp_path
    log = io.StringIO()
    out = Console(file=log, width=200, color_system=None)
    err = Console(file=log if one_file else io.StringIO(), width=200, color_system=None)
    door = FrontDoor(s, out, err, FrontEnd(syntax="shell", live=False, keyboard=False))
    assert door.run_line(":train") == "failed"
    said = log.getvalue()
    assert said.count("not saved:") == 1, said  # was twice in `minitf train > run.log 2>&1`: warning, then error
    if not one_file:
        assert err.file.getvalue().startswith("error: not saved:")  # errors read apart: said there too


@pytest.mark.parametrize("line, text", [
    (':score say "hi" to   me', 'say "hi" to   me'),  # was 'say hi to me'
    (":score x = 'a'", "x = 'a'"),
    (":tok a  b", "a  b"),  # was one space
    (':tok print("x', 'print("x'),  # a quote inside a word, never closed: was "unclosed quote"
    (':gen "Q:\\nA:"', "Q:\nA:"),  # wholly in quotes: what they hold, escapes read (as before)
    (':gen "hello world" n=5', "hello world"),
    (":gen n=5 hello   there", "hello   there"),
    (":gen hello n=5 world", "hello world"),  # pieces apart, around an option: joined by a space
    (":score -- if a==b: pass", "if a==b: pass"),
])
def test_a_commands_text_is_read_as_typed(line, text):
    from minitf_repl.commands import REGISTRY
    from minitf_repl.parsing import parse_line

    command, args = parse_line(line, REGISTRY)
    assert args[command.positional.name] == text


def test_a_word_that_reads_as_an_option_gets_the_whole_line_after_dashes():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.parsing import parse_line

    with pytest.raises(UserError, match=r"to read the whole line as text: :gen n=5 -- for i in x: y=i$"):
        parse_line(":gen n=5 for i in x: y=i", REGISTRY)  # was: quote it: :gen "y=i", which ran on "y=i" alone
    _, args = parse_line(":gen n=5 -- for i in x: y=i", REGISTRY)
    assert args["prompt"] == "for i in x: y=i" and args["n"] == 5
    with pytest.raises(UserError, match="unclosed quote"):
        parse_line(':gen "unclosed', REGISTRY)  # a quote that opens a word and never closes: a quote left open


def test_kv_stops_at_a_ctrl_c_and_says_how_far_it_got():
    from test_commands import Recorder
    from test_render import plain

    class StopAfter(Recorder):
        def __init__(self, steps):
            super().__init__()
            self.steps, self.progress, self.stop = steps, [], steps < 0

        def on_progress(self, what, done, total):
            self.progress.append((what, done, total))
            self.stop = self.stop or done >= self.steps  # sticky, as a Ctrl-C's request is

        def should_stop(self):
            return self.stop

    hooks = StopAfter(9)  # during the naive loop's tenth step: the cached loop then takes the same ten
    result = run(tiny_session(), ":kv n=30", hooks)  # was: no progress, no stop: 1,024 steps ran to their end
    assert len(result.steps) == 10 and result.asked == 30  # the review's: a stop in the first half showed nothing
    assert hooks.progress[0] == ("kv", 0, 60)
    words = plain(result, width=200)
    assert "stopped after 10 of the 30 tokens asked for" in words and "measured in this run" in words
    whole = run(tiny_session(), ":kv n=5")
    assert len(whole.steps) == 5 and "stopped" not in plain(whole, width=200)
    with pytest.raises(KeyboardInterrupt):  # an interrupted command, 130 from the shell (49th session: status 1)
        run(tiny_session(), ":kv n=5", StopAfter(-1))


@pytest.mark.parametrize("layers, said", [
    (2, "RoPE reads distances, not where tokens stand, but the token that falls out"),
    (1, "RoPE's scores read distances, not where tokens stand, so with one layer"),
])
def test_kv_past_the_window_does_not_call_ropes_positions_absolute(layers, said):
    from test_render import plain

    s = tiny_session()
    run(s, f":set pos_encoding=rope n_layers={layers}")
    result = run(s, f":kv n={s.model_config.max_seq_len + 4}")
    words = plain(result, width=300)
    assert said in words and "positions are absolute" not in words  # was "absolute", which :rope contradicts
    learned = run(tiny_session(), f":kv n={s.model_config.max_seq_len + 4}")
    assert "positions are absolute" in plain(learned, width=300)


def test_save_hf_keeps_the_dropout_a_gpt2_folder_can_say_and_tells_where_it_cannot(tmp_path):
    import json

    from test_commands import Recorder

    s = tiny_session(steps=1)
    run(s, ":set dropout=0.1")
    run(s, ":train")
    run(s, f":save hf:{tmp_path / 'g'}")
    config = json.loads((tmp_path / "g" / "config.json").read_text())
    assert (config["attn_pdrop"], config["resid_pdrop"], config["embd_pdrop"]) == (0.1, 0.1, 0.0)  # was all 0.0
    back = tiny_session()
    run(back, f":load hf:{tmp_path / 'g'}")
    assert back.model_config.dropout == 0.1  # was 0, with no word
    gpt2 = {"attn_pdrop": 0.1, "resid_pdrop": 0.1, "embd_pdrop": 0.1}  # GPT-2's own: no one rate of the lab's
    from minitf_repl.core.hf.gpt2 import lab_dropout

    assert lab_dropout(gpt2) == 0.0 and lab_dropout({}) == 0.0
    llama = tiny_session(steps=1)
    run(llama, ":set preset=llama dropout=0.1")
    run(llama, ":train")
    hooks = Recorder()
    run(llama, f":save hf:{tmp_path / 'l'}", hooks)
    assert any("dropout=0.1 is not in the folder" in n for n in hooks.notices), hooks.notices


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "cp1252"])
def test_the_iconv_line_a_text_in_another_encoding_is_told_converts_it(tmp_path, encoding):
    import shutil
    import subprocess

    from minitf_repl.core.data import read_text_file
    from minitf_repl.core.errors import DataError

    if shutil.which("iconv") is None:
        pytest.skip("no iconv here")
    text = "the quick brown fox, caf\u00e9 \u2014 na\u00efve\n" * 50
    path = tmp_path / "notes.txt"
    path.write_bytes(text.encode(encoding))
    with pytest.raises(DataError) as told:
        read_text_file(str(path))
    import re

    line = re.search(r"iconv -f \S+ -t UTF-8 \S+ > \S+", str(told.value)).group(0)
    done = subprocess.run(line, shell=True, capture_output=True, cwd=tmp_path)  # as pasted into a shell
    assert done.returncode == 0, done.stderr  # was: "failed to start conversion processing" for utf-16-le
    assert (tmp_path / "notes-utf8.txt").read_text(encoding="utf-8") == text


def test_mistakes_cut_what_came_before_between_characters_not_inside_an_escape():
    from minitf_repl.commands.mistakes import _last_shown

    assert _last_shown("a\u200db", 7) == "\\u200db"  # the escape whole
    assert _last_shown("a\u200db", 5) == "b"  # was "200db": the escape cut, read as text
    assert _last_shown("hello", 3) == "llo"


def test_rotation_says_a_folder_of_other_files_for_what_it_is_and_compares_losses_of_one_data(checkpoint_dir):
    from test_render import plain

    s = tiny_session(steps=2)
    s.checkpoint_dir = checkpoint_dir
    (checkpoint_dir / "autosave").mkdir(parents=True)
    (checkpoint_dir / "autosave" / "mine.txt").write_text("x")
    result = run(s, ":train")
    assert result.moved_aside == "autosave-1" and result.moved_files
    words = plain(result, width=300)
    assert "autosave was a folder of other files, not a checkpoint: it is kept as autosave-1" in words
    assert "autosave-1 restores it" not in words  # was: "(:load autosave-1 restores it)" of a folder with none


def test_a_deleted_autosave_of_other_data_is_not_called_better(checkpoint_dir):
    from test_render import plain

    s = tiny_session(steps=40, eval_every=40)  # on sort: its loss does not compare with a text's
    s.checkpoint_dir = checkpoint_dir
    run(s, ":train")
    run(s, ":data pydoc")
    results = [run(s, ":train steps=1 eval_every=1 schedule=new") for _ in range(4)]
    last = results[-1]
    assert last.dropped is not None and last.dropped.data_spec.startswith("sort")
    assert last.dropped.val_loss < last.val_loss
    assert "was the oldest autosave kept" not in plain(last, width=300)  # a sort loss "lower" than a text's


def test_a_folder_of_a_checkpoints_own_files_without_its_manifest_is_saved_over(checkpoint_dir):
    import shutil

    s = tiny_session(steps=1)
    s.checkpoint_dir = checkpoint_dir
    run(s, ":train")
    run(s, ":save whole")
    (checkpoint_dir / "broken").mkdir()
    for f in (checkpoint_dir / "whole").iterdir():
        if f.suffix == ".safetensors":
            shutil.copy(f, checkpoint_dir / "broken" / f.name)
    with pytest.raises(UserError, match="save the checkpoint again"):
        run(tiny_session(), ":load broken")  # as :load says of it
    assert run(s, ":save broken").name == "broken"  # the review's: it was refused as "other files"
    assert run(tiny_session(), ":load broken").step == 1


def test_two_outputs_without_an_identity_are_not_taken_for_one(monkeypatch, tmp_path):
    import os

    from rich.console import Console

    from minitf_repl.render import live

    files = [open(tmp_path / name, "w") for name in ("a", "b")]
    try:
        one, other = (Console(file=f) for f in files)
        assert not live.same_output(one, other)
        zero = os.stat_result((0o10000, 0, 0, 1, 0, 0, 0, 0, 0, 0))  # as Windows gives a pipe: no device, no inode
        monkeypatch.setattr(live.os, "fstat", lambda fd: zero)
        assert not live.same_output(one, other)  # the review's: a pipe and a console read as one, an error unsaid
        assert live.same_output(one, one)
    finally:
        for f in files:
            f.close()


@pytest.mark.parametrize("line, hint", [
    (":gen hello --n 5 foo=bar", ":gen --n 5 -- hello foo=bar"),  # was: :gen -- hello --n 5 foo=bar (n as text)
    (":score if a==b: pass counter=3", ":score counter=3 -- if a==b: pass"),
])
def test_the_whole_line_hint_keeps_every_option_before_the_dashes(line, hint):
    from minitf_repl.commands import REGISTRY
    from minitf_repl.parsing import parse_line

    with pytest.raises(UserError) as refused:
        parse_line(line, REGISTRY)
    assert str(refused.value).endswith(f"to read the whole line as text: {hint}")
    parse_line(hint, REGISTRY)  # and the hint parses


def test_a_quote_left_open_inside_a_prose_leaves_the_closed_ones_quotes():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.parsing import parse_line

    _, args = parse_line(':gen temperature="0.5" print("x', REGISTRY)  # was: temperature got '"0.5"'
    assert args["temperature"] == 0.5 and args["prompt"] == 'print("x'


def test_the_mask_switched_off_and_back_with_nothing_trained_between_keeps_the_models_own_losses():
    from minitf_repl.repl import toolbar_text

    s = tiny_session(steps=20, eval_every=20)
    run(s, ":train")
    run(s, ":set causal=off")
    assert "val loss" not in toolbar_text(s)
    run(s, ":set causal=on")  # back, no step between: the losses are this model's again (the review's)
    assert "val loss" in toolbar_text(s)
    run(s, ":set causal=off")
    run(s, ":train steps=5 schedule=new")
    run(s, ":set causal=on")  # trained without the mask between: the masked losses before are not this model's
    assert "val loss" not in toolbar_text(s)
    result = run(s, ":ngram sample=off")
    assert all(row.model_below_at is None for row in result.rows)  # no step's no-mask loss read as "below" a counter


def test_a_val_loss_no_rate_can_lower_is_said_for_what_it_is_not_blamed_on_the_rate(tmp_path):
    from test_render import plain

    s = tiny_session(steps=60, eval_every=60)
    run(s, ":data sort:1")  # its one held-out question holds a 1 that no training question holds
    result = run(s, ":train")
    words = plain(result, width=300)
    assert result.held_out_only == "1"
    assert "the validation data holds '1', which the training data never holds" in words
    assert "learning rate too high" not in words and "lr=0.001" not in words  # was: lower the rate, which fails
    text = tmp_path / "split.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40 + "\u6f22\u5b57" * 100)
    s = tiny_session(steps=2)
    run(s, f":data {text}")
    assert run(s, ":train").held_out_only == "\u5b57\u6f22"  # a text's last tenth in another script


def test_a_rare_character_only_in_the_validation_text_is_not_made_much_of(tmp_path):
    from minitf_repl.core.data import load_data

    rare = tmp_path / "rare.txt"
    rare.write_text("the quick brown fox jumps over the lazy dog. " * 400 + "\U0001F600")
    assert load_data(str(rare)).held_out_only() == ""  # one emoji among 1,800 val characters: too little to say
    most = tmp_path / "most.txt"
    most.write_text("the quick brown fox jumps over the lazy dog. " * 40 + "\u6f22" * 200)
    assert load_data(str(most)).held_out_only() == "\u6f22"


def test_counters_that_tie_as_written_name_the_shortest_the_best():
    from minitf_repl.commands.counting import best, verdict

    result = run(tiny_session(), ":ngram sample=off n=6")
    for row in result.rows:
        if row.n >= 4:
            row.val_loss = 0.00001 * (10 - row.n)  # 0.000 as written, each a little lower than the one before
    assert best(result).n == 4  # was n = 6
    assert not any("still the best" in line for line in verdict(result))  # was: ":ngram n=8 tries longer contexts"


def test_data_names_a_dangling_link_and_joins_a_folder_into_a_file_beside_it(tmp_path, monkeypatch):
    import os

    from minitf_repl.core.data import read_text_file
    from minitf_repl.core.errors import DataError

    (tmp_path / "broken.txt").symlink_to(tmp_path / "nope.txt")
    with pytest.raises(DataError, match="broken.txt is a symbolic link to .*nope.txt, which does not exist"):
        read_text_file(str(tmp_path / "broken.txt"))  # was "no such file", of a name ls lists
    os.remove(tmp_path / "broken.txt")
    texts = tmp_path / "poems"
    texts.mkdir()
    for k in range(3):
        (texts / f"p{k}.txt").write_text("a poem of some length\n" * 20)
    monkeypatch.chdir(texts)
    with pytest.raises(DataError) as told:
        read_text_file(".")
    assert f"> {tmp_path / 'poems.txt'}" in str(told.value), str(told.value)  # was: cat ./*.txt > ..txt


def test_a_loaded_bpe_knows_which_text_it_was_trained_on(tmp_path, checkpoint_dir):
    from test_commands import Recorder

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("the quick brown fox jumps over the lazy dog. " * 120)
    b.write_text("pack my box with five dozen liquor jugs, then the quick brown fox. " * 80)
    s = tiny_session(steps=2)
    s.checkpoint_dir = checkpoint_dir
    run(s, f":data {a}")
    run(s, ":set tokenizer=bpe:300 max_seq_len=16")
    run(s, ":train")
    run(s, ":save abpe")
    t = tiny_session()
    t.checkpoint_dir = checkpoint_dir
    run(t, ":load abpe")
    heard = Recorder()
    run(t, f":data {b}", heard)
    assert any("a BPE trained on a.txt's text" in n for n in heard.notices), heard.notices  # was: not a word
    result = run(t, ":set tokenizer=bpe:288")  # was: "nothing changed", the BPE of a's text reading b's
    assert result.rebuilt
    u = tiny_session()
    u.checkpoint_dir = checkpoint_dir
    run(u, ":load abpe")
    again = Recorder()
    run(u, f":data {a}", again)  # its own text: nothing to say
    assert not any("a BPE trained on" in n for n in again.notices), again.notices


def test_a_data_file_changed_on_disk_since_it_was_read_is_said(tmp_path):
    from test_commands import Recorder

    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 60)
    s = tiny_session(steps=1)
    run(s, f":data {text}")
    quiet = Recorder()
    run(s, ":data", quiet)
    assert not any("changed on disk" in n for n in quiet.notices)
    text.write_text("xyz\n" * 3000)  # rewritten: the session still holds the text as read
    for line in (":data", ":train"):
        heard = Recorder()
        run(s, line, heard)
        assert any("t.txt has changed on disk since it was read" in n for n in heard.notices), (line, heard.notices)
    run(s, f":data {text}")  # read again: nothing to say
    again = Recorder()
    run(s, ":data", again)
    assert not any("changed on disk" in n for n in again.notices)


def test_mistakes_cut_keeps_an_accent_on_its_letter():
    from minitf_repl.commands.mistakes import _last_shown

    assert _last_shown("cafe\u0301 au lait", 40) == "cafe\u0301␣au␣lait"  # no dotted circle mid-text
