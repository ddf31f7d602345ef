"""What this session's own look at the items its sweeps left found: each test failed before its fix.

`:ls all` said "all needs a value: :ls all=on|off" where `--all` alone is on: an on/off option named alone is now on,
in the REPL (`:ls all`, `:params all`, `:ngram sample`) and in the shell (`minitf ls all`), for the commands that
take no text (a text command still reads the word as its text: `:shapes all` traces "all").
`:set lr=0` said "lr must be positive, got 0.0": the refusal now quotes the number as it was typed.
A script piped in (`minitf < lesson.txt`) that failed said "error: unknown command :bogus" without saying where:
each error now names the script's line, counted as an editor counts them (comments and blank lines too).
A run stopped between evaluations read its last batch once more inside Trainer.run (a check for weights that overflow,
from the sweep of extremes), so bench/nanogpt.py, which runs steps in chunks, timed one forward more in every chunk:
the check is now Trainer.check_last_update(), which :train asks before it keeps the model.
Where no bar is drawn (a dumb terminal, standard error sent to a file), `minitf checks causal --json` on a tiny model
wrote "causal check: 12/12" before its error, for a check done in a blink: a work's quarters are said once it has
gone on for a second.
A fresh clone's session: `:set lr=1e39` then `:train schedule=new` ended in "internal error: RuntimeError: value cannot
be converted to type float without overflow" (Muon's step scale), and the model was left with half that update in it
(`:checks causal` then failed on nan gradients). The overflow is a divergence now, rolled back as one; and any
internal error during a :train step rolls the session back before it is reported.
"""

import pytest

from minitf_repl.commands.base import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.parsing import parse_line

from test_cli import assert_one_error_line, invoke


@pytest.mark.parametrize("line, name, key", [(":ls all", "ls", "all"), (":params ALL", "params", "all"),
                                             (":ngram sample", "ngram", "sample")])
def test_an_on_off_option_named_alone_is_on(line, name, key):
    cmd, args = parse_line(line, REGISTRY)
    assert cmd.name == name and args[key] is True


def test_an_on_off_option_named_alone_twice_or_beside_its_value_is_refused_once():
    for line in (":ls all all", ":ls all=on all"):
        with pytest.raises(UserError, match="all is given twice; give it once"):
            parse_line(line, REGISTRY)
    with pytest.raises(UserError, match=r":ls takes no text; got 'junk'"):
        parse_line(":ls all junk", REGISTRY)  # the switch is read, the rest is still refused as text
    cmd, args = parse_line(":shapes all", REGISTRY)  # a command with a text reads the word as its text
    assert cmd.name == "shapes" and "all" not in {k for k, v in args.items() if v is True}


def test_the_shell_reads_an_on_off_option_named_alone_as_on(tmp_path):
    result = invoke("--checkpoint-dir", str(tmp_path), "ls", "all")
    assert result.exit_code == 0, result.output
    assert "no checkpoints" in result.output
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "ls", "all", "--all"), code=2)
    assert "all is given twice (--all and all); give it once" in line


@pytest.mark.parametrize("typed", ["0", "-1e-3", "-.5", "0.0"])
def test_a_refused_number_is_quoted_as_typed(typed):
    with pytest.raises(UserError) as e:
        parse_line(f":set lr={typed}", REGISTRY)
    assert str(e.value).endswith(f"lr must be positive, got {typed}"), str(e.value)


def test_a_piped_scripts_error_names_its_line():
    import io

    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.session import Session

    out, err = (Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True) for _ in range(2))
    lines = ["# a lesson", "", ":set lr=0", ":config", ":bogus"]
    assert repl.run_lines(lines, Session(), out, err) == 1
    assert err.file.getvalue().splitlines() == ["error: line 3: lr must be positive, got 0",
                                                "error: line 5: unknown command :bogus (:help lists commands)"]
    assert "lr" in out.file.getvalue()  # :config ran between them


def test_a_run_in_chunks_reads_no_batch_again_and_the_check_is_asked_for():
    import torch

    from minitf_repl.core.errors import TrainingDiverged
    from test_commands import tiny_session

    s = tiny_session(optimizer="adamw", warmup_steps=0, lr=1e30, eval_every=100)
    trainer = s.trainer
    calls = []
    hook = s.model.register_forward_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    try:
        trainer.run(should_stop=lambda: trainer.step >= 1)  # one step of a chunk: weights of 1e30, still finite
    finally:
        hook.remove()
    assert trainer.step == 1 and calls and all(calls)  # the training step's forward alone, none without grad
    with pytest.raises(TrainingDiverged, match="the loss of its batch became nan"):
        trainer.check_last_update()
    trainer.check_last_update()  # asked once: a second ask has nothing left to read


def test_progress_lines_where_no_bar_is_drawn_wait_for_a_work_that_takes_a_while(monkeypatch):
    import io

    from rich.console import Console

    from minitf_repl.render import live

    clock = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    console = Console(file=io.StringIO(), width=100, color_system=None)
    reporter = live.RichReporter(console, live=False, lines=True)
    for done in range(1, 13):  # done in a blink: nothing said
        reporter.on_progress("causal check", done, 12)
    assert console.file.getvalue() == ""
    for done in range(1, 13):  # a second a unit: said from the first quarter past the first second on
        clock[0] += 1.0
        reporter.on_progress("training", done, 12)
    assert console.file.getvalue().splitlines() == ["training: 3/12", "training: 6/12", "training: 9/12",
                                                    "training: 12/12"]


def _weights(session):
    return {k: v.clone() for k, v in session.model.state_dict().items()}


def test_a_rate_whose_update_overflows_a_float_is_a_divergence_and_changes_nothing(checkpoint_dir):
    import torch

    from minitf_repl.core.errors import TrainingDiverged
    from test_commands import run, tiny_session

    s = tiny_session(steps=6, warmup_steps=0)
    run(s, ":train")
    before, step = _weights(s), s.trainer.step
    run(s, ":set lr=1e39")
    with pytest.raises(TrainingDiverged, match=r"the update's scale became inf at step 7; .* back at step 6"):
        run(s, ":train steps=3 schedule=new")  # was: internal error (RuntimeError ... without overflow)
    assert s.trainer.step == step and all(torch.equal(before[k], v) for k, v in s.model.state_dict().items())


def test_an_internal_error_part_way_through_a_step_leaves_the_model_as_it_was(monkeypatch, checkpoint_dir):
    import torch

    from test_commands import run, tiny_session

    s = tiny_session(steps=4, warmup_steps=0)
    run(s, ":train")
    before, step = _weights(s), s.trainer.step
    optimizer = s.trainer.optimizer
    real_step = optimizer.step

    def half_a_step():  # a bug inside the update: some weights moved, then it fails
        real_step()
        raise RuntimeError("a bug in the middle of the update")

    monkeypatch.setattr(optimizer, "step", half_a_step)
    with pytest.raises(RuntimeError, match="a bug in the middle"):
        run(s, ":train steps=2")
    assert s.trainer.step == step and all(torch.equal(before[k], v) for k, v in s.model.state_dict().items())
