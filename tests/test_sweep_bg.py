"""The 49th session's own look: each test failed before its fix."""

import json
import re
import shlex

from test_cli import TINY, assert_one_error_line, invoke


def test_a_one_shot_set_of_the_schedule_names_a_line_that_trains_at_the_new_rate(tmp_path):
    folder = ["--checkpoint-dir", str(tmp_path)]
    assert invoke(*folder, *TINY, "train", "--steps", "4", "--save", "small").exit_code == 0
    told = " ".join(invoke(*folder, "--load", "small", "set", "lr=0.005", "warmup_steps=2").stderr.split())
    line = re.search(r"which (minitf .*) starts", told).group(1)
    assert "lr=0.005" in line, told  # was: minitf --load small train --schedule new, at the checkpoint's 0.01
    ran = invoke(*shlex.split(line)[1:], "--steps", "3", "--eval-every", "1", "--json")
    assert ran.exit_code == 0, ran.output
    rates = [row["lr"] for row in json.loads(ran.stdout)["curve"]]
    assert max(rates) <= 0.005 * (1 + 1e-6) and max(rates) > 0.004, rates


def test_an_unknown_setting_from_the_shell_names_no_option_that_was_not_typed():
    line = assert_one_error_line(invoke("set", "bogus=1"), code=2)
    assert line == "error: unknown key 'bogus' (minitf set --help lists its 47 keys)", line  # was: "for --set"
    line = assert_one_error_line(invoke("--set", "bogus=1", "config"), code=2)
    assert line.startswith("error: --set: unknown key 'bogus' ("), line  # was: "--set: ... for --set"
