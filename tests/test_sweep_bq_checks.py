""":checks says, beside its float32 gradient check, the backward :train runs where it trains in bfloat16 (s59)."""
import pytest

from test_commands import run, tiny_session
from test_render import plain


@pytest.mark.parametrize("units", [True, False])
def test_the_gradient_check_names_trains_bfloat16_backward_where_dtype_auto_picks_it(monkeypatch, units):
    from minitf_repl.core import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: units)  # both kinds of CPU, whichever runs this
    session = tiny_session()
    session.train_config.dtype = "auto"
    result = run(session, ":checks gradient")
    text = " ".join(plain(result).split())
    if units:  # the check judged float32's backprop alone, where :train's own products were bfloat16's, unsaid
        t = result.gradient_training
        assert t is not None and t.dtype == "bfloat16", t
        assert 0 < t.gradient < 0.1 and t.relative < 0.5, t  # rounded, not wrong: bfloat16 keeps about 3 digits
        assert f"runs its products in bfloat16 (the dtype setting), and its backward on this text" in text, text
        assert f"g.u = {t.backprop:+.6g}" in text
    else:
        assert result.gradient_training is None and "runs its products in bfloat16" not in text
    assert result.gradient is not None and "gradient" in result.passed


def test_every_off_figure_of_the_gradient_check_says_it_is_relative(monkeypatch):
    """"1e-06 off" and "4e-03 off the measured slope" read as absolute beside g.u = -0.0014319 (s59)."""
    from minitf_repl.core import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    session = tiny_session()
    session.train_config.dtype = "auto"
    text = " ".join(plain(run(session, ":checks gradient")).split())
    assert "off (relative; float32 rounds" in text and "from float32's (both relative)" in text, text
