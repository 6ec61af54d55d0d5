"""The pages held to the code (issue 36): every command example in README.md and docs/ runs as a
newcomer types it, in a directory where its names exist (the Hub's `bert-base-uncased`, a tiny
BERT with its tokenizer, served by a local Hub; `mybert.py`, a from-scratch BERT;
google-research's `./uncased_L-12_H-768_A-12`; what `make demo` fetched), and exits as the page
says (0 unless a trailing `# exit N`); the Python examples run; each synopsis and each option
table of docs/commands.md names the CLI's own options, with its defaults; python.md's table of
the family's classes is the catalogs'; the measured tables are `make parity-doc`'s output."""

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
import torch

from localhub import LocalHub, use_hub

ROOT = Path(__file__).resolve().parent.parent
ZOO = ROOT / "tests" / "zoo"
# benchmarks*.md are what `make bench` printed (their `$ bertconv` lines are its record)
PAGES = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").glob("*.md") if not p.name.startswith("benchmarks")
)
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_]+$|[\[\]|]|\.\.\.")


def _commands() -> dict:
    from typer.main import get_command

    from bertconv.cli import app

    return get_command(app).commands


def _options(command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}


def code_lines(text: str) -> list[str]:
    """The lines of the page's code: indented blocks (4 spaces) and fenced ones."""
    found, fenced, previous = [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif previous.startswith("    bertconv") and line.strip().startswith(("[", "--")):
            found[-1] += " " + line.strip()  # a synopsis, continued
            continue
        elif fenced or line.startswith("    "):
            found.append(line.strip())
        previous = line
    return found


def command_lines(page: Path) -> list[tuple[str, int]]:
    """(the command as typed, its exit code) for each `bertconv COMMAND ...` the page gives, in
    its order: in its code, and inline (`bertconv convert ./dir`) where it has arguments."""
    text, known = page.read_text(), set(_commands())
    lines = [line.removeprefix("$ ") for line in code_lines(text)]
    lines += re.findall(r"`(bertconv [^`]+)`", text)
    found = []
    for line in lines:
        command, _, comment = line.partition(" #")
        words = command.split()
        if len(words) < 2 or words[0] != "bertconv" or words[1] not in known:
            continue
        if len(words) == 2 and words[1] != "layouts":  # a command named, not an example
            continue
        if words[1:3] == ["verify", "bert-base"] and "--device" in words:
            continue  # benchmarks-gpu's record, quoted
        exit_code = re.search(r"exit (\d+)", comment)
        found.append((command.strip(), int(exit_code.group(1)) if exit_code else 0))
    return found


def runnable(page: Path) -> list[tuple[str, int]]:
    return [(c, e) for c, e in command_lines(page) if not any(map(PLACEHOLDER.search, c.split()))]


def synopses(page: Path) -> list[str]:
    return [c for c, _ in command_lines(page) if any(map(PLACEHOLDER.search, c.split()))]


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


@pytest.fixture(scope="module")
def newcomer(tmp_path_factory, minilm):
    """A directory as a newcomer's, with what the pages name, and the Hub they fetch from."""
    from bertconv.api import Source, convert_checkpoint
    from bertconv.cli import run
    from st_dirs import encoder

    root = tmp_path_factory.mktemp("newcomer")
    official = encoder(tmp_path_factory.mktemp("bert-base-uncased"))  # a BERT, its tokenizer
    shutil.copytree(
        ROOT / "tests" / "fixtures" / "tf" / "bert_tiny", root / "uncased_L-12_H-768_A-12"
    )
    (root / "mybert.py").write_text((ZOO / "verdicts.py").read_text() + "\nMyBert = TutorialBert\n")
    for name in ("head_parts.py", "head_sentiment.py"):
        shutil.copy(ZOO / name, root / name)
    (root / "mine.py").write_text("from head_sentiment import SentimentBert as Sentiment\n")
    demo = root / "demo-out" / "all-MiniLM-L6-v2-bertconv"
    convert_checkpoint(Source("sentence-transformers/all-MiniLM-L6-v2", minilm), demo)
    with LocalHub() as hub, pytest.MonkeyPatch.context() as patch:
        hub.add_repo("bert-base-uncased", official)
        use_hub(patch, hub.url, root / ".hf")
        patch.chdir(root)
        assert run(["fetch", "bert-base-uncased", "--out", "bert-base"]) == 0  # README's first
        yield root


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_example_runs_as_the_page_says(page, newcomer, cli):
    for command, expected in runnable(page):
        code, out, err = cli(*shlex.split(command)[1:])
        assert code == expected, f"{page.name}: `{command}` exited {code}:\n{err[-3000:]}"
        assert command.split()[1] != "verify" or "PASSED" in out


def test_the_newcomers_flows_are_there_to_run():
    """The README's path and your-own-bert.md's, whole: a parser that found nothing ran nothing."""
    readme = [c.split()[1] for c, _ in runnable(ROOT / "README.md")]
    assert readme[:4] == ["fetch", "convert", "inspect", "verify"] and readme.count("verify") == 2
    assert readme.count("convert") == 2 and "infer" in readme  # google-research's, inline
    own = [c for c, _ in runnable(ROOT / "docs" / "your-own-bert.md")]
    assert [c.split()[1] for c in own[:3]] == ["infer", "convert", "verify"]
    assert "--out bert-base-mine" in own[1] and own[2].startswith("bertconv verify bert-base-mine")


@pytest.mark.parametrize(
    "page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name
)  # fmt: skip
def test_every_python_example_runs(page, newcomer):
    namespace = {"__name__": "__example__"}
    for block in python_blocks(page):
        if '"cuda"' in block and not torch.cuda.is_available():
            continue  # a GPU's example, on a machine that has one
        exec(compile(block, str(page), "exec"), namespace)  # noqa: S102 (the page's own code)
    assert "bertconv" in namespace


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_each_synopsis_names_the_commands_own_options(page):
    commands = _commands()
    for line in synopses(page):
        name = line.split()[1]
        named = set(re.findall(r"--[a-z][a-z-]*", line))
        assert named <= _options(commands[name]), f"{page.name}: {line}"
        if page == ROOT / "docs" / "commands.md":  # its synopses: every option
            assert _options(commands[name]) - {"--help"} <= named, f"{page.name}: {line}"


def _tables(section: str) -> list[list[str]]:
    """The rows of the option table (`| option | meaning | default |`) of a page's section."""
    rows = re.findall(r"^\|(.*)\|$", section, re.M)
    cells = [[c.strip() for c in row.split("|")] for row in rows]
    start = next((i for i, r in enumerate(cells) if r[0] in ("option", "argument or option")), None)
    if start is None:
        return []
    body = []
    for row in cells[start + 2 :]:
        if not row[0].startswith("`"):
            break
        if row[0].startswith("`--"):  # an argument (`MODEL`) is no option
            body.append(row)
    return body


def _default(parameter) -> str:
    """A CLI option's default as its --help says it ([default: ...]), or its value."""
    said = re.search(r"\[default: (.*?)\]", " ".join((parameter.help or "").split()))
    if said:
        return said.group(1)
    return {False: "off", None: "-"}.get(parameter.default, str(parameter.default))


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").replace("'", "").split()).lower()


@pytest.mark.parametrize("name", ["convert", "fetch", "inspect", "infer", "verify"])
def test_commands_md_lists_each_option_and_default_as_the_cli_has_them(name):
    commands = _commands()
    page = (ROOT / "docs" / "commands.md").read_text()
    section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
    rows = _tables(section)
    listed = {o for row in rows for o in re.findall(r"--[a-z][a-z-]*", row[0])}
    assert listed == _options(commands[name]) - {"--help"}, name
    parameters = {o: p for p in commands[name].params for o in (*p.opts, *p.secondary_opts)}
    for row in rows:
        option = re.findall(r"--[a-z][a-z-]*", row[0])[0]
        cli_default = _plain(_default(parameters[option]))
        assert _plain(row[-1]).startswith(cli_default), (name, option, row[-1], cli_default)


def test_the_shared_options_mean_what_each_command_says():
    page = (ROOT / "docs" / "commands.md").read_text()
    shared = page.split("Options shared by several commands", 1)[1].split("\n\n", 2)[1]
    every = set().union(*map(_options, _commands().values())) | {"--help"}  # click's own
    for row in re.findall(r"^\| `(--[a-z-]+)", shared, re.M):
        assert row in every, row


def test_pythons_table_of_the_familys_classes_is_the_catalogs():
    from bertconv import catalog

    page = (ROOT / "docs" / "python.md").read_text()
    section = page.split("### BERT's family: the class each checkpoint gives", 1)[1]
    rows = [[c.strip() for c in r.split("|")] for r in re.findall(r"^\|(.*)\|$", section, re.M)]
    rows = [(re.findall(r"`([^`]+)`", r[0]), re.findall(r"`([^`]+)`", r[1])) for r in rows[2:]]

    def gives(model_class: str) -> list[str]:
        exact = [given for names, given in rows if model_class in names]
        ends = [n[3:] for names, _ in rows for n in names if n.startswith("...")]
        suffix = [given for names, given in rows
                  if any(f"...{e}" in names and model_class.endswith(e) for e in ends)]  # fmt: skip
        return (exact or suffix or [[]])[0]

    for model_type in catalog.model_types():
        arch = catalog.of(model_type)
        for model_class in arch.classes:
            assert arch.implementation(model_class) in gives(model_class), model_class


def test_the_measured_tables_are_what_make_parity_doc_measures():
    """Written by bench/parity_doc.py: measured again, the same rows and columns; the same
    digits where this environment has the versions the page names."""
    sys.path.insert(0, str(ROOT / "bench"))
    import parity_doc

    page = parity_doc.current((ROOT / "docs" / "parity.md").read_text())
    again = parity_doc.measured()
    numbers = re.compile(r"\d\.\d\de[-+]\d\d")
    versions = page.split("\n")[2], again.split("\n")[2]  # the line naming them
    assert numbers.sub("N", page).replace(*versions) == numbers.sub("N", again)
    if versions[0] == versions[1]:  # the same versions: the same numbers
        assert page == again
