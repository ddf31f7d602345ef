"""Findings of the fifty-fourth session's sweep: each test failed before its fix."""

from test_commands import run, tiny_session
from test_sweep_aw import completed


def test_tab_after_ablate_off_offers_the_parts_that_are_off_not_every_part():
    s = tiny_session()  # one block of two heads
    run(s, ":ablate head=0.1 mask")
    assert completed(":ablate off ", s) == [":ablate off head=0.1", ":ablate off mask"]
    assert completed(":ablate off h", s) == [":ablate off head=0.1"]
    assert completed(":ablate off mask ", s) == [":ablate off mask head=0.1"]
    assert completed(":ablate ", s)[-1] == ":ablate off"  # before `off`, every part as before
    run(s, ":ablate off")
    assert completed(":ablate off ", s) == []  # nothing is off: nothing to put back
