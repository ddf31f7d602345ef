"""What this session's own look at the items its sweeps left found: each test failed before its fix.

`:checks causal` on a model that reads later positions said "(largest 0.412)" beside a map of dots above the
diagonal: the number was |dz_t/dh_s| with no scale, the map each row's share of its largest. The line now also
gives the largest share, on the map's scale.
"""

from minitf_repl.core import checks

from test_checks import model_and_batch, session, small  # noqa: F401 (session: a fixture)
from test_commands import run
from test_render import plain


def test_a_failed_causal_check_gives_the_later_reads_on_the_maps_scale(session):  # noqa: F811
    model, x, _ = model_and_batch(small(causal=False), session.data)
    causal = checks.causal_check(model, x[0])
    shown = max(causal.map[t][s] for t in range(len(causal.map)) for s in range(t + 1, len(causal.map)))
    assert 0 < shown <= causal.later_share <= 1.0  # the map's own later cells are within the share
    run(session, ":ablate mask")
    text = " ".join(plain(run(session, ":checks causal"), 200).split())
    assert "of its row's largest, the map's scale" in text
