"""The 49th session's own look: each test failed before its fix."""

import json
import os
import re
import shlex

import pytest

from test_cli import TINY, assert_one_error_line, invoke
from test_commands import text_file  # noqa: F401 - a fixture


def test_a_one_shot_set_of_the_schedule_names_a_line_that_trains_at_the_new_rate(tmp_path):
    folder = ["--checkpoint-dir", str(tmp_path)]
    assert invoke(*folder, *TINY, "train", "--steps", "4", "--save", "small").exit_code == 0
    told = " ".join(invoke(*folder, "--load", "small", "set", "lr=0.005", "warmup_steps=2").stderr.split())
    line = re.search(r"which (minitf .*) starts", told).group(1)
    assert "lr=0.005" in line, told  # was: minitf --load small train --schedule new, at the checkpoint's 0.01
    assert f"{line.removesuffix(' --schedule new')} goes on at a constant" in told, told  # was: a bare train
    ran = invoke(*shlex.split(line)[1:], "--steps", "3", "--eval-every", "1", "--json")
    assert ran.exit_code == 0, ran.output
    rates = [row["lr"] for row in json.loads(ran.stdout)["curve"]]
    assert max(rates) <= 0.005 * (1 + 1e-6) and max(rates) > 0.004, rates


def test_an_unknown_setting_from_the_shell_names_no_option_that_was_not_typed():
    line = assert_one_error_line(invoke("set", "bogus=1"), code=2)
    # was: "unknown option 'bogus' for --set", an option not typed
    assert re.fullmatch(r"error: unknown key 'bogus' \(minitf set --help lists its \d+ keys, and checkpoint_dir is "
                        r"--checkpoint-dir from the shell\)", line), line
    line = assert_one_error_line(invoke("--set", "bogus=1", "config"), code=2)
    assert line.startswith("error: --set: unknown key 'bogus' ("), line  # was: "--set: ... for --set"


def test_ffn_of_a_skipped_block_says_it_writes_nothing_as_resid_shows():
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    session = tiny_session(data="random:12")
    run(session, ":ablate block=0")
    with pytest.raises(UserError, match=r"block 0 is skipped now \(:ablate block=0\), so its feed-forward writes "
                                        "nothing"):  # was: 8 units writing |FFN(x)| = 8.74, where :resid read 0
        run(session, ":ffn")
    run(session, ":ablate off")
    assert run(session, ":ffn").layer == 0


def test_one_unit_or_one_feature_is_said_in_the_singular():
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import run, tiny_session

    session = tiny_session(data="random:12")
    for line, said in ((":ffn k=1", "this 1 unit writes "), (":ln k=1", "this 1 feature of 32 (the largest |x_j|) "
                                                                         "carries ")):
        out = io.StringIO()
        render(run(session, line), Console(file=out, width=200, color_system=None))
        text = " ".join(out.getvalue().split())
        assert said in text, text  # was: "these 1 unit write", "these 1 feature ... carry"


def test_a_utf8_text_with_a_utf16_one_joined_after_it_is_not_called_utf16_throughout(tmp_path):
    from minitf_repl.core.data import read_text_file
    from minitf_repl.core.errors import DataError

    latin = "def f(x):\n    return x + 1\n" * 400
    for head in (latin, latin[:40]):  # a short UTF-8 part too (the review's: 40 characters were still "UTF-16")
        joined = tmp_path / "joined.txt"
        joined.write_bytes(head.encode() + latin.encode("utf-16"))  # `cat a.txt b-utf16.txt > joined.txt`
        with pytest.raises(DataError) as told:
            read_text_file(joined)
        said = str(told.value)  # was: "is UTF-16-LE text (without a byte-order mark)", whose iconv wrote nonsense
        assert f"holds UTF-16-LE text from byte {len(head):,} on" in said and "iconv -f UTF-16 -t UTF-8" in said
    wide = tmp_path / "wide.txt"
    wide.write_bytes(latin.encode("utf-16-le"))  # no mark, NULs from the first character: UTF-16 as before
    with pytest.raises(DataError, match="is UTF-16-LE text \\(without a byte-order mark\\)"):
        read_text_file(wide)


@pytest.mark.skipif(os.name == "nt", reason="the line given is mkdir -p and cp -r")
def test_a_loaded_one_shot_given_another_checkpoint_folder_is_told_a_line_that_loads(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    assert invoke("--checkpoint-dir", str(old), *TINY, "train", "--steps", "2", "--save", "small").exit_code == 0
    line = assert_one_error_line(invoke("--checkpoint-dir", str(old), "--load", "small", "--set",
                                        f"checkpoint_dir={new}", "ls"), code=1)
    fix = line.partition("e.g. ")[2]
    assert fix.startswith("mkdir -p"), line  # was: minitf --checkpoint-dir NEW --load small config: "no checkpoint"
    steps = fix.split(" && ")
    assert os.system(" && ".join(steps[:-1])) == 0
    again = invoke(*shlex.split(steps[-1])[1:])
    assert again.exit_code == 0 and "small" in again.output, again.output
    line = assert_one_error_line(invoke("--checkpoint-dir", str(old), "--load", "small", "--set",
                                        f"checkpoint_dir={new}", "ls"), code=1)
    assert f"which then loads {new}'s own small: minitf" in line and "cp -r" not in line, line  # cp -r merged two


def test_ls_and_load_of_a_folder_of_a_users_files_never_tell_to_remove_it(tmp_path):
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    session = tiny_session()
    session.set_shell_config(session.shell_config.replace(checkpoint_dir=str(tmp_path)))
    (tmp_path / "mynotes").mkdir()
    (tmp_path / "mynotes" / "notes.txt").write_text("important")
    said = next(r.error for r in run(session, ":ls").rows if r.name == "mynotes")
    assert said == f"{tmp_path / 'mynotes'} is not a checkpoint (no checkpoint.json; it holds 1 other file " \
                   "(notes.txt))", said  # was: "...save it again or remove that directory", which :save then refused
    with pytest.raises(UserError, match="is not a checkpoint .no checkpoint.json; it holds 1 other file .notes.txt.."):
        run(session, ":load mynotes")


def test_a_data_file_deleted_during_a_session_is_said_and_saved_by_its_absolute_path(tmp_path, monkeypatch):
    import json as json_

    from test_commands import TEXT, run, tiny_session

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rel.txt").write_text(TEXT)
    session = tiny_session(data="data/rel.txt")
    session.set_shell_config(session.shell_config.replace(checkpoint_dir=str(tmp_path / "ck")))
    run(session, ":train steps=2")
    (tmp_path / "data" / "rel.txt").unlink()
    hooks = __import__("test_commands").Recorder()
    run(session, ":train steps=2", hooks)
    assert any("rel.txt is no longer on disk (deleted or moved)" in n for n in hooks.notices), hooks.notices  # was: -
    run(session, ":save relB")
    kept = json_.loads((tmp_path / "ck" / "relB" / "checkpoint.json").read_text())["data_spec"]
    assert kept == str(tmp_path / "data" / "rel.txt"), kept  # was: data/rel.txt, relative to a folder left behind


def test_the_report_of_a_bpe_model_names_its_tokenizer_and_the_bits_per_character(tmp_path, text_file):
    from test_commands import run, tiny_session

    session = tiny_session(data=text_file)
    run(session, ":set tokenizer=bpe:270")
    run(session, ":train steps=2")
    page = run(session, f":report {tmp_path / 'r.html'}")
    html = (tmp_path / "r.html").read_text()
    bpc = session.trainer.history[-1]["val_bpc"]
    assert "tokenizer: <code>bpe:270</code>" in html  # was: no word of the tokenizer on the page
    assert f"val loss {session.status().val_loss:.4f} a token ({bpc:.4f} bits per character)" in html, page
    assert "nats a token.</p>" in html


def test_a_stopped_run_of_save_name_goes_on_into_that_name(tmp_path):
    from test_commands import Recorder, run, tiny_session

    session = tiny_session(steps=10)
    session.set_shell_config(session.shell_config.replace(checkpoint_dir=str(tmp_path)))
    assert run(session, ":train save=mine", Recorder(stop_after=3)).saved == "mine"
    hooks = Recorder()
    result = run(session, ":train", hooks)
    assert result.saved == "mine" and not result.replaced, result  # was: autosave; mine kept the model of step 3
    assert any("goes on into checkpoint mine, as its save= asked" in n for n in hooks.notices), hooks.notices
    assert json.loads((tmp_path / "mine" / "checkpoint.json").read_text())["trainer"]["step"] == 10
    assert not (tmp_path / "autosave").exists()
    run(session, ":train steps=4", Recorder(stop_after=2))  # another run, stopped: its own save, autosave
    assert run(session, ":train").saved == "autosave"


def test_a_new_run_after_a_stop_says_it_holds_the_stopped_runs_rate():
    from test_commands import Recorder, run, tiny_session

    session = tiny_session(steps=40, warmup_steps=2)
    session.set_shell_config(session.shell_config.replace(autosave=False))
    run(session, ":train", Recorder(stop_after=5))
    hooks = Recorder()
    run(session, ":train steps=3", hooks)
    said = " ".join(hooks.notices)
    rate = hooks.steps[-1].lr
    assert f"at the stopped run's rate of {rate:.3g} held constant, not decayed (:train steps=3 schedule=new " \
           "warms up and decays); :train alone" in said, said  # was: "a new run of 3 steps", nothing of its rate
    run(session, ":train steps=40", Recorder(stop_after=5))
    stopped_at = session.trainer.rate_to_continue()
    run(session, ":set lr=0.001")
    hooks = Recorder()
    run(session, ":train steps=3", hooks)
    said = " ".join(hooks.notices)
    assert f"at the lr setting's 0.001 (the stopped run was at {stopped_at:.3g}) held constant" in said, said
    assert [round(step.lr, 9) for step in hooks.steps] == [0.001] * 3  # the review's: credited to the stopped run


def test_a_resigned_manifest_with_an_impossible_loss_or_accuracy_is_refused(tmp_path):
    from minitf_repl.core.checkpoint.manifest import encode_manifest, meta_sha256
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    session = tiny_session()
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=3")
    run(session, ":save good")
    original = json.loads((tmp_path / "good" / "checkpoint.json").read_text())
    for key, value, said in (("val_loss", -5.0, "negative val_loss"), ("train_loss", -1.0, "negative train_loss"),
                             ("accuracy", 1.5, "accuracy above 1")):
        manifest = json.loads(json.dumps(original))
        manifest["trainer"]["history"][-1][key] = value
        manifest["meta_sha256"] = meta_sha256(manifest)  # re-signed, as a hand edit that knows the format is
        (tmp_path / "good" / "checkpoint.json").write_bytes(encode_manifest(manifest))
        [row] = [r for r in run(session, ":ls").rows if r.name == "good"]
        assert row.error is not None and said in row.error, (key, row)  # was: listed, val loss -5.0000
        fresh = tiny_session()
        fresh.checkpoint_dir = tmp_path
        with pytest.raises(UserError, match=said):
            run(fresh, ":load good")


def test_a_one_shot_run_stopped_under_a_name_is_told_the_line_that_goes_on_into_it():
    from test_render import text_of, train_result

    from minitf_repl.syntax import SHELL, speaking

    with speaking(SHELL):
        named = text_of(train_result(steps=7, total_steps=7, run_remaining=13, stopped=True, evals=[], val_loss=None,
                                     saved="mine"))
        auto = text_of(train_result(steps=7, total_steps=7, run_remaining=13, stopped=True, evals=[], val_loss=None,
                                    saved="autosave"))
    assert "stopped at step 7 of 20: minitf --load mine train --save mine continues" in named, named  # was: no --save
    assert "stopped at step 7 of 20: minitf --load autosave train continues" in auto, auto


def test_a_suggested_line_gives_each_setting_once_whatever_its_spelling_or_grouping(tmp_path):
    folder = ["--checkpoint-dir", str(tmp_path)]
    assert invoke(*folder, *TINY, "train", "--steps", "2", "--save", "small").exit_code == 0
    told = " ".join(invoke(*folder, "--load", "small", "--set", "learning_rate=0.005", "config").stderr.split())
    line = re.search(r"which (minitf .*) starts", told).group(1)
    ran = invoke(*shlex.split(line)[1:], "--steps", "1")
    assert ran.exit_code == 0, (line, ran.output)  # the review's: --set learning_rate=... --set lr=...: "given twice"
    told = " ".join(invoke(*folder, "--data", "sort", "--set", "d_model=32 n_heads=2 n_layers=1", "set",
                           "d_model=64").output.split())
    line = re.search(r"e\.g\. (minitf .* train)$", told).group(1)
    assert "n_heads=2" in line and "d_model=32" not in line, line
    ran = invoke(*shlex.split(line)[1:], "--steps", "1")
    assert ran.exit_code == 0, (line, ran.output)  # was: --set 'd_model=32 n_heads=2' --set d_model=64: "given twice"


def test_the_no_mask_note_reads_as_a_sentence_and_its_shell_lines_keep_the_mask_off(tmp_path):
    folder = ["--checkpoint-dir", str(tmp_path)]
    assert invoke(*folder, *TINY, "train", "--steps", "2", "--save", "small").exit_code == 0
    said = " ".join(invoke(*folder, "--load", "small", "set", "causal=off").output.split())
    assert "Trained so (minitf" in said and " it so and" not in said, said  # was: ":train schedule=new it so and"
    train = re.search(r"Trained so \((minitf .*?)\),", said).group(1)
    assert "--set causal=off" in train, train  # was: a train with the mask on
    assert invoke(*shlex.split(train)[1:], "--steps", "1").exit_code == 0
    looks = re.findall(r"minitf [^()]*? (?:attn|gen)\b", said)
    assert looks == [f"minitf --checkpoint-dir {tmp_path} --load autosave {view}" for view in ("attn", "gen")], looks
    shown = invoke(*shlex.split(looks[0])[1:-1], "config")  # the model the train line trained, without the mask
    assert re.search(r"causal\s+off", shown.output), shown.output


def test_gens_first_token_leaves_out_the_fast_paths_one_time_choice_of_kernels(monkeypatch):
    import functools
    import time

    from minitf_repl.core import fastpath
    from test_commands import run, tiny_session

    @functools.lru_cache(maxsize=None)
    def slow_choice() -> bool:  # onednn_faster's measurement, made slow enough to see
        time.sleep(0.5)
        return False

    monkeypatch.setattr(fastpath, "onednn_faster", slow_choice)
    session = tiny_session()
    run(session, ":set dtype=float32")
    result = run(session, ":gen 12 n=3 cache=on")
    assert result.first_token_seconds < 0.4, result.first_token_seconds  # was: 0.5 s and more, the cache "slow"


def test_steps_same_pick_line_writes_a_short_prompt_with_a_newline_as_escapes(text_file):
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import run, tiny_session

    session = tiny_session(data=text_file)
    out = io.StringIO()
    render(run(session, ':step "the\\nfox" seed=1'), Console(file=out, width=300, color_system=None))
    text = out.getvalue()
    same = re.search(r"\((:gen .*) picks the same\)", text).group(1)
    assert same.startswith(':gen "the\\nfox" n=1'), same  # was: ":gen PROMPT n=1 ...", a placeholder
    picked = int(re.search(r"picked .* \(id (\d+)\)", text).group(1))
    again = run(session, same)
    assert session.data.tokenizer.encode(again.text) == [picked], (again.text, picked)


def test_an_untrained_model_saved_as_a_hugging_face_folder_is_said_to_be_random(tmp_path):
    from minitf_repl.core.errors import UserError
    from test_commands import Recorder, run, tiny_session

    session = tiny_session(data="random:12")
    run(session, ":set qk_norm=on")
    run(session, ":train steps=2")
    with pytest.raises(UserError) as told:
        run(session, f":save hf:{tmp_path / 'q'}")
    assert str(told.value).endswith("train a new model with that setting changed, which starts from fresh weights"), \
        str(told.value)  # the fix phrase follows: it was placed after "save a lab checkpoint instead"
    run(session, ":set qk_norm=off")  # the fix: a new model
    hooks = Recorder()
    run(session, f":save hf:{tmp_path / 'q'}", hooks)
    said = hooks.notices  # was: saved without a word
    assert any("has not trained yet: the folder holds its random" in n for n in said), said


@pytest.mark.parametrize("built, changed", [
    (dict(pos_encoding="rope"), dict(rope_base=500.0)),
    (dict(), dict(norm_eps=1e-2)),
    (dict(norm="rmsnorm", qk_norm=True), dict(norm_eps=0.5)),
    (dict(n_experts=4), dict(experts_per_token=1)),
])
def test_a_base_an_eps_and_a_top_k_change_in_place_as_the_model_built_with_them_computes(built, changed):
    import torch

    from minitf_repl import MiniTransformerLM, ModelConfig
    from minitf_repl.core.config import rebuilding_changes

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=20, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, **built)
    model = MiniTransformerLM(config).eval()
    idx = torch.randint(0, 20, (1, 12))
    new = config.replace(**changed)
    assert rebuilding_changes(config, new) == []  # was: a rebuild, the trained weights reset
    fresh = MiniTransformerLM(new).eval()
    fresh.load_state_dict(model.state_dict())
    before = model(idx)[0]
    model.take_config(new)
    assert not torch.allclose(before, model(idx)[0])  # the forward pass reads the new value
    torch.testing.assert_close(model(idx)[0], fresh(idx)[0])


def test_set_rope_base_on_a_trained_model_keeps_its_weights_and_says_so():
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import TINY, run

    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session

    session = Session(ModelConfig(**{**TINY, "pos_encoding": "rope"}), TrainConfig(steps=4, batch_size=4),
                      data_spec="sort:4", device_name="cpu")
    run(session, ":train")
    weights = {k: v.clone() for k, v in session.model.state_dict().items()}
    out = io.StringIO()
    render(run(session, ":set rope_base=50"), Console(file=out, width=300, color_system=None))
    assert session.trainer.step == 4 and all(v.equal(weights[k]) for k, v in session.model.state_dict().items())
    assert "rope_base changed in place, the weights kept" in out.getvalue(), out.getvalue()


def test_a_word_wider_than_the_line_breaks_after_a_bar_or_a_comma_not_inside_a_name():
    import io

    from rich.console import Console
    from rich.text import Text

    from minitf_repl.render.chart import Curve, chart
    from minitf_repl.render.words import say, word_lines

    usage = "usage: :plot [what=loss|lr|grad_norm|lens_rank|block_grad|copying|induction|context]"
    lines = [line.plain for line in word_lines(Text(usage), 40)]
    assert lines == ["usage: :plot [what=loss|lr|grad_norm|", "lens_rank|block_grad|copying|induction|",
                     "context]"], lines  # was: "...|embe" then "d|context]", cut by the terminal
    out = io.StringIO()
    say(Console(file=out, width=40, color_system=None), "▲ norm=rmsnorm,activation=swiglu,pos_encoding=rope: 11 "
                                                         "parameters")
    said = out.getvalue().splitlines()[:2]
    assert said == ["▲ norm=rmsnorm,activation=swiglu,", "pos_encoding=rope: 11 parameters"], said
    drawn = chart([Curve("norm=rmsnorm,activation=swiglu,pos_encoding=rope", [1, 2], [3.0, 2.5], "▲")], 36)
    out = io.StringIO()
    Console(file=out, width=40, color_system=None).print(drawn)
    assert "▲ norm=rmsnorm,activation=swiglu,\npos_encoding=rope" in out.getvalue(), out.getvalue()  # the legend


def test_tab_goes_on_into_a_folder_whose_name_it_quoted(tmp_path, monkeypatch):
    import asyncio

    from prompt_toolkit.buffer import Buffer
    from prompt_toolkit.document import Document

    from minitf_repl.commands import REGISTRY
    from minitf_repl.repl import CommandCompleter, completion_bindings, tab_completes

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir with space").mkdir()
    (tmp_path / "dir with space" / "my corpus file.txt").write_text("hi")
    buffer = Buffer(completer=CommandCompleter(registry=REGISTRY, session=None), complete_while_typing=False)
    buffer.document = Document(":data dir")
    lines = []

    async def press_tab_three_times():
        for _ in range(3):
            before = buffer.text
            tab_completes(buffer)
            for _ in range(100):  # the completer runs in the background: up to 2 s for the line to change
                await asyncio.sleep(0.02)
                if buffer.text != before:
                    break
            lines.append(buffer.text)

    asyncio.run(press_tab_three_times())
    # was: '"dir with space/', then 'dir' again, back and forth
    assert lines == [':data "dir with space/'] + [':data "dir with space/my corpus file.txt"'] * 2, lines
    assert any(b.keys == ("c-i",) for b in completion_bindings().bindings)  # what the REPL's Tab runs


def test_a_one_shot_set_that_rebuilds_a_loaded_model_names_a_line_with_its_architecture(tmp_path):
    folder = ["--checkpoint-dir", str(tmp_path)]
    made = invoke(*folder, "--set", "preset=llama d_model=32 n_heads=2 n_layers=1 d_ff=64 max_seq_len=32",
                  "--data", "sort", "train", "--steps", "2", "--save", "v_llama")
    assert made.exit_code == 0, made.output
    told = " ".join(invoke(*folder, "--load", "v_llama", "set", "n_layers=2").output.split())
    line = re.search(r"e\.g\. (minitf .*?' train) ", told).group(1)
    shown = invoke(*shlex.split(line)[1:-1], "config")
    assert shown.exit_code == 0, shown.output  # was: --data sort --set n_layers=2 train, the seed's architecture
    assert "matches the preset llama" in " ".join(shown.output.split()), (line, shown.output)
    told = " ".join(invoke(*folder, "--load", "v_llama", "set", "preset=gpt2").output.split())  # the review's
    line = re.search(r"e\.g\. (minitf .*?' train) ", told).group(1)
    assert "matches the preset gpt2" in " ".join(invoke(*shlex.split(line)[1:-1], "config").output.split()), line


def test_a_hugging_face_save_says_which_settings_load_back_otherwise(tmp_path):
    from test_commands import Recorder, run, tiny_session

    session = tiny_session(data="random:12")
    run(session, ":set preset=llama d_ff=64")
    run(session, ":train steps=2")
    hooks = Recorder()
    run(session, f":save hf:{tmp_path / 'l'}", hooks)
    said = " ".join(hooks.notices)
    assert "the folder loads back with d_ff=63 (for d_ff=64): the same model, in Llama's terms" in said, said
    fresh = tiny_session(data="random:12")
    run(fresh, f":load hf:{tmp_path / 'l'}")
    assert fresh.model_config.d_ff == 63  # what it said; was: found later in :config without a word


def test_a_base_a_learned_model_does_not_read_changes_nothing_and_is_not_said_to():
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import run, tiny_session

    session = tiny_session()  # learned positions: rope_base turns nothing
    run(session, ":train steps=2")
    since = session.measured_since_step
    out = io.StringIO()
    render(run(session, ":set rope_base=500"), Console(file=out, width=300, color_system=None))
    assert "changed in place" not in out.getvalue(), out.getvalue()  # the review's: "another function" of nothing
    assert session.measured_since_step == since  # its losses are still its own (they were hidden)


def test_a_checkpoint_of_a_model_no_step_trained_on_its_data_loads_with_the_data_it_did(tmp_path):
    from test_commands import run, tiny_session

    session = tiny_session(data="sort:3")
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=4")
    run(session, ":data reverse:3")  # the same vocabulary: the model stays, and a save holds the session's data
    kept = run(session, ":set d_model=48").kept  # a rebuild keeps it
    manifest = json.loads((tmp_path / kept / "checkpoint.json").read_text())
    assert (manifest["data_spec"], manifest["data_since_step"]) == ("reverse:3", 4)  # no step on it
    loaded = invoke("--checkpoint-dir", str(tmp_path), "--load", kept, "--data", "sort:3", "gen", "312=")
    assert loaded.exit_code == 0, loaded.output  # was: "was trained on 'reverse:3', not 'sort:3'", false
    assert "data reverse:3 came in after its last step: it goes on with sort:3" in " ".join(loaded.stderr.split())
    refused = invoke("--checkpoint-dir", str(tmp_path), "--load", "autosave", "--data", "reverse:3", "gen", "312=")
    assert "was trained on 'sort:3', not 'reverse:3'" in refused.stderr  # one that trained on its data: as before


def test_a_stopped_run_continued_by_another_process_replaces_its_own_autosave(checkpoint_dir):
    from minitf_repl.core import checkpoint as ckpt
    from test_commands import Recorder, run, tiny_session

    def steps_saved() -> dict:
        return {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}

    for seed in (1, 2):
        run(tiny_session(seed=seed), ":train steps=3")  # two earlier runs: autosave-1 and autosave
    run(tiny_session(seed=3), ":train steps=10", Recorder(stop_after=4))  # stopped: its autosave at step 4
    assert steps_saved() == {"autosave": 4, "autosave-1": 3, "autosave-2": 3}
    later = tiny_session()  # another process: `minitf --load autosave train`
    run(later, ":load autosave")
    assert run(later, ":train").total_steps == 10
    assert steps_saved() == {"autosave": 10, "autosave-1": 3, "autosave-2": 3}  # was: the stopped run twice, one gone


def test_a_compiled_run_of_one_step_does_not_say_its_compile_time_is_left_out_of_tokens_per_second():
    from test_render import text_of, train_result

    one = " ".join(text_of(train_result(steps=1, total_steps=1, run_remaining=49, stopped=True, evals=[],
                                        val_loss=None, compiled=True, compile_seconds=5.3)).split())
    assert "compiled in 5.3 s (its one step's tokens/s counts it)" in one, one  # was: "(not in tokens/s)", untrue
    many = " ".join(text_of(train_result(steps=20, total_steps=20, compiled=True, compile_seconds=5.3)).split())
    assert "compiled in 5.3 s (not in tokens/s)" in many, many


@pytest.mark.parametrize("height", [8, 9, 12])
def test_the_middle_label_names_the_value_of_its_own_row(height):
    import io

    from rich.console import Console

    from minitf_repl.render.chart import Curve, chart

    drawn = chart([Curve("v", [1, 2, 3], [0.0, 0.5, 1.0], "•")], 40, height=height)
    out = io.StringIO()
    Console(file=out, width=60, color_system=None).print(drawn)
    rows = out.getvalue().splitlines()[:height]
    labelled = {i: float(row.split("┤")[0]) for i, row in enumerate(rows) if "┤" in row}
    top, bottom = labelled.pop(0), labelled.pop(height - 1)
    [(r, middle)] = labelled.items()
    # was: (top + bottom) / 2 on row (height - 1) // 2, which with an even height stands for another value
    assert abs(middle - (top - r / (height - 1) * (top - bottom))) <= 0.01 * (top - bottom), (middle, rows)


def test_fixes_for_an_off_task_question_and_a_foreign_character_on_a_task_work_from_the_shell(tmp_path):
    folder = ["--checkpoint-dir", str(tmp_path)]
    made = invoke(*folder, "--data", "add:2", "--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64", "train", "--steps",
                  "2", "--save", "add2")
    assert made.exit_code == 0, made.output
    said = " ".join(invoke(*folder, "--load", "add2", "gen", "123+456=").output.split())
    fix = re.search(r"; (minitf .*?) trains on questions like it", said).group(1)
    assert fix.endswith("--load add2 train --data add:3"), fix  # was: --data add:3, which --load refuses
    ran = invoke(*shlex.split(fix)[1:], "--steps", "1")
    assert ran.exit_code == 0, ran.output
    line = assert_one_error_line(invoke(*folder, "--load", "add2", "gen", "56-04="))
    assert line.endswith("remove it: add has +0123456789= only"), line  # was: "or train on data that contains
    # it", which no data of a task can


def test_a_run_stopped_where_the_session_ends_names_the_shells_line_to_go_on():
    from test_render import text_of, train_result

    from minitf_repl.syntax import REPL, speaking

    with speaking(REPL):
        ends = " ".join(text_of(train_result(steps=7, total_steps=7, run_remaining=13, stopped=True, evals=[],
                                             val_loss=None, saved="autosave", session_ends=True)).split())
        goes_on = " ".join(text_of(train_result(steps=7, total_steps=7, run_remaining=13, stopped=True, evals=[],
                                                val_loss=None, saved="autosave")).split())
    # was: ":train continues" as minitf exited (SIGTERM, or piped lines that stop there)
    assert "stopped at step 7 of 20: minitf --load autosave train continues" in ends, ends
    assert "saved checkpoint autosave (minitf --load autosave restores it)" in ends, ends
    assert "stopped at step 7 of 20: :train continues" in goes_on, goes_on


def test_ngram_of_a_model_with_no_evaluation_on_its_data_shows_no_model_below_it_column():
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import Recorder, run, tiny_session

    session = tiny_session(steps=50, eval_every=25)
    run(session, ":train", Recorder(stop_after=3))  # stopped before its first evaluation
    out = io.StringIO()
    render(run(session, ":ngram n=2 sample=off"), Console(file=out, width=200, color_system=None))
    assert "model below it" not in out.getvalue(), out.getvalue()  # was: a column of "not yet" beside it
    run(session, ":train")  # goes on, evaluates
    out = io.StringIO()
    render(run(session, ":ngram n=2 sample=off"), Console(file=out, width=200, color_system=None))
    assert "model below it" in out.getvalue()


def test_ngram_where_the_best_counter_reads_no_context_says_so():
    from minitf_repl.commands.counting import NgramResult, NgramRow, verdict

    rows = [NgramRow(0, 0, float("nan"), 2.773, 2.773, None, None, 100),
            NgramRow(1, 1, 1.0, 2.774, 2.775, None, None, 100), NgramRow(2, 16, 1.0, 2.70, 2.78, None, None, 100)]
    result = NgramResult("repeat:16", "character", 16, 1000, 1000, 500, 500, True, rows, None, 200, 1.888, None,
                         32, True)
    said = " ".join(verdict(result))
    assert "the best, which reads no context (n = 0)" in said, said  # was: "...over the 0 characters before holds"
    assert "over the 0 characters" not in said


def test_checks_blind_on_random_tokens_does_not_claim_the_model_learns_from_its_input():
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import run, tiny_session

    session = tiny_session(data="random:8")
    out = io.StringIO()
    render(run(session, ":checks blind steps=5"), Console(file=out, width=300, color_system=None))
    line = next(row for row in out.getvalue().splitlines() if "blind" in row and "n/a" in row)
    assert "nothing here can be learned from the input" in line, line
    assert "the model learns from its input" not in line, line  # was: beside n/a and two equal losses


def test_gen_of_an_off_task_prompt_with_text_after_its_equals_does_not_call_it_a_whole_answer():
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render
    from test_commands import run, tiny_session

    session = tiny_session(data="add:2")
    out = io.StringIO()
    render(run(session, ":gen 56+4=1234"), Console(file=out, width=300, color_system=None))
    said = out.getvalue()
    assert "already holds a whole answer" not in said, said  # was: beside "'56+4=' is no question of add:2"
    assert "the prompt already has at least an answer's length after its first '='" in said, said


def test_the_reports_attention_map_names_each_bpe_piece_on_its_row():
    import re as re_

    from minitf_repl.report import attention_svg

    pieces = ["m", "p", " x", " <", " y", "&"]
    svg = attention_svg(pieces, [[1.0 / (i + 1)] * (i + 1) for i in range(len(pieces))])
    rows = re_.findall(r'text-anchor="end"[^>]*>([^<]*)</text>', svg)
    assert rows == ["m", "p", "␣x", "␣&lt;", "␣y", "&amp;"], rows  # was: "␣" for each piece after a space
    columns = re_.findall(r'text-anchor="middle"[^>]*>(?:<title>[^<]*</title>)?([^<]*)</text>', svg)
    assert columns == ["m", "p", "x", "&lt;", "y", "&amp;"], columns


def test_a_shell_text_wholly_in_quotes_is_what_the_quotes_hold_as_in_the_repl():
    shown = invoke("tok", '"Q:\\nA:"', "--json")
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["text"] == "Q:\nA:"  # was: the text with its quotes and a backslash
    for word in ('"a', "it's", 'say "hi" now'):  # not wholly in quotes: as typed
        assert json.loads(invoke("tok", word, "--json").stdout)["text"] == word


def test_review_three_a_prompt_in_quotes_round_trips_and_ngram_n1_and_the_folder_of_a_session_that_ends(tmp_path):
    from test_render import text_of, train_result

    from minitf_repl.commands import REGISTRY
    from minitf_repl.commands.counting import NgramResult, NgramRow, verdict
    from minitf_repl.parsing import shell_text
    from minitf_repl.syntax import REPL, SHELL, PromptText, cmd, speaking

    with speaking(SHELL):
        for prompt in ('"hi"', "'x'", 'say "hi"'):
            line = cmd("gen", PromptText(prompt))
            assert shell_text(REGISTRY["gen"], shlex.split(line)[2:]) == prompt, line  # was: the quotes dropped
    rows = [NgramRow(0, 0, float("nan"), 2.485, 2.485, None, None, 100), NgramRow(1, 1, 1.0, 2.42, 2.421, None, None,
                                                                                  100)]
    only = NgramResult("sort:6", "character", 12, 1000, 1000, 500, 500, True, rows, None, 150, 0.244, None, 14, True)
    assert "reads no context" not in " ".join(verdict(only))  # `:ngram n=1`: no longer counter was counted
    with speaking(REPL):
        ends = " ".join(text_of(train_result(steps=7, total_steps=7, run_remaining=13, stopped=True, evals=[],
                                             val_loss=None, saved="autosave", session_ends=True,
                                             folder=str(tmp_path))).split())
    assert f"minitf --checkpoint-dir {tmp_path} --load autosave train continues" in ends, ends
    assert f"(minitf --checkpoint-dir {tmp_path} --load autosave restores it)" in ends, ends
