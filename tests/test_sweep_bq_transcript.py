"""A transcript written to a file holds a script's errors and verdicts in their place, not on a stderr no one kept."""
import os
import subprocess
import sys


def test_a_transcript_into_a_file_holds_each_lines_error_after_it(tmp_path):
    # was: `minitf> :trian steps=30` followed by nothing in out.txt, as if it ran; the error only on stderr (s59)
    script = tmp_path / "lesson.txt"
    script.write_text(":trian steps=3\n:data sort:4\n:tok 12\n", encoding="utf-8")
    env = {**os.environ, "HOME": str(tmp_path), "MINITF_HISTORY": str(tmp_path / "history")}
    with open(script, "rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "minitf_repl", "--checkpoint-dir", str(tmp_path), "--transcript"],
                              stdin=stdin, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stderr  # a line failed: the status says so still
    lines = done.stdout.splitlines()
    at = lines.index("minitf> :trian steps=3")
    assert lines[at + 1].startswith("error: line 1: unknown command :trian; did you mean :train?"), lines
    assert lines.index("minitf> :data sort:4") > at + 1 and "error:" not in done.stderr
