"""Findings of the fifty-second session's sweep (AMD EPYC Zen 4), each test failing before its fix."""

from __future__ import annotations

import pytest
from test_sweep_bi import complete_as_bash_splits


@pytest.mark.parametrize("line, offered", [
    # was the command names: Click read `norm` as --set's value
    ("minitf --set norm=", ["layernorm", "rmsnorm", "none"]),
    ("minitf --set norm=r", ["rmsnorm"]),  # was rope, resid, report
    ("minitf --set norm=rmsnorm --set optimizer=ad", ["adamw"]),
    ("minitf --set norm=rmsnorm train --st", ["--steps"]),  # was nothing: '=' taken for a command, train's options lost
    ("minitf --set prompt=a=b gen --temp", ["--temperature"]),  # a value with '=' in it
    ("minitf set norm=rmsnorm opt", ["optimizer="]),
])
def test_bash_completes_after_the_global_set_option(line, offered):
    assert complete_as_bash_splits(line) == offered


def test_kv_long_run_keeps_every_column_at_80_columns():
    from minitf_repl.commands.worked import KvStep
    from test_commands import run, tiny_session
    from test_render import text_of
    from test_sweep_bh import replace_steps

    result = run(tiny_session(), ":kv 31 n=4")
    steps = [KvStep("e", "e", 8 if t == 0 else 1, 8 + t, 8 + t, t == 0, 2e-6) for t in range(60)]
    text = text_of(replace_steps(result, steps), 80)
    # was "left out at 80 columns: cache holds": the line naming the cut steps widened the tokens' column
    assert "cache holds" in text and "left out" not in text and "steps 6..51" in text, text


def test_grad_says_why_adamw_moves_the_key_bias_that_receives_nothing():
    from test_commands import run, tiny_session
    from test_render import text_of

    session = tiny_session()
    run(session, ":set optimizer=adamw")
    run(session, ":train steps=3")
    text = " ".join(text_of(run(session, ":grad all=on"), 400).split())
    assert "k_proj.bias receives (almost) nothing" in text, text
    # was the note alone, beside a step column that moved the bias as far as any other tensor
    assert "yet the step column still moves it: AdamW" in text, text


def test_ln_says_eps_and_the_other_norm_in_shares_a_learner_can_read():
    from test_commands import run, tiny_session
    from test_render import text_of

    session = tiny_session()
    text = " ".join(text_of(run(session, ":ln"), 400).split())
    # was "without it s would be 0.115 (0.00038 of s)", read as s shrinking to 0.00038 s
    assert "without it s would be" in text and "% smaller; it matters" in text and " of s)" not in text, text
    run(session, ":set norm=rmsnorm")
    text = " ".join(text_of(run(session, ":ln"), 400).split())
    # was the bracket of mean(x^2) where var is what the root reads, and "as the mean is small against the spread"
    assert "(var(x) = mean(x^2) - mean^2 = " in text and "% of var" in text and "small against" not in text, text


def test_a_divergence_from_the_shell_gives_the_whole_line_to_run_again(tmp_path):
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "--set", "d_model=32", "--set", "d_ff=128",
                                        "--set", "n_layers=1", "--set", "lr=1e9", "train", "--steps", "3"))
    # was "... (--set lr=0.01)", a fragment, where the shell's other messages give a line that runs as pasted
    assert line.endswith(f": minitf --checkpoint-dir {tmp_path} --set d_model=32 --set d_ff=128 --set n_layers=1 "
                         "--set lr=0.01 train --steps 3"), line


def test_a_setting_given_to_a_command_is_said_not_an_option_of_the_command_by_name(tmp_path):
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "lrfind", "lr=0.1"), code=2)
    # was "not an option of minitf --checkpoint-dir DIR lrfind", a line where the command was meant
    assert line.startswith("error: lr is a setting, not an option of minitf lrfind: minitf --checkpoint-dir"), line


@pytest.mark.parametrize("key, said", [
    ("schedule", "the schedule is :train's own option: :train schedule=new warms up"),
    ("lr_schedule", "the schedule is :train's own option"),
    ("momentum", "fixed in minitf, no setting: Muon's momentum 0.9 (Nesterov), AdamW's betas (0.9, 0.99)"),
    ("beta2", "fixed in minitf, no setting"),
])
def test_set_names_where_a_setting_it_lacks_lives(key, said):
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError) as e:  # was "unknown option 'schedule' for :set (:help set lists its 48 keys)"
        run(tiny_session(), f":set {key}=0.95")
    assert f"unknown option '{key}' for :set: {said}" in str(e.value), str(e.value)


def test_a_linear_charts_labels_carry_as_many_decimals_each():
    from minitf_repl.render.chart import axis_labels

    assert axis_labels(2.0, 4.63) == ["4.63", "3.31", "2.00"]  # was 4.63, 3.31, 2: the 2 read as less precise
    assert axis_labels(1.87, 2.27) == ["2.27", "2.07", "1.87"]
    # at most the axis's resolution: a loss from 2.48 down to 0.0002 read "2.484907, 1.420034, 0.000203"
    assert axis_labels(0.000203, 2.484907) == ["2.48", "1.24", "0.00"]
    assert axis_labels(-3.7, -0.5, log_y=True) == ["0.316", "0.00794", "0.0002"]  # a log axis spans magnitudes


def test_a_narrow_loss_tables_legend_names_its_short_headers():
    from minitf_repl.render.live import LossTable

    import io

    from rich.console import Console

    table = LossTable([{"step": 10, "train_loss": 3.0, "val_loss": 2.9, "val_bpc": 4.2, "lr": 1e-3,
                        "tokens_per_second": 1000.0, "elapsed": 0.5}], narrow=True)
    console = Console(file=io.StringIO(), width=60, color_system=None)
    console.print(table)
    text = " ".join(console.file.getvalue().split())
    assert " bpc " in text and "bits/char (bpc): the val loss in bits" in text, text  # was "bits/char:" beside "bpc"


def test_every_train_summary_names_the_dtype_it_ran_in():
    from test_render import text_of, train_result

    assert ", float32, " in text_of(train_result())  # was said only for bfloat16


def test_json_descriptions_speak_json_not_python():
    import json
    import re
    from importlib import resources

    said = []
    for path in (resources.files("minitf_repl") / "schemas").iterdir():
        def walk(node):
            if isinstance(node, dict):
                if re.search(r"\b(None|True|False)\b", str(node.get("description", ""))):
                    said.append((path.name, node["description"]))
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(json.loads(path.read_text()))
    assert not said, said[:5]  # was "(None: not taken)" and the like, of a value the document holds as null
    device = json.loads((resources.files("minitf_repl") / "schemas" / "device.json").read_text())["properties"]
    # was "what dtype=auto means here" of the dtype a step runs in under any setting, and "the dtype setting, and
    # what a training step runs in" of the setting alone
    assert device["dtype"]["description"] == "the dtype setting: auto, float32 or bfloat16"
    assert device["train_dtype"]["description"].startswith("what a training step runs in on the current device")


def test_the_toolbar_at_80_columns_keeps_the_step_a_stopped_runs_val_loss_was_measured_at():
    from types import SimpleNamespace

    from minitf_repl.repl import toolbar_text
    from minitf_repl.session import Status

    status = Status(device="cpu", n_params=176_832, step=381, last_loss=1.9012, data="pydoc", val_loss=1.8748,
                    val_step=350)
    line = toolbar_text(SimpleNamespace(status=lambda: status), 80)
    # was " cpu | 176,832 params | step 381 | val 1.8748 | pydoc ": the medium line was 81 columns
    assert line == " cpu | 176,832 params | step 381 | val 1.8748 (step 350) | pydoc ", line
    assert "(step 350)" in toolbar_text(SimpleNamespace(status=lambda: status), 44)


def test_qkv_marks_a_long_texts_cut_front():
    from test_commands import run, tiny_session

    session = tiny_session()
    window = session.model_config.max_seq_len
    result = run(session, ":qkv " + "0123456789" * (window // 10 + 2))
    assert result.dropped and result.around.startswith("…"), result.around  # was the kept window read as the start
    assert not run(session, ":qkv 0123456789").around.startswith("…")


def test_every_guide_a_command_names_is_a_section_of_the_docs():
    from test_docs import _anchors

    from minitf_repl.commands import REGISTRY

    docs = __import__("pathlib").Path(__file__).resolve().parents[1] / "docs"
    guided = {c.name: c.guide for c in REGISTRY.values() if c.guide}
    assert {"qkv", "ln", "grad", "muon", "kv", "score", "checks"} <= set(guided)  # the views that work math out
    for name, guide in guided.items():
        page, _, anchor = guide.partition("#")
        assert anchor in _anchors(docs / page), (name, guide)


def test_help_of_a_view_names_where_its_terms_are_explained():
    from test_commands import run, tiny_session
    from test_render import text_of

    text = " ".join(text_of(run(tiny_session(), ":help qkv"), 200).split())
    # was the one-line summary and the options: q, k, d_k and the mask went unexplained, the docs unnamed
    assert "worked through, with what each term means: docs/inside-views.md#one-query-worked-out-by-hand-qkv" in text


def test_data_json_says_a_vocabularys_character_count_is_not_known(tmp_path):
    import json

    from test_cli import invoke

    text = tmp_path / "mine.txt"
    text.write_text("the cat sat on the mat, and the dog sat on the log. " * 40, encoding="utf-8")
    folder = str(tmp_path / "ck")
    assert invoke("--checkpoint-dir", folder, "--data", str(text), "--set", "d_model=32", "--set", "n_heads=2",
                  "--set", "n_layers=1", "--set", "d_ff=64", "train", "--steps", "2", "--save", "ft").exit_code == 0
    text.unlink()
    result = invoke("--checkpoint-dir", folder, "--load", "ft", "data", "--json")
    doc = json.loads(result.stdout)
    # was "chars": 0 beside null token counts: the count is unknown, not zero
    assert doc["schema"].startswith("minitf.data/") and doc["info"]["kind"] == "vocabulary"
    assert doc["info"]["chars"] is None


def test_data_json_gives_no_character_count_for_random_tokens():
    import json

    from test_cli import invoke

    doc = json.loads(invoke("--data", "random:5", "data", "--json").stdout)
    assert doc["info"]["chars"] is None  # was 0: random tokens have no examples, "characters per example" of none


def test_data_alone_lists_the_built_in_data_each_with_what_it_is():
    from minitf_repl.core.catalog import ABOUT, TASK_SIZES
    from minitf_repl.core.data import RANDOM_SYMBOLS, Task
    from test_commands import run, tiny_session
    from test_render import text_of

    text = text_of(run(tiny_session(), ":data"), 200)
    # was the current data alone: nothing said what sort, add, random or repeat are, nor N's and V's range
    assert "built in (:data NAME switches to one; a text file's path works too):" in text, text
    assert "  repeat[:V]   random tokens from V symbols, then the same again" in text, text
    assert "  sort[:N]     N digits, then the same digits sorted: 314159=113459 (N from 1 to 30, default 6)" in text
    narrow = text_of(run(tiny_session(), ":data"), 60).splitlines()  # each description wraps in its own column
    assert all(not line.startswith(("to 30", "default")) for line in narrow), narrow
    for name in ("sort", "reverse", "add"):  # each line's example is the task's own
        assert ABOUT[name].endswith(Task(name, TASK_SIZES[name][0]).example), name
    assert TASK_SIZES["random"][2] == TASK_SIZES["repeat"][2] == len(RANDOM_SYMBOLS)


def test_data_says_which_part_of_a_text_is_held_out():
    from test_commands import run, tiny_session
    from test_render import text_of

    text = " ".join(text_of(run(tiny_session(data="pydoc"), ":data"), 200).split())
    assert "tokens (90/10: the first part of the text, then its end)" in text, text  # was "(90/10)" alone


def test_one_expert_a_token_still_teaches_the_router_from_the_loss():
    import torch

    from minitf_repl import MiniTransformerLM, ModelConfig

    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=50, n_experts=4, experts_per_token=1, moe_aux_weight=0.0,
                                          d_model=32, n_heads=2, n_layers=1, d_ff=64, max_seq_len=16))
    x = torch.randint(0, 50, (2, 16))
    model(x, x)[1].backward()
    # was exactly 0: a softmax over the one chosen logit is 1 whatever the router says (Switch gates by p_e)
    assert model.blocks[0].ffn.router.weight.grad.abs().max() > 1e-5
    with torch.no_grad():  # the gate is the chosen expert's probability
        ffn, flat = model.blocks[0].ffn, torch.randn(5, 32)
        probs = torch.softmax(ffn.router(flat), -1)
        top = probs.argmax(-1)
        expected = torch.stack([probs[i, top[i]] * ffn.experts[int(top[i])](flat[i:i + 1])[0] for i in range(5)])
        assert torch.allclose(ffn(flat.view(1, 5, 32)).view(5, 32), expected, atol=1e-6)


def test_save_by_name_keeps_the_more_trained_model_it_would_replace(tmp_path):
    from test_commands import run, tiny_session
    from test_render import text_of

    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":train steps=3 save=best")
    run(session, ":load best")
    run(session, ":set n_heads=4")  # a rebuild: "the trained model was kept as checkpoint best"
    saved = run(session, ":save best")
    # was: best replaced by the step-0 model, the trained one gone, a line after being told best brings it back
    assert saved.step == 0 and saved.kept_as is not None and saved.kept_as.startswith("kept-")
    assert saved.kept_step == 3 and run(session, f":load {saved.kept_as}").step == 3
    assert f"it is kept as {saved.kept_as}" in " ".join(text_of(saved, 300).split())
    run(session, ":train steps=2")
    again = run(session, ":save best")  # further trained than what best holds: replaced, as a save goes on
    assert again.kept_as is None and again.replaced


def test_setting_a_checkpoint_folder_nothing_can_be_saved_in_says_so_at_once(tmp_path, monkeypatch):
    import os

    from minitf_repl.core.checkpoint import layout
    from test_commands import run, tiny_session

    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(layout.os, "access", lambda p, mode: False if str(p).startswith(str(locked)) else real(p, mode))
    from test_commands import Recorder

    session, heard = tiny_session(), Recorder()
    run(session, f":set checkpoint_dir={locked}", heard)
    said = " ".join(heard.notices)
    # was "it holds no checkpoint yet" alone: the next :train's autosave was the first to find it unusable
    assert "but nothing can be saved there, cannot write in" in said and ":set autosave=off" in said, said
    assert session.checkpoint_dir == locked  # not refused: a read-only folder of checkpoints still lists and loads
    heard = Recorder()
    run(session, f":set checkpoint_dir={tmp_path / 'ok'}", heard)
    assert heard.notices and "nothing can be saved" not in " ".join(heard.notices)


def test_a_checkpoint_folder_refused_from_the_shell_gives_the_lines_to_run(tmp_path):
    from test_cli import assert_one_error_line, invoke

    (tmp_path / "afile").write_text("x")
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path / "afile"), "--data", "sort", "train",
                                        "--steps", "5"))
    # was "start minitf with another checkpoint directory; or train without saving: --set autosave=off"
    assert "run it with another checkpoint folder: minitf --data sort --checkpoint-dir DIR train --steps 5" in line
    assert line.endswith(f"or train without saving: minitf --checkpoint-dir {tmp_path / 'afile'} --data sort --set "
                         "autosave=off train --steps 5"), line


def hf_folder(tmp_path):
    """A small model saved as a Hugging Face folder (GPT-2 settings), for the folder tests below."""
    from test_commands import run, tiny_session

    session = tiny_session(data="pydoc")
    run(session, ":set n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=16")
    run(session, ":train steps=1")
    run(session, f":save hf:{tmp_path / 'model'}")
    return tmp_path / "model"


def test_a_folder_whose_tokenizer_is_a_link_to_nothing_is_refused_in_one_line(tmp_path):
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    folder = hf_folder(tmp_path)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to(tmp_path / "blobs" / "gone")  # the cache's blob deleted
    with pytest.raises(UserError) as e:  # was an internal error: FileNotFoundError
        run(tiny_session(data="pydoc"), f":load hf:{folder}")
    assert "tokenizer.json is a link to" in str(e.value) and "download the model again" in str(e.value)


def test_a_lone_weights_file_that_links_to_nothing_says_so_and_blames_no_index(tmp_path):
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    folder = hf_folder(tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(tmp_path / "gone")
    with pytest.raises(UserError) as e:
        run(tiny_session(data="pydoc"), f":load hf:{folder}")
    assert "named by" not in str(e.value) and "model.safetensors is a link to" in str(e.value), str(e.value)


def test_the_loss_tables_legend_explains_a_mixtures_aux_loss_column():
    import io

    from rich.console import Console

    from minitf_repl.render.live import LossTable

    table = LossTable([{"step": 10, "train_loss": 3.0, "val_loss": 2.9, "aux_loss": 1.13, "lr": 1e-3,
                        "tokens_per_second": 1000.0, "elapsed": 0.5}])
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(table)
    text = " ".join(console.file.getvalue().split())
    assert "aux loss: the experts' load balance (1.0: even; training adds moe_aux_weight x it" in text, text


def test_attribution_on_a_model_without_residuals_offers_no_line_that_resets_it():
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    session = tiny_session()
    run(session, ":set residual=off")
    run(session, ":train steps=2")
    with pytest.raises(UserError) as e:
        run(session, ":attrib")
    # was "(:set residual=on)", which rebuilt the model and reset what it was asked about; from the shell it was refused
    assert not e.value.fix and "it needs a model trained with the residual add" in str(e.value), str(e.value)


def test_ngram_samples_show_a_line_end_as_the_other_views_do():
    import dataclasses

    from test_commands import run, tiny_session
    from test_render import text_of

    result = run(tiny_session(data="pydoc"), ":ngram n=2")
    rows = [dataclasses.replace(row, sample="ab\ncd") if row.sample is not None else row for row in result.rows]
    text = text_of(dataclasses.replace(result, rows=rows), 200)
    assert "ab↵cd" in text and "ab cd" not in text  # was a space: the counters seemed never to end a line


def test_latin1_text_that_windows_1252_cannot_read_gets_its_conversion_line(tmp_path):
    from minitf_repl.core.data import read_text_file
    from minitf_repl.core.errors import DataError

    path = tmp_path / "lat81.txt"
    path.write_bytes(("abc \x81\x8d def \xe9\n" * 100).encode("latin-1"))
    with pytest.raises(DataError) as e:
        read_text_file(path)
    # was "convert it to UTF-8" alone: 0x81 and 0x8D are no Windows-1252 characters
    assert f"it reads as ISO-8859-1 (Latin-1) text, which iconv -f ISO-8859-1 -t UTF-8 {path}" in str(e.value)


def test_data_a_checkpoint_cannot_use_says_how_to_choose_other_data(tmp_path):
    from minitf_repl.core.errors import UserError
    from minitf_repl.dispatch import phrase
    from test_commands import run, tiny_session

    text = tmp_path / "my.txt"
    text.write_text("the cat sat on the mat\n" * 60, encoding="utf-8")
    session = tiny_session(data=str(text))
    run(session, f":set checkpoint_dir={tmp_path / 'ck'} max_seq_len=16")
    run(session, ":train steps=2 save=mine")
    text.write_text("the cat sat on the mat\n" * 60 + "zzz Q\n", encoding="utf-8")
    other = tiny_session(data="sort:4")
    run(other, f":set checkpoint_dir={tmp_path / 'ck'}")
    run(other, ":load mine")
    with pytest.raises(UserError) as e:
        run(other, ":train steps=2")
    # was "... or choose other data" with no word of how
    assert phrase(e.value, "repl", "train").endswith(
        "or choose other data (:data NAME|PATH; a vocabulary of other characters builds a new model)")


def test_a_hub_models_name_as_a_folder_says_minitf_downloads_none_or_finds_it_in_the_cache(tmp_path, monkeypatch):
    from pathlib import Path

    from minitf_repl.core.errors import UserError
    from minitf_repl.core.hf.folder import read_folder

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    with pytest.raises(UserError) as e:  # was "gpt2 does not exist; give the folder ..." alone
        read_folder(Path("openai-community/gpt2"))
    assert "reads as a model's name on the Hugging Face Hub, and minitf never downloads one: `hf " \
           "download openai-community/gpt2`" in str(e.value)  # the command the installed huggingface_hub has
    snapshot = tmp_path / "hfhome" / "hub" / "models--openai-community--gpt2" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    with pytest.raises(UserError) as e:
        read_folder(Path("openai-community/gpt2"))
    assert f"openai-community/gpt2 is in the Hugging Face cache, but its snapshot hf:{snapshot} has no " \
           "model.safetensors" in str(e.value)  # a config alone: incomplete, said so (test_sweep_bm_docs)
    with pytest.raises(UserError) as e:
        read_folder(tmp_path / "nothing")
    assert "Hub" not in str(e.value)  # a path is a path


def test_loading_a_folder_renamed_by_hand_names_the_rename_that_loads_it(tmp_path):
    import shutil

    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":train steps=1 save=mine")
    shutil.move(tmp_path / "mine", tmp_path / "my model")
    with pytest.raises(UserError) as e:  # was the name's rules alone, with no word of the folder there
        run(session, ':load "my model"')
    assert "holds a checkpoint under that name: rename the folder, e.g. to my_model, and load that" in str(e.value)
    with pytest.raises(UserError) as e:
        run(session, ':load "no such"')
    assert "rename" not in str(e.value)


def test_train_save_by_name_keeps_the_more_trained_model_it_would_replace(tmp_path):
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":train steps=3 save=best")
    run(session, ":load best")
    run(session, ":set n_heads=4")
    result = run(session, ":train steps=1 save=best")  # was best replaced by the one-step model without a word
    assert result.kept_step == 3 and result.kept_as.startswith("kept-")
    assert f"best held a model trained further (step 3) than this one: it is kept as {result.kept_as} " in \
        plain(result, 300)
    assert run(session, f":load {result.kept_as}").step == 3


def test_a_ctrl_c_after_a_command_ran_says_it_ran(monkeypatch):
    import io

    from rich.console import Console

    from minitf_repl import dispatch
    from test_commands import tiny_session

    out, err = Console(file=io.StringIO(), width=200), Console(file=io.StringIO(), width=200)
    door = dispatch.FrontDoor(tiny_session(), out, err, dispatch.FrontEnd(live=False))

    def interrupted_output(result):
        raise KeyboardInterrupt

    monkeypatch.setattr(dispatch.RichReporter, "finish", lambda self, result: interrupted_output(result))
    assert door.run_line(":config") == dispatch.FAILED
    # was "stopped before it finished" of a command that had finished, its output cut
    assert "interrupted: :config ran to its end, but its output was not shown in full" in err.file.getvalue()


def test_the_shells_fix_lines_are_only_ones_that_run(tmp_path):
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("--data", "sort", "set", "max_seq_len=8"))
    # was "minitf --data sort --set max_seq_len=12 set max_seq_len=8": the typed pair overrode the fix again
    assert line.endswith("raise max_seq_len to 12 (--set max_seq_len=12)"), line
    line = assert_one_error_line(invoke("--data", "sort", "--set", "schedule=cosine", "train"), code=2)
    # was each line with the refused --set schedule=cosine in it again
    assert "minitf --data sort train --schedule new warms up" in line and "--set schedule" not in line, line


def test_a_one_expert_mixture_saved_before_its_gate_changed_says_so_on_load(tmp_path):
    import json

    from minitf_repl.core.checkpoint.manifest import encode_manifest, meta_sha256
    from test_commands import Recorder, run, tiny_session

    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path} n_experts=2 experts_per_token=1")
    run(session, ":train steps=1 save=moe")
    manifest = tmp_path / "moe" / "checkpoint.json"
    meta = json.loads(manifest.read_text())
    assert meta["moe_top1_gate"] == "probability"
    heard = Recorder()
    run(tiny_session(), f":set checkpoint_dir={tmp_path}")
    run(session, ":load moe", heard)
    assert not any("gated by 1" in n for n in heard.notices)  # saved with the gate it loads with: nothing to say
    del meta["moe_top1_gate"]  # as a checkpoint saved before the key was kept
    meta["format_version"] = 1  # as it was written then: format 2 is a one-expert mixture of the new gate
    meta["meta_sha256"] = meta_sha256(meta)
    manifest.write_bytes(encode_manifest(meta))
    heard = Recorder()
    run(session, ":load moe", heard)
    assert any("was saved when a mixture of one expert a token gated by 1" in n for n in heard.notices), heard.notices


def test_the_case_hint_names_its_letters_when_other_characters_are_missing_too():
    from minitf_repl.core.data import CharTokenizer
    from minitf_repl.core.errors import DataError

    tokenizer = CharTokenizer("the dog sat on\n")
    with pytest.raises(DataError) as e:
        tokenizer.encode("The Dog!")
    # was no hint at all: the '!' kept 'D' and 'T' from being said to be there in lower case
    assert "not in the vocabulary: '!' 'D' 'T' (the text has 'D' 'T' in lower case: 'd' 't')" in str(e.value)
    with pytest.raises(DataError) as e:
        tokenizer.encode("The Dog")
    assert "(the text has them in lower case: 'd' 't')" in str(e.value)


def test_from_the_shell_a_replaced_unseen_model_is_an_earlier_commands_not_another_sessions(tmp_path):
    from test_cli import invoke

    tiny = ["--checkpoint-dir", str(tmp_path), "--data", "sort", "--set", "d_model=32 n_layers=1 n_heads=2 d_ff=64"]
    assert invoke(*tiny, "train", "--steps", "2", "--save", "mine").exit_code == 0
    invoke("--checkpoint-dir", str(tmp_path), "--load", "mine", "save", "mine3")
    said = " ".join(invoke("--checkpoint-dir", str(tmp_path), "--load", "mine", "save", "mine3").stdout.split())
    # was "that this session had neither saved nor loaded (another session's?)" of the user's own earlier command
    assert "that this command had neither saved nor loaded (an earlier command's, or another session's?)" in said, said
