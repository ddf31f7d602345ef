"""Sweep br, interrupting a command other than :train (a tester's finding, failing before its fix).

A Ctrl-C (or SIGTERM) during `:data BIGFILE` after the file was read (its held-out count: 2.5 s of a 78 MiB file's
10), or during torch's import before the read, asked the command to stop "at the next step", which `:data` has none
of: the data switched and the model was rebuilt anyway, no line said so, and a one-shot exited 130 beside its full
success document. Before the switch nothing has changed, so a signal there cuts it short and keeps everything.
"""

from __future__ import annotations

import os
import signal

from minitf_repl.commands import settings
from minitf_repl.commands.shared import load_checked

from test_hostile import drive, lab, snapshot


def test_ctrl_c_while_data_counts_its_held_out_symbols_keeps_the_data_and_model(monkeypatch, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200, encoding="utf-8")
    s = lab()
    before = snapshot(s)
    real = settings._held_out_only

    def count_then_ctrl_c(data, reporter):
        os.kill(os.getpid(), signal.SIGINT)
        real(data, reporter)

    monkeypatch.setattr(settings, "_held_out_only", count_then_ctrl_c)
    code, out, err = drive(s, f":data {text}")
    assert f"data {text} interrupted; nothing changed" in err and "data is now" not in out + err
    assert code == 130
    assert s.data_spec == "sort" and snapshot(s)["objects"] == before["objects"]


def test_a_stop_asked_before_the_switch_keeps_the_data_and_model(monkeypatch, tmp_path):
    """A signal during an import is asked again once the import ends (dispatch.stop_on_signals): then it is a stop
    request, seen before the switch."""
    text = tmp_path / "notes.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 200, encoding="utf-8")
    s = lab()
    before = snapshot(s)

    def load_then_stop(session, spec, reporter=None, fits=True):
        data = load_checked(session, spec, reporter, fits)
        reporter.request_stop()
        return data

    monkeypatch.setattr(settings, "load_checked", load_then_stop)
    code, out, err = drive(s, f":data {text}")
    assert f"data {text} interrupted; nothing changed" in err and "data is now" not in out + err
    assert code == 130
    assert s.data_spec == "sort" and snapshot(s)["objects"] == before["objects"]
