"""The 47th session's own look: each test failed before its fix."""

import pytest

from test_commands import Recorder, run, tiny_session


@pytest.mark.parametrize("line, listed, said", [(":ln k=500", 32, "k=500 is more than the 32 features there are"),
                                                (":ffn k=500", 64, "k=500 is more than the 64 hidden units there")])
def test_a_k_past_the_features_there_are_says_it_lists_them_all(line, listed, said):
    hooks = Recorder()
    result = run(tiny_session(), line, hooks)  # TINY: d_model 32, d_ff 64
    rows = result.norm.features if line.startswith(":ln") else result.units
    assert len(rows) == listed
    assert any(said in n for n in hooks.notices), hooks.notices  # was silent: 32 rows where 500 were asked for
    quiet = Recorder()
    run(tiny_session(), line.replace("500", "3"), quiet)
    assert not any("is more than" in n for n in quiet.notices)
