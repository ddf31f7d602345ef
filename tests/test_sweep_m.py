"""What a sweep of the known, unfixed items of the last session found: each test failed before its fix.

A text file saved with a UTF-8 byte-order mark (Notepad does) read the mark as a character of the text.
`:gen show=probs` under a subword tokenizer showed the text plain: it coloured one character per token.
A message wrapped between a number and its unit: ":train"'s summary ended one line "1.8" and the next "s".
`:set max_seq_len=N` reset the weights of a model whose positions are rope, sinusoidal or none, though no weight
has the window's size there: a learner could not train short and then read or train longer.
`minitf train --json` showed no progress at all, though docs/json.md says progress goes to stderr.
`minitf trian` said "Did you mean 'train'?; minitf --help lists the commands": two fixes run together.
`:patch abc vs` took "vs" for the corrupted prompt and said the two differ in length.
`minitf --data /nope --set tokenizer=bpe:300` blamed --set for the missing file.
`:context` without a causal mask said position 0 reads 1 character: with no mask it reads the whole window.
`:grad` with residual=off explained a cos column "with the skip's" that it leaves empty: there is no skip.
`:set causal=off` before any model was built said "the weights kept" of weights that did not exist.
`:ls` encoded each manifest again in pure Python to compare it byte for byte: 0.1 s a checkpoint of 3,000 steps.
"""

import io
import json

import pytest
import torch
from rich.text import Text

import minitf_repl.core.generate as core_generate
from minitf_repl.commands.generate import char_probs
from minitf_repl.commands.why import split_prompts
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.render.words import word_lines
from minitf_repl.session import Session

from test_cli import assert_one_error_line, invoke
from test_commands import Recorder, run
from test_sweep_h import bpe  # noqa: F401 (a fixture: a session on a text read by a byte-level BPE)
from test_render import plain
from test_views import text_of


def test_a_byte_order_mark_is_no_character_of_the_text(tmp_path):
    text = "to be or not to be, that is the question. " * 20
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text(text, encoding="utf-8")
    marked.write_text(text, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    with_mark, without = load_data(str(marked)), load_data(str(plain))
    assert with_mark.text == text
    assert with_mark.tokenizer.vocab_size == without.tokenizer.vocab_size
    assert with_mark.info().chars == without.info().chars == len(text)


# --- :gen show=probs under a subword tokenizer -------------------------------------------------------------
def test_gen_show_probs_colours_each_token_of_a_subword_tokenizer(bpe, monkeypatch):
    text = "the café ☃"
    ids = bpe.data.tokenizer.encode(text)
    assert len(bpe.data.tokenizer.decode(ids[:1])) > 1 and len(bpe.data.tokenizer.decode(ids[-3:])) == 1  # the; ☃
    monkeypatch.setattr(core_generate, "generate", lambda model, prompt, settings, done=None: (i for i in ids))
    result = run(bpe, f":gen x n={len(ids)} show=probs")
    assert result.text == text and len(result.probs) == len(ids) == len(result.token_texts)
    assert "".join(result.token_texts) == text and result.token_texts[-3:-1] == ["", ""]
    shown = char_probs(result)
    assert len(shown) == len(text)
    assert shown[-1] == pytest.approx(result.probs[-3] * result.probs[-2] * result.probs[-1])  # ☃: all three
    coloured = text_of(result, colour=True)
    assert coloured.count("48;2;") >= len(text.replace(" ", ""))  # coloured, not the plain text it fell back to
    lines = text_of(result).splitlines()
    assert lines[0] == "x" + text.replace(" ", "␣") and len(lines[1]) == len(lines[0])  # a shade per character


# --- wrapping ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", range(20, 110))
def test_a_number_and_its_unit_stay_on_one_line(width):
    line = ("trained 60 steps: train loss 2.6396, val loss 2.3064, 3.327 bits per character, 41,259 tokens/s, "
            "bfloat16, 1.8 s; peak 340 MB.")
    lines = [part.plain for part in word_lines(Text(line), width)]
    assert " ".join(lines) == line
    assert not any(part.endswith((" 1.8", " 340")) for part in lines)


# --- a new window for positions with no learned table ------------------------------------------------------
def task_session(**model) -> Session:
    config = ModelConfig(**{**dict(d_model=32, n_heads=2, n_layers=2, d_ff=64, max_seq_len=16), **model})
    return Session(config, TrainConfig(steps=3, batch_size=4), data_spec="pydoc", device_name="cpu")


@pytest.mark.parametrize("positions", ["rope", "sinusoidal", "none"])
def test_a_new_window_keeps_the_weights_where_positions_are_no_learned_table(positions):
    session = task_session(pos_encoding=positions)
    run(session, ":train steps=3")
    weights = {k: v.clone() for k, v in session.model.state_dict().items()}
    short = torch.randint(0, session.model_config.vocab_size, (2, 16))
    before, _ = session.model.eval()(short)
    heard = Recorder()
    result = run(session, ":set max_seq_len=40", heard)
    assert not result.rebuilt and result.kept is None and session.trainer.step == 3
    assert any(n.startswith("the window is now 40 tokens, the weights kept: pos_encoding=" + positions)
               and "positions past 16" in n for n in heard.notices), heard.notices
    model = session.model.eval()
    assert model.config.max_seq_len == 40 and all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
    long = torch.cat([short, torch.randint(0, model.config.vocab_size, (2, 24))], dim=1)
    after, _ = model(long)
    assert torch.allclose(after[:, :16], before, atol=1e-5)  # causal: the first 16 positions read what they read
    built = MiniTransformerLM(model.config)  # the same weights in a model built at 40 from the start
    built.load_state_dict(model.state_dict())
    assert torch.allclose(built.eval()(long)[0], after, atol=1e-5)
    cached = run(session, ":gen a n=35 temperature=0 cache=on")
    assert cached.text == run(session, ":gen a n=35 temperature=0 cache=off").text
    run(session, ":train steps=2")  # windows of 40 now
    assert session.trainer.step == 5


def test_a_new_window_reaches_the_int8_copy_and_a_saved_checkpoint(tmp_path):
    session = task_session(pos_encoding="rope")
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=2")
    run(session, ":quantize int8")
    run(session, ":set max_seq_len=48")
    assert session.sampling_model.config.max_seq_len == 48
    assert run(session, ":gen a n=45 temperature=0").n_tokens == 45
    run(session, ":save long")
    loaded = task_session()
    loaded.checkpoint_dir = tmp_path
    run(loaded, ":load long")
    assert loaded.model.config.max_seq_len == 48


def test_a_learned_position_table_still_makes_a_new_model_of_a_new_window():
    session = task_session()
    run(session, ":train steps=2")
    assert run(session, ":set max_seq_len=24").rebuilt and session.trainer.step == 0


# --- --json shows its progress on stderr ----------------------------------------------------------------
def test_json_shows_training_progress_on_a_terminal_stderr_and_only_the_document_on_stdout(capsys):
    from rich.console import Console

    from minitf_repl.dispatch import FrontDoor, FrontEnd
    from minitf_repl.commands import REGISTRY

    out, err = io.StringIO(), io.StringIO()  # the document is print()ed to stdout
    stderr = Console(file=err, force_terminal=True, width=100)
    session = task_session()
    door = FrontDoor(session, Console(file=out, width=100), stderr, FrontEnd(syntax="shell", json=True),
                     progress=stderr)
    door.run(REGISTRY["train"], {"steps": 30})
    assert json.loads(capsys.readouterr().out)["steps"] == 30 and not out.getvalue()  # one document, nothing else
    assert "train" in err.getvalue() and "tok/s" in err.getvalue()  # the bar, as docs/json.md promises
    door.run(REGISTRY["gen"], {"prompt": "a", "n": 5})
    assert json.loads(capsys.readouterr().out)["n_tokens"] == 5 and not out.getvalue()  # no text streamed


def test_a_mistyped_shell_command_reads_as_the_repl_says_it():
    line = assert_one_error_line(invoke("trian"), code=2)  # a usage error, as Click says
    assert line == "error: unknown command 'trian'; did you mean 'train'? (minitf --help lists the commands)"
    unknown = assert_one_error_line(invoke("xyzzy"), code=2)
    assert unknown == "error: unknown command 'xyzzy'; minitf --help lists the commands"


@pytest.mark.parametrize("text", ["abc vs", "vs abc", "abc vs  "])
def test_patch_with_vs_at_an_end_asks_for_the_missing_prompt(text):
    with pytest.raises(UserError, match="give two prompts, the clean one and the corrupted one"):
        split_prompts(text)
    with pytest.raises(UserError, match="give two prompts, the clean one and the corrupted one"):
        run(task_session(), f":patch {text}")  # as typed: the parser joins two words with ' vs ' first
    assert split_prompts("the cat sat vs the dog sat") == ("the cat sat", "the dog sat")
    assert split_prompts("12= 92=") == ("12=", "92=") and split_prompts("versus vsx") == ("versus", "vsx")


# --- :ls reads each manifest once, in C ------------------------------------------------------------------
def test_ls_checks_every_value_without_encoding_each_manifest_again(tmp_path, monkeypatch):
    import minitf_repl.core.checkpoint.manifest as manifest

    session = task_session()
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=2 save=one")
    edited = tmp_path / "one" / "checkpoint.json"

    def slow(document):  # the indented text is encoded in pure Python: 0.1 s for 3,000 steps of history
        raise AssertionError(":ls encoded a manifest again")

    monkeypatch.setattr(manifest, "encode_manifest", slow)
    assert [row.name for row in run(session, ":ls").rows if row.error is None] == ["one"]
    edited.write_text(edited.read_text().replace('"step": 2', '"step": 3', 1))  # a value changed by hand
    assert "does not match its checksum" in run(session, ":ls").rows[0].error


def test_a_bad_data_path_given_with_set_is_named_as_the_data_options_mistake(tmp_path):
    missing = str(tmp_path / "nope.txt")
    line = assert_one_error_line(invoke("--data", missing, "--set", "tokenizer=bpe:300", "config"))
    assert line.startswith(f"error: --data: no such file: {missing}")


def test_context_without_a_mask_says_every_position_reads_the_whole_window():
    session = task_session(causal=False)
    shown = text_of(run(session, ":context"))
    rows = [line.split() for line in shown.splitlines() if line.strip()[:1].isdigit() and "character" in line]
    assert rows and all(row[1:3] == ["16", "characters"] for row in rows), rows  # position 0 read "1 character"
    masked = text_of(run(task_session(), ":context"))
    assert any(line.split()[:3] == ["0", "1", "character"] for line in masked.splitlines() if line.strip())


def test_grad_without_the_residual_explains_no_cos_column_it_leaves_empty():
    assert "cos: of the sublayer's part with the skip's" not in plain(run(task_session(residual=False), ":grad the"))
    assert "cos: of the sublayer's part with the skip's" in plain(run(task_session(), ":grad the"))


def test_set_causal_speaks_of_weights_kept_only_where_a_model_has_weights():
    fresh = task_session()
    assert not fresh.has_model
    assert "weights kept" not in plain(run(fresh, ":set causal=off n_layers=1"))  # no model built yet: no weights
    trained = task_session()
    run(trained, ":train steps=1")
    assert "no causal mask, the weights kept" in plain(run(trained, ":set causal=off"))
