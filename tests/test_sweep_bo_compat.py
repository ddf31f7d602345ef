"""Checkpoints across minitf versions: the one-expert gate, the format older readers refuse, old manifests' data."""

import json

import pytest

from test_commands import TEXT, Recorder, run, tiny_session
from test_render import plain


def _rewrite(folder, change):
    """Change a checkpoint's manifest as an older (or another) minitf would have written it, signed again."""
    from minitf_repl.core.checkpoint.manifest import encode_manifest, meta_sha256

    path = folder / "checkpoint.json"
    meta = json.loads(path.read_text())
    change(meta)
    meta["meta_sha256"] = meta_sha256(meta)
    path.write_bytes(encode_manifest(meta))
    return meta


def _as_before_the_gate(meta):
    """A one-expert mixture's manifest as minitf wrote it before 6128e820: no gate recorded, format 1."""
    del meta["moe_top1_gate"]
    meta["format_version"] = 1


def _old_top1(tmp_path, name="moe"):
    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path} n_experts=2 experts_per_token=1")
    run(session, f":train steps=3 save={name}")  # evaluated at step 3
    _rewrite(tmp_path / name, _as_before_the_gate)
    return session


def test_a_one_expert_mixture_of_the_gate_of_1_gives_no_stale_val_loss_even_saved_again(tmp_path):
    from minitf_repl import load_model
    from minitf_repl.core.checkpoint import list_checkpoints

    _old_top1(tmp_path)
    # was 2.56-like: the val loss measured with the gate of 1, listed as the model's, which now computes another
    assert [row.val_loss for row in list_checkpoints(tmp_path)] == [None]
    heard, session = Recorder(), tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    loaded = run(session, ":load moe", heard)
    assert loaded.val_loss is None and loaded.gated_by_one, loaded  # was the stale number, and no field
    assert any("its saved val loss" in n and "is not this model's" in n for n in heard.notices), heard.notices
    assert "val loss" not in plain(loaded, width=300).split("\n")[0]
    run(session, ":save again")  # before any :train: the stale loss must not come back as the new save's
    fresh = tiny_session()
    run(fresh, f":set checkpoint_dir={tmp_path}")
    # was val loss 2.5630 and no notice at all: the re-save laundered the stale loss
    assert run(fresh, ":load again").val_loss is None
    assert {row.name: row.val_loss for row in list_checkpoints(tmp_path)}["again"] is None
    run(fresh, ":train steps=3 eval_every=3")  # steps on the gate of now: their losses are the model's
    assert run(fresh, ":save again").step == 6
    assert {row.name: row.val_loss for row in list_checkpoints(tmp_path)}["again"] is not None
    with pytest.warns(UserWarning, match=rf"moe was saved when .* gated by 1.*minitf --checkpoint-dir {tmp_path} "
                                         r"--load moe train --steps 100 --save moe adapts it"):
        load_model("moe", tmp_path)  # was silent


def test_a_save_of_a_gate_of_1_model_before_any_step_still_says_it_was_never_adapted(tmp_path):
    _old_top1(tmp_path)
    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":load moe")
    run(session, ":save again")  # its weights are still the gate of 1's: nothing trained them since
    meta = json.loads((tmp_path / "again" / "checkpoint.json").read_text())
    # was moe_top1_gate: probability, format 2, and no notice on any later load
    assert "moe_top1_gate" not in meta and meta["format_version"] == 1, meta
    heard, fresh = Recorder(), tiny_session()
    run(fresh, f":set checkpoint_dir={tmp_path}")
    assert run(fresh, ":load again", heard).gated_by_one
    assert any(n.startswith("again was saved when a mixture of one expert a token gated by 1") and "adapts it" in n
               for n in heard.notices), heard.notices
    run(fresh, ":train steps=1")  # a step with the gate of now: the save says so
    run(fresh, ":save again")
    meta = json.loads((tmp_path / "again" / "checkpoint.json").read_text())
    assert meta["moe_top1_gate"] == "probability" and meta["format_version"] == 2, meta
    again = tiny_session()
    run(again, f":set checkpoint_dir={tmp_path}")
    assert not run(again, ":load again").gated_by_one


def test_an_autosave_with_a_newer_minitfs_model_setting_keeps_its_step_and_steps_left(tmp_path):
    """What a rotation says of the autosave it drops (store._step_and_val): ModelConfig.from_dict refuses a setting
    it does not know, and every value read None, the steps its stopped run had left with them."""
    from minitf_repl.core.checkpoint.store import _step_and_val

    session = tiny_session(eval_every=100)
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":train steps=10 save=later", Recorder(stop_after=3))
    _rewrite(tmp_path / "later", lambda m: m["model_config"].update(a_later_setting=1))
    step, _, data, vocab, causal, left = _step_and_val(tmp_path / "later")
    assert (step, data, vocab, causal, left) == (3, "sort:4", session.data.tokenizer.vocab_size, True, 7)
    # a one-expert mixture read from its settings as saved: of the gate of 1, no val loss; of the gate of now, its own
    _old_top1(tmp_path)
    _rewrite(tmp_path / "moe", lambda m: m["model_config"].update(a_later_setting=1))
    assert _step_and_val(tmp_path / "moe")[:2] == (3, None)
    _rewrite(tmp_path / "moe", lambda m: m.update(moe_top1_gate="probability", format_version=2))
    assert _step_and_val(tmp_path / "moe")[1] is not None


def test_a_one_expert_mixture_is_written_as_a_format_older_minitfs_refuse(tmp_path):
    from minitf_repl.core.checkpoint import list_checkpoints, load_checkpoint
    from minitf_repl.core.errors import CheckpointError

    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path} n_experts=2 experts_per_token=1")
    run(session, ":train steps=1 save=moe")
    run(session, ":set n_experts=0")
    run(session, ":train steps=1 save=dense")
    version = {p.name: json.loads((p / "checkpoint.json").read_text())["format_version"] for p in tmp_path.iterdir()
               if (p / "checkpoint.json").exists()}
    # was 1 for both: a minitf of before the gate's change read the mixture's weights with the gate of 1, without a
    # word; it refuses any format above 1 ("written by a newer minitf: upgrade minitf")
    assert version["moe"] == 2 and version["dense"] == 1, version
    assert load_checkpoint(tmp_path, "moe").meta["moe_top1_gate"] == "probability"  # this minitf reads it as 1
    assert [row.error is None for row in list_checkpoints(tmp_path) if row.name == "moe"] == [True]
    _rewrite(tmp_path / "dense", lambda m: m.update(format_version=2))  # format 2 is the gate's only
    with pytest.raises(CheckpointError, match=r"dense was written by a newer minitf \(format 2, this one reads 1\)"):
        load_checkpoint(tmp_path, "dense")
    _rewrite(tmp_path / "moe", lambda m: m.update(format_version=3))  # past both: it names both (was "reads 1")
    with pytest.raises(CheckpointError, match=r"moe was written by a newer minitf \(format 3, this one reads 1, and 2 "
                                              r"for a mixture of one expert a token\): upgrade minitf$"):
        load_checkpoint(tmp_path, "moe")


def test_the_gate_notice_from_the_shell_names_a_line_that_adapts_the_loaded_model(tmp_path):
    from test_checkpoint_commands import shell

    _old_top1(tmp_path)
    fix = f"minitf --checkpoint-dir {tmp_path} --load moe train --steps 100 --save moe adapts it"
    said = " ".join(shell("--checkpoint-dir", tmp_path, "--load", "moe", "gen", "--n", "3").stderr.split())
    # was "minitf --checkpoint-dir DIR train --steps 100 adapts it", which trained a new default model into autosave
    assert fix in said, said
    result = shell("--checkpoint-dir", tmp_path, "load", "moe", "--json")
    assert fix in " ".join(result.stderr.split()), result.stderr
    loaded = json.loads(result.stdout)
    assert loaded["gated_by_one"] is True and loaded["val_loss"] is None, loaded  # was no field, and the stale loss


def test_a_manifest_without_the_texts_digest_says_the_text_could_not_be_checked(tmp_path):
    corpus = tmp_path / "fox.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    session = tiny_session(data=str(corpus))
    run(session, f":set checkpoint_dir={tmp_path / 'ck'}")
    run(session, ":train steps=2 save=fox")
    _rewrite(tmp_path / "ck" / "fox", lambda m: m.pop("data_sha256"))  # as minitf saved before it kept the digest
    corpus.write_text(TEXT[::-1], encoding="utf-8")  # rewritten, the same characters
    fresh = tiny_session()
    run(fresh, f":set checkpoint_dir={tmp_path / 'ck'}")
    loaded = run(fresh, ":load fox")
    # was nothing, and data_changed null as for a text unchanged
    assert loaded.data_changed is None and "could not be checked against the text fox was saved with" in \
        loaded.data_unchecked, loaded
    assert "could not be checked" in plain(loaded, width=300)
    run(session, ":train steps=2 save=fox2")  # a manifest of today: its digest compared
    corpus.write_text(TEXT + TEXT[::-1], encoding="utf-8")  # another text again, of the same characters
    changed = run(fresh, ":load fox2")
    assert changed.data_unchecked is None
    # was no way on after "its val loss can read too low"
    assert changed.data_changed.endswith("; put the original file back, or train a new model on this text"), changed


def test_a_stopped_run_whose_data_is_gone_continues_once_the_data_is_back(tmp_path):
    corpus = tmp_path / "fox.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    session = tiny_session(data=str(corpus), eval_every=100)
    run(session, f":set checkpoint_dir={tmp_path / 'ck'}")
    run(session, ":train steps=10 save=mine", Recorder(stop_after=3))
    corpus.unlink()
    fresh = tiny_session()
    run(fresh, f":set checkpoint_dir={tmp_path / 'ck'}")
    said = plain(run(fresh, ":load mine"), width=300)
    # was "generation works, training does not", then ":train save=mine continues it" on the next line
    assert "generation works, training does not" in said and "(:train alone, into autosave) once its data is back" \
        in said, said


def test_ls_names_a_checkpoint_of_a_newer_minitf_once(tmp_path):
    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":train steps=1 save=later")
    _rewrite(tmp_path / "later", lambda m: m.update(format_version=99))
    said = plain(run(session, ":ls"), width=300)
    assert "later was written by a newer minitf" in said and "later: later" not in said, said  # was "later: later was"


def test_the_safety_page_says_what_other_versions_make_of_a_checkpoint():
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "checkpoints-and-safety.md").read_text()
    section = page.split("**Older and newer minitf.**", 1)[1].split("\n\n", 1)[0]
    for said in ("format 2", "gated by 1", "data_sha256", "trained_dtype"):
        assert said in section, said
