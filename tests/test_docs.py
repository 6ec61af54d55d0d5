"""The documentation holds to the code: every command and option of the CLI is in
docs/commands.md, the README stays a newcomer's page, and every relative link leads to a file."""

import re
from pathlib import Path

import pytest
import typer

from bertconv.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMANDS = DOCS / "commands.md"
README_MOST_BYTES = 12 * 1024

# [text](target) in Markdown, but not an image's; the target up to a space or a closing paren.
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def cli_commands() -> dict:
    """The app's commands, by name, as click (typer's own, vendored) sees them."""
    group = typer.main.get_command(app)
    return dict(group.commands)


def option_names(command) -> list[str]:
    """Every spelling of every option a command takes (`--heads` and `--no-heads` both)."""
    names = []
    for param in command.params:
        if param.param_type_name == "option":
            names += [*param.opts, *param.secondary_opts]
    return names


def test_the_app_has_the_commands_the_docs_describe():
    assert set(cli_commands()) >= {"layouts", "convert", "fetch", "inspect", "infer", "verify"}


@pytest.mark.parametrize("name", sorted(cli_commands()))
def test_every_command_and_each_of_its_options_is_in_commands_md(name):
    text = COMMANDS.read_text()
    assert re.search(rf"^## {re.escape(name)}$", text, re.M), f"no section for {name!r}"
    section = text.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    missing = [
        opt
        for opt in option_names(cli_commands()[name])
        if opt != "--help" and not re.search(rf"`{re.escape(opt)}[` ]", section)
    ]
    assert not missing, f"docs/commands.md's {name} section does not describe {missing}"


def test_the_readme_is_a_newcomers_page():
    size = len(README.read_bytes())
    assert size <= README_MOST_BYTES, f"README.md is {size} bytes; at most {README_MOST_BYTES}"
    first = README.read_text().splitlines()[:5]
    assert any("make demo" in line for line in first)
    assert any("make test" in line for line in first)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def relative_links(page: Path) -> list[str]:
    """The links of a page that name a file of the repository (not a web address, not an
    anchor of the page itself), without their anchor."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not links
    targets = [m.group(1) for m in LINK.finditer(text)]
    return [
        t.split("#", 1)[0]
        for t in targets
        if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")
    ]


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file(page):
    broken = [t for t in relative_links(page) if not (page.parent / t).exists()]
    assert not broken, f"{page.relative_to(ROOT)} links to files that are not there: {broken}"


def test_the_readme_links_every_page_of_the_docs():
    linked = {(README.parent / t).resolve() for t in relative_links(README)}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link {unlinked}"


def test_every_test_the_docs_name_is_there():
    """The docs cite tests as proof (`test_name`, `FILE.py::test_name`, `tests/path`): each must
    exist, in the file named, so a test renamed or moved is renamed in the docs too."""
    tests = ROOT / "tests"
    defined = set()
    for path in tests.rglob("*.py"):
        defined |= set(re.findall(r"^\s*def (test_\w+)", path.read_text(), re.M))
    text = "\n".join(page.read_text() for page in pages())
    named = set(re.findall(r"\b(test_\w+)(?!\w*\.py)\b", text))
    paths = set(re.findall(r"`(tests/[\w./-]+)`", text))
    files = {p.name for p in tests.rglob("test_*.py")}
    missing = sorted(n for n in named if n not in defined)
    missing += sorted(p for p in paths if not (ROOT / p).exists())
    missing += sorted(set(re.findall(r"\b(test_\w+\.py)\b", text)) - files)
    for file, name in set(re.findall(r"\b(test_\w+\.py)::(test_\w+)", text)):
        held = [
            p for p in tests.rglob(file) if re.search(rf"^\s*def {name}\b", p.read_text(), re.M)
        ]
        missing += [] if held else [f"{file}::{name}"]
    assert not missing, f"the docs name tests that are not there: {missing}"
