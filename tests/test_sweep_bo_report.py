"""`:report text=TEXT`: the text its per-text sections read, the cut said on the page, a whole-word sample."""

import html
import re

from test_commands import TEXT, run, tiny_session


def _prompt(page: str) -> str:
    """The attention maps' text, as the page shows it (spaces as ␣)."""
    return html.unescape(page.split("Prompt: <code>")[1].split("</code>")[0])


def _scored(page: str) -> str:
    """The teacher-forcing section's text, its tokens joined."""
    section = page[page.index("<h2>Teacher forcing</h2>"):]
    section = section[:section.index("<h2>", 5)]
    return "".join(html.unescape(t) for t in re.findall(r'<span class="tf"[^>]*>([^<]*)</span>', section))


def test_report_reads_the_text_given_by_text_or_prompt(tmp_path):
    s = tiny_session("pydoc")
    result = run(s, f':report {tmp_path / "a.html"} text="def f(x): return x"')
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert _prompt(page) == "def␣f(x):␣return␣x" and "(the text given)" in page
    assert _scored(page) == "def␣f(x):␣return␣x" and "teacher forcing" in result.sections
    # the word the teacher typed first, as :attn names its text
    run(s, f":report {tmp_path / 'b.html'} prompt=hello")
    assert _prompt((tmp_path / "b.html").read_text(encoding="utf-8")) == "hello"


def test_report_says_on_the_page_where_the_text_given_was_cut(tmp_path):
    s = tiny_session("pydoc")  # max_seq_len=32
    text = "abcdefghij " * 4  # 44 characters
    run(s, f':report {tmp_path / "a.html"} text="{text}"')
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert _prompt(page) == text[-32:].replace(" ", "␣")  # as :attn reads it: the last max_seq_len
    assert "its first 12 characters, beyond max_seq_len=32, went unread: the maps read its last 32 characters" in page
    assert _scored(page) == text[-33:].replace(" ", "␣")  # as :score reads it: one more, the last one predicted
    assert ("The first 11 characters of the text, beyond max_seq_len + 1 = 33, went unread: these are its last 33 "
            "characters") in page


def test_report_without_a_next_token_goes_without_teacher_forcing_and_says_how(tmp_path):
    s = tiny_session("pydoc")
    result = run(s, f":report {tmp_path / 'a.html'} text=a")
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert "teacher forcing" not in result.sections and "<h2>Teacher forcing</h2>" not in page
    assert "give :report text=TEXT a longer text" in page


def test_report_default_sample_ends_where_a_word_ends(tmp_path):
    s = tiny_session("pydoc")
    result = run(s, f":report {tmp_path / 'a.html'}")
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    prompt = _prompt(page).replace("␣", " ")
    val = s.data.tokenizer.decode(s.data.splits["val"][:20_000].tolist())
    at = val.index(prompt)
    assert re.match(r"\w", val[at + len(prompt)]) is None, (prompt, val[at:at + len(prompt) + 5])  # not "abov"
    assert " " in prompt and "(a sample of the data; :report text=TEXT reads another)" in page
    assert _scored(page).replace("␣", " ") == prompt and "teacher forcing" in result.sections


def test_shell_report_takes_text(tmp_path):
    from typer.testing import CliRunner

    from minitf_repl import cli

    path = tmp_path / "out.html"
    tiny = ["--data", "pydoc", "--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"]
    result = CliRunner().invoke(cli.app, [*tiny, "report", str(path), "--text", "def f"])
    assert result.exit_code == 0, result.output
    assert _prompt(path.read_text(encoding="utf-8")) == "def␣f"


def test_a_page_whose_data_is_gone_names_no_folder_of_this_machine(tmp_path, checkpoint_dir, monkeypatch):
    """The sections left out named the data's whole path on the page ("the data this model was trained on
    (/home/teacher/course/poem.txt) cannot be used"), which a shared page showed every student; the terminal's notice
    keeps it, for the person who can put the file back."""
    course = tmp_path / "teacher's course"
    course.mkdir()
    poem = course / "poem.txt"
    poem.write_text("the sea, the sea, the wide and open sea.\n" * 40, encoding="utf-8")
    run(tiny_session(str(poem), steps=2), ":train save=fromfile")
    poem.unlink()
    monkeypatch.chdir(tmp_path)
    session = tiny_session()
    run(session, ":load fromfile")
    from test_commands import Recorder

    heard = Recorder()
    result = run(session, ":report page.html", heard)
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "loss by position" not in result.sections and "Not on this page" in page
    assert str(course) not in html.unescape(page) and "poem.txt" in page
    assert any(str(poem) in n for n in heard.notices)  # said whole where it can be acted on


def test_a_hugging_face_folder_is_named_on_the_page_by_its_last_name():
    from minitf_repl.commands.inside import _on_page

    session = tiny_session()
    said = _on_page("the weights came from hf:/home/teacher/models/gpt2, trained elsewhere", session)
    assert said == "the weights came from hf:gpt2, trained elsewhere"
    assert _on_page("hf:gpt2", session) == "hf:gpt2" and _on_page(None, session) is None


def test_an_unknown_option_of_report_is_not_told_to_be_quoted_as_its_path():
    """`:report x.html bogus=1` was told `quote it: :report "bogus=1"`, which then failed as a page's name."""
    import pytest

    from minitf_repl.commands import REGISTRY
    from minitf_repl.core.errors import UserError
    from minitf_repl.parsing import parse_line

    with pytest.raises(UserError) as caught:
        parse_line(":report x.html bogus=1", REGISTRY)
    assert "quote it" not in str(caught.value) and "text" in str(caught.value)


def test_report_of_a_checkpoint_whose_data_is_gone_says_its_text_is_a_stand_in(tmp_path, monkeypatch):
    """Was "(a sample of the data; ...)" of the pangram's words a vocabulary alone reads (sample_prompt), and a
    teacher-forcing loss scored on that made-up text."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "poem.txt").write_text(TEXT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "ck")
    run(tiny_session(str(tmp_path / "data" / "poem.txt"), steps=2), ":train save=lesson")
    (tmp_path / "data" / "poem.txt").unlink()
    session = tiny_session()
    assert run(session, ":load lesson").data_missing is not None
    result = run(session, ":report a.html")
    page = html.unescape((tmp_path / "a.html").read_text(encoding="utf-8"))
    assert "(a sample of the data;" not in page
    assert ("(a stand-in made of the vocabulary's characters, not a sample of the data, which is not here; "
            ":report text=TEXT reads one of your own)") in page
    assert "teacher forcing" not in result.sections and "<h2>Teacher forcing</h2>" not in page
    assert "the text read is a stand-in made of the vocabulary's characters, whose loss says nothing" in page
    # a text given is read and scored as ever
    result = run(session, ':report b.html text="the cat"')
    assert "teacher forcing" in result.sections and "(the text given)" in (tmp_path / "b.html").read_text()


def test_report_help_says_a_long_text_loses_its_start():
    from test_cli import invoke

    said = " ".join(word for word in invoke("report", "--help").stdout.split() if word != "│")  # the box's edges
    assert "its end cut" not in said  # it is the start that is dropped
    assert "past the model's window its start is dropped and its last max_seq_len tokens read" in said, said
