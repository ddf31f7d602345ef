"""Each look-inside view from the one-shot shell (`minitf attn "3141=" --layer 0 --json`), through CliRunner."""

import json

from typer.testing import CliRunner

from minitf_repl import cli

TINY = ["--set", "n_layers=2", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64",
        "--set", "max_seq_len=32", "--set", "batch_size=4", "--data", "sort"]

runner = CliRunner()


def invoke(*args):
    return runner.invoke(cli.app, list(args))


def test_attn_from_the_shell():
    result = invoke(*TINY, "attn", "3141=", "--layer", "1", "--head", "0")
    assert result.exit_code == 0, result.output
    assert "attention, layer 1 of 2, head 0 of 2" in result.stdout and "weight: 0" in result.stdout
    doc = json.loads(invoke(*TINY, "attn", "3141=", "--layer", "0", "--json").stdout)
    assert doc["layer"] == 0 and doc["heads"] == [0, 1] and len(doc["maps"][0]) == 5


def test_step_from_the_shell_matches_gen():
    doc = json.loads(invoke(*TINY, "step", "3141=", "--seed", "9", "--top-k", "4", "--json").stdout)
    assert doc["seed"] == 9 and sum(r["picked"] for r in doc["rows"]) == 1
    gen = json.loads(invoke(*TINY, "gen", "3141=", "--n", "1", "--seed", "9", "--top-k", "4", "--json").stdout)
    assert gen["text"] == doc["picked"]
    text = invoke(*TINY, "step", "3141=", "--seed", "9")
    assert text.exit_code == 0 and "picked" in text.stdout


def test_gen_show_probs_from_the_shell():
    doc = json.loads(invoke(*TINY, "gen", "3141=", "--n", "5", "--show", "probs", "--json").stdout)
    assert len(doc["probs"]) == 5
    result = invoke(*TINY, "gen", "3141=", "--n", "5", "--show", "probs")
    assert result.exit_code == 0 and "probability when picked" in result.stdout


def test_lens_and_tok_from_the_shell():
    doc = json.loads(invoke(*TINY, "lens", "--json").stdout)
    assert [r["layer"] for r in doc["rows"]] == ["embed", "blocks.0", "blocks.1"] and doc["target"] is not None
    assert "logit lens" in invoke(*TINY, "lens", "12=").stdout
    doc = json.loads(invoke(*TINY, "tok", "3141=", "--json").stdout)
    assert doc["tokens"] == list("3141=") and len(doc["ids"]) == 5


def test_plot_from_the_shell(tmp_path):
    fresh = invoke(*TINY, "plot")
    assert fresh.exit_code == 1 and "no training history yet" in fresh.stderr and fresh.stdout == ""
    where = ["--checkpoint-dir", str(tmp_path)]
    trained = invoke(*where, *TINY, "train", "--steps", "4", "--eval-every", "2", "--save", "p")
    assert trained.exit_code == 0, trained.output
    result = invoke(*where, "--load", "p", "plot")
    assert result.exit_code == 0, result.output
    assert "loss by step" in result.stdout and "•" in result.stdout
    doc = json.loads(invoke(*where, "--load", "p", "plot", "--what", "grad_norm", "--json").stdout)
    assert doc["what"] == "grad_norm" and len(doc["series"][0]["values"]) == 4


def test_params_and_report_from_the_shell(tmp_path):
    doc = json.loads(invoke(*TINY, "params", "--json").stdout)
    assert doc["ledger"]["n_params"] == doc["total"] and doc["show_all"] is False
    assert "blocks.0.attn.q_proj.weight" in invoke(*TINY, "params", "--all").stdout
    target = tmp_path / "r.html"
    result = invoke(*TINY, "--set", "n=20", "report", str(target))
    assert result.exit_code == 0, result.output
    assert target.exists() and "wrote" in result.stdout
    bad = invoke(*TINY, "report", str(tmp_path / "nope" / "r.html"))
    assert bad.exit_code == 1 and len(bad.stderr.splitlines()) == 1 and bad.stderr.startswith("error: ")
