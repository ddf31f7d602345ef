"""A script reads from --json that a run made the model worse than a uniform guess (s59)."""
from minitf_repl.commands import REGISTRY
from minitf_repl.dispatch import json_document
from test_commands import run, tiny_session


def test_a_run_that_made_the_model_worse_than_a_uniform_guess_says_so_in_its_json():
    # was: val loss 21442 against ln V = 4.63, exit 0, and nothing in the JSON a script could read
    session = tiny_session(data="pydoc")
    run(session, ":set autosave=off optimizer=adamw")
    result = run(session, ":train steps=6 lr=50")
    doc = json_document(REGISTRY["train"], result)
    assert doc["worse_than_uniform"] is True, (result.val_loss, doc["vocab_size"])
    fine = run(tiny_session(data="pydoc"), ":train steps=6")
    assert json_document(REGISTRY["train"], fine)["worse_than_uniform"] is False


def test_a_one_shot_train_says_the_line_that_continues_it(tmp_path):
    """A second `minitf train` started anew and moved the first run down the rotation; nothing said how to go on."""
    from test_cli import invoke

    args = ["--checkpoint-dir", str(tmp_path), "--set", "n_layers=1", "--set", "d_model=32", "--data", "sort:4"]
    result = invoke(*args, "train", "--steps", "3")
    said = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert f"minitf --checkpoint-dir {tmp_path} --load autosave train continues it, a minitf train without --load " \
           "starts anew" in said, said
