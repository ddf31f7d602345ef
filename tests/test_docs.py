"""The README and docs/: the two set-up commands up front, every page linked from the README, and
every relative link (and #anchor) pointing at something that exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a page: lower case, punctuation dropped, spaces as '-'."""
    out = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_the_readme_starts_with_the_two_set_up_commands():
    text = (REPO / "README.md").read_text()
    setup = text.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    block = setup.split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["./dev run", "./dev test"]
    assert text.index("## Set-up") < text.index("## A first session") < text.index("## Documentation")


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text()
    linked = {target.split("#")[0] for target in LINK.findall(readme)}
    pages = {f"docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert pages and pages <= linked, sorted(pages - linked)
    for area in ("commands", "variant-lab", "inside-views", "checkpoints-and-safety", "speed", "distributed"):
        assert f"docs/{area}.md" in pages  # the areas the reference is split into


def test_every_relative_link_resolves():
    broken = []
    for page in _pages():
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            goal = (page.parent / path).resolve() if path else page
            if not goal.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and goal.suffix == ".md" and anchor not in _anchors(goal):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


# A code span that shows a command's form rather than a line to type: a placeholder in capitals (`layer=N`), a
# choice or an optional part (`a|b`, `[seed=N]`), a key left open (`watch=`, `key=value`), or a made-up name.
_FORM = re.compile(r"\b[A-Z]+\b|[\[|]|=$|=[a-z]+ \.\.\.|key=value|:foo\b|norm=name\b")


def test_every_repl_line_the_docs_show_is_one_the_repl_takes():
    """A renamed option or command leaves no page teaching a line that the REPL refuses."""
    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.core.errors import UserError
    from minitf_repl.parsing import parse_line

    refused, seen = [], 0
    for page in _pages():
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for span in re.findall(r"`([^`\n]+)`", line):
                if not re.match(r":[a-z]+\b", span) or _FORM.search(span):
                    continue
                seen += 1
                try:
                    parse_line(span, REGISTRY)
                except UserError as e:
                    refused.append(f"{page.name}:{number}: {span} -> {e}")
    assert seen > 400, seen  # the docs teach by example: hundreds of lines are checked, not a handful
    assert not refused, refused


def test_each_commands_row_names_every_option_the_command_takes():
    """docs/commands.md's table gives each command's form (`:compare A B ... [steps=N] ...`): an option the code takes
    and the row leaves out is one a reader of the reference never learns of (`:compare eval_every=` was missing)."""
    from minitf_repl.commands.base import REGISTRY

    text = (REPO / "docs" / "commands.md").read_text()
    missing = []
    for row in (line for line in text.splitlines() if line.startswith("| `:")):
        form = row.split(" | ")[0]
        for name, rest in re.findall(r"`:([a-z_]+)([^`]*)`", form):
            command = REGISTRY.get(name)
            if command is None or command.pairs:  # an alias's span, or :set's many keys
                continue
            given = set(re.findall(r"([a-z_]+)=", rest)) | set(re.findall(r"--([a-z_]+)", rest))
            for param in command.params:
                if not param.positional and not ({param.name, *param.aliases} & given):
                    missing.append(f":{name} {param.name}=")
    assert not missing, missing


def test_commands_md_names_every_other_name_of_a_command():
    """`:help` lists `:ls, :checkpoints` and `:lrfind, :lr_find`; the reference named neither other name."""
    from minitf_repl.commands.base import REGISTRY

    text = (REPO / "docs" / "commands.md").read_text()
    unnamed = [f":{alias} ({command.name})" for command in REGISTRY.values() for alias in command.aliases
               if f":{alias}`" not in text and f"`{alias}`" not in text]
    assert not unnamed, unnamed


def test_the_variant_labs_table_gives_every_value_a_setting_takes():
    """docs/variant-lab.md's table of the settings: a value added to a setting (an activation, a norm) and left out of
    the table is one the page never offers."""
    from minitf_repl.commands.settings import SET

    text = (REPO / "docs" / "variant-lab.md").read_text()
    missing, seen = [], 0
    for row in (line for line in text.splitlines() if line.startswith("| `")):
        names, values = row.split(" | ")[0], row.split(" | ", 1)[1]
        offered = set(re.findall(r"`([^`]+)`", values))
        for name in re.findall(r"`([a-z_]+)`", names):
            param = SET.param_named(name)
            if param is not None and param.choices:
                seen += 1
                missing += [f"{name}={choice}" for choice in param.choices if str(choice) not in offered]
    assert seen >= 6 and not missing, (seen, missing)
