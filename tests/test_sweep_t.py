"""What a user's-eye sweep of the numbers-and-hardware commands (:lrfind, :muon, :params, :config, :quantize,
:device, :step) found: each test failed before its fix.

`:lrfind low=1e-9 high=1e-8` never read a rate near the session's 0.01, yet told the user their rate was 'past the
lowest point ... where one step of the test already turned the loss back up' and offered to compare it with 5.6e-10;
a curve with no steepest point read 'the smoothed loss lowest at 0.5'.
"""

import pytest

from minitf_repl.commands.rates import LrfindResult, where
from minitf_repl.core.lrfind import LrRange
from test_render import plain


def curve(lr: float, rates: list[float], smoothed: list[float], steepest=None, blown=None) -> LrfindResult:
    k = smoothed.index(min(smoothed))
    test = LrRange("muon", rates, smoothed, smoothed, steepest, rates[k], smoothed[k], blown, rates[0], rates[-1],
                   len(rates))
    return LrfindResult(test, "text", lr, 1337)


# --- :lrfind: a rate the test never reached --------------------------------------------------------------------
def test_lrfind_says_a_rate_past_the_tests_last_rate_was_never_read():
    rates = [1e-9 * 10 ** (k / 9) for k in range(10)]  # 1e-9 .. 1e-8: far below lr 0.01
    smoothed = [4.61, 4.609, 4.608, 4.6085, 4.609, 4.6088, 4.6089, 4.609, 4.6095, 4.6091]  # noise, lowest at 3rd
    said = where(curve(0.01, rates, smoothed))
    assert "past the lowest point" not in said and "lr=5.6e-10" not in said
    assert "lies past the test's last rate (1e-08)" in said and ":lrfind high=1" in said


def test_lrfind_without_a_steepest_point_still_says_the_loss_is_lowest():
    rates = [0.5 * 4 ** (k / 9) for k in range(10)]
    smoothed = [4.619, 4.7, 4.9, 5.2, 5.8, 6.5, 7.0, 8.0, 9.0, 12.0]
    text = plain(curve(0.01, rates, smoothed, blown=rates[-1]))
    assert "the smoothed loss is lowest at 0.5 (4.619)" in text
