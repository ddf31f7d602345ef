"""What a user's-eye sweep of the views that look inside the model found wrong: each test failed before its fix.

:ffn wrote FFN(x) = sum_n h_n v_n + b for a model whose output matrix has no bias (bias=off, the llama and modern
presets). :patch read a corruption that moves z[answer] - z[foil] the wrong way (the corrupted prompt favours the
answer more) as "only -0.626 ... noise over a tiny difference". :resid sent a post-norm or residual=off model to
:attrib, which refuses it. :attrib said the frozen final norm adds "its bias" where the norm has none (RMSNorm,
bias=off), and :ln spoke of the gain "and bias" weighing the features where there is no bias. :step at temperature
0 (greedy, where top-k and top-p are not applied) marked every other token "cut" by top-k. :kv wrote "1 layers".
"""

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import run
from test_render import plain

TINY = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def session_on(data="pydoc", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2), data_spec=data,
                   device_name="cpu")


# --- :ffn without biases -------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, bias", [({}, True), ({"bias": False}, False),
                                           ({"activation": "swiglu", "bias": False}, False),
                                           ({"activation": "swiglu"}, True)])
def test_ffn_writes_the_output_bias_only_where_the_part_has_one(changes, bias):
    session = session_on(**changes)
    result = run(session, ":ffn abc")
    shown = plain(result)
    assert result.out_bias is bias
    assert ("FFN(x) = sum_n h_n v_n + b," in shown) is bias
    assert ("checked: sum_n h_n v_n + b agrees" in shown) is bias
    if not bias:
        assert "FFN(x) = sum_n h_n v_n, v_n the column n" in shown and "checked: sum_n h_n v_n agrees" in shown
