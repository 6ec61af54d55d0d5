"""The fuzzing campaign (issue 8): hypothesis mutates and truncates valid safetensors headers,
shard indexes, config files, .bin files, TensorFlow checkpoints (index and data), tf_model.h5
files and mapping tables, and each mutant is run as a user runs it (`bertconv convert`, then
`bertconv.load`). Every run must end in success or in one clean bertconv error with a documented
exit code, the same twice over; never a traceback, a hang, a changed source, a file left behind,
or code run from a pickle. fuzz_code.py puts faults into a user's own BERT (prints, exits,
exceptions, writes into its inputs), run through `infer` and `verify`.

    make fuzz                                  # the long campaign, with its figures
    python tests/fuzz.py --examples 50 --seed 0  # a short one

test_fuzz.py runs every target briefly, seeded, in CI.
"""

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from hypothesis import given
from hypothesis import strategies as st
from safetensors import safe_open

import bertconv
import fuzz_code
from bertconv import cli, mapping, tables, tfbundle
from bertconv.errors import BertconvError, TableError
from hostile import CANARY, malicious_payloads, split_safetensors

DOCUMENTED = {0: "done", 2: "usage", 3: "not found", 4: "bad checkpoint", 7: "output"}
TIMEOUT = 20  # seconds one run may take before it counts as a hang
ADVICE = ("weights_only=False", "safe_globals", "can still be loaded")  # never to be given
INTERESTING = [  # tokens that break parsers, put in place of a byte range
    b"-1", b"0", b"1e309", b"NaN", b"null", b"true", b"[]", b"{}", b'"', b"\\u0000", b"../",
    b"/etc/passwd", b"99999999999999999999", b"\xff\xfe", b"\x00" * 8, b'{"a":' * 50,
]  # fmt: skip


# Tensor names a table may try to give: safetensors' own key, nothing, terminal controls.
ODD_NAMES = ["__metadata__", "", "a\x1b[2J", "line\nPASSED", "x" * 2000, "b0"]


class Hang(BaseException):
    """Raised by the alarm: a run took longer than TIMEOUT."""


@dataclass
class Tally:
    """The campaign's figures."""

    tried: int = 0
    clean: int = 0
    codes: Counter = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)  # tracebacks, undocumented codes, hangs
    crashers: list[bytes] = field(default_factory=list)  # the mutants behind the first crashes
    executed: int = 0  # runs after which a pickle's code had run
    left_behind: int = 0  # runs that left a file or directory behind
    changed_source: int = 0
    seconds: float = 0.0


# Mutations ----------------------------------------------------------------------------------------

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["F32", "F16", "I64", "../x", "model.safetensors", "bert", "gelu"])
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value, prefix=()) -> list[tuple]:
    """Every path into a JSON value (keys and indices), the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


@st.composite
def json_edit(draw, document):
    """`document` with one value replaced, nudged, dropped or renamed somewhere inside it."""
    document = json.loads(json.dumps(document))
    path = draw(st.sampled_from(_paths(document)))
    if not path:
        return draw(JSON_VALUES)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    key, old = path[-1], parent[path[-1]]
    action = draw(st.sampled_from(["set", "nudge", "drop", "rename", "deep"]))
    if action == "nudge" and isinstance(old, int) and not isinstance(old, bool):
        parent[key] = old + draw(st.integers(-9, 9))
    elif action == "deep":  # a value nested far deeper than any config's
        value = None
        for _ in range(draw(st.integers(20, 900))):
            value = [value]
        parent[key] = value
    elif action == "drop":
        del parent[key]
    elif action == "rename" and isinstance(parent, dict):
        parent[draw(st.text(max_size=40))] = parent.pop(key)
    else:
        parent[key] = draw(JSON_VALUES)
    return document


@st.composite
def json_mutant(draw, document) -> bytes:
    for _ in range(draw(st.integers(1, 3))):
        document = draw(json_edit(document))
    return json.dumps(document).encode()


@st.composite
def byte_mutant(draw, data: bytes, start: int = 0, end: int | None = None) -> bytes:
    """`data` with 1-4 edits inside [start, end): flips, cuts, insertions, parser-breaking
    tokens; or simply truncated."""
    end = len(data) if end is None else end
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(start, max(start, min(end, len(data)) - 1)))
        kind = draw(st.sampled_from(["flip", "cut", "insert", "delete", "token", "truncate"]))
        if kind == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif kind == "token":
            token = draw(st.sampled_from(INTERESTING))
            data[at : at + len(token)] = token
        else:
            del data[at:]
    return bytes(data)


# Targets: each a seed checkpoint, the file to spoil, and how --------------------------------------


def _header_mutant(draw, path: Path) -> bytes:
    raw = path.read_bytes()
    header, body = split_safetensors(path)
    length = int.from_bytes(raw[:8], "little")
    if draw(st.booleans()):
        text = draw(json_mutant(header))
        text += b" " * (-len(text) % 8)
        return len(text).to_bytes(8, "little") + text + body
    return draw(byte_mutant(raw, 0, 8 + length))


def _bin_mutant(draw, path: Path) -> bytes:
    return draw(byte_mutant(path.read_bytes()))


def _json_mutant(draw, path: Path) -> bytes:
    if draw(st.booleans()):
        return draw(json_mutant(json.loads(path.read_text())))
    return draw(byte_mutant(path.read_bytes()))


def _entry_mutation(draw, entries: list, own: tuple[str, ...]) -> tuple[str | None, int]:
    """One of `entries` dropped, repeated or swapped with another, in place; or one of the
    caller's `own` kinds of mutation drawn, for it to make: (kind, the entry's index)."""
    if not entries:
        return None, 0
    at = draw(st.integers(0, len(entries) - 1))
    kind = draw(st.sampled_from(["drop", "repeat", "swap", *own]))
    if kind == "drop":
        del entries[at]
    elif kind == "repeat":
        entries.insert(at, entries[at])
    elif kind == "swap":
        other = draw(st.integers(0, len(entries) - 1))
        entries[at], entries[other] = entries[other], entries[at]
    return kind, at


def _tf_index_mutant(draw, path: Path) -> bytes:
    """An index spoiled in its bytes (mostly caught by a checksum), or in its entries or in a
    block's contents with the checksums made to match, so that the parsers behind them are
    reached."""
    raw = path.read_bytes()
    how = draw(st.sampled_from(["bytes", "entries", "block"]))
    if how == "bytes":
        return draw(byte_mutant(raw))
    if how == "block":
        size = tfbundle.block_handles(raw)[0][1]  # the first data block, at the start
        contents = draw(byte_mutant(raw[:size]))[:size].ljust(size, b"\0")
        crc = tfbundle.mask(tfbundle.crc32c(contents + b"\0"))
        return contents + b"\0" + crc.to_bytes(4, "little") + raw[size + tfbundle.TRAILER :]
    table = tfbundle.read_sstable(path)
    for _ in range(draw(st.integers(1, 3))):
        kind, at = _entry_mutation(draw, table, ("key", "value"))
        if kind == "key":
            key, value = table[at]
            table[at] = (draw(byte_mutant(key)) if key else key, value)
        elif kind == "value":
            key, value = table[at]
            table[at] = (key, draw(byte_mutant(value)))
    builder = tfbundle.TableBuilder()
    for key, value in table:
        builder.add(key, value)
    return builder.finish()


TARGETS = {
    # target: (seed checkpoint, file spoiled, mutator)
    "safetensors header": ("pretraining", "model.safetensors", _header_mutant),
    "shard index": ("sharded", "model.safetensors.index.json", _json_mutant),
    "config": ("pretraining", "config.json", _json_mutant),
    ".bin (legacy format)": ("legacy-bin", "pytorch_model.bin", _bin_mutant),
    ".bin (zip format)": ("zip-bin", "pytorch_model.bin", _bin_mutant),
    ".bin (code in the pickle)": ("evil-bin", "pytorch_model.bin", _bin_mutant),
    "TensorFlow index": ("google-tf", "bert_model.ckpt.index", _tf_index_mutant),
    "TensorFlow data": ("google-tf", "bert_model.ckpt.data-00000-of-00001", _bin_mutant),
    "tf_model.h5": ("tf-h5", "tf_model.h5", _bin_mutant),
}
TF_FIXTURES = Path(__file__).parent / "fixtures" / "tf"  # written by TensorFlow itself


def make_seeds(root: Path) -> dict[str, Path]:
    """Valid checkpoints to spoil, written by transformers (and torch) with seeded weights,
    plus a .bin whose pickle would run code (the fuzzer checks it never does), and the
    TensorFlow checkpoints that TensorFlow wrote (tests/fixtures/tf)."""
    from conftest import reference_model, write_variant

    reference = reference_model()
    seeds = {
        k: write_variant(reference, k, root / k) for k in ("pretraining", "sharded", "legacy-bin")
    }
    for kind, payload in [("zip-bin", None), ("evil-bin", malicious_payloads()["os.system"])]:
        seeds[kind] = shutil.copytree(seeds["pretraining"], root / kind)
        state_dict = dict(reference.state_dict())
        if payload is not None:
            state_dict["bert.pooler.dense.bias"] = payload
        torch.save(state_dict, seeds[kind] / "pytorch_model.bin")
        (seeds[kind] / "model.safetensors").unlink()
    ignore = shutil.ignore_patterns("expected*")  # the tests' values, not the checkpoint's
    for kind, fixture in [("google-tf", "bert_tiny"), ("tf-h5", "h5_masked_lm")]:
        seeds[kind] = shutil.copytree(TF_FIXTURES / fixture, root / kind, ignore=ignore)
    return seeds


# One run, checked ---------------------------------------------------------------------------------


def _digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def _deadline(seconds: float):
    def alarm(*_):
        raise Hang

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _convert(src: Path, out: Path) -> tuple[int, str]:
    stderr, stdout = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout):
        code = cli.run(["convert", str(src), "--out", str(out)])
    return code, stderr.getvalue()


def _problems(src: Path, mutant: bytes, work: Path, canary: Path) -> tuple[int, list[str]]:
    """Run the mutant as a user would, twice, then load it: its exit code, and what went
    wrong, if anything. (Advice found in a message counts only if the mutant did not put it
    there: a message may quote a name from the file.)"""
    before, out, problems = _digest(src), work / "made" / "out", []
    results = []
    for _ in range(2):
        code, err = _convert(src, out)
        results.append((code, re.sub(r"bertconv-[0-9a-f]{12}", "", err.split("\n")[0])))
        if code not in DOCUMENTED:
            problems.append(f"exit {code}: {err.strip()[:300]}")
        elif code and (not err.startswith("bertconv: error: ") or "Traceback" in err):
            problems.append(f"not one clean message: {err[:300]}")
        elif any(advice in err and advice.encode() not in mutant for advice in ADVICE):
            problems.append(f"passed on advice to run a pickle: {err[:300]}")
        if code and (work / "made").exists():
            problems.append("left behind: an output directory made for a failed run")
        if code == 0:
            problems += _output_problems(out)
    if results[0][0] != results[1][0]:
        problems.append(f"not the same twice: {results}")
    try:
        bertconv.load(src)
    except BertconvError:
        pass
    except Exception as e:
        problems.append(f"load raised {type(e).__name__}: {e}")
    if _digest(src) != before:
        problems.append("changed the source")
    if canary.exists():
        problems.append("ran code from a pickle")
    return results[0][0], problems


def _output_problems(out: Path) -> list[str]:
    leftovers = [p.name for p in out.iterdir() if p.name.endswith(".partial")]
    try:
        with safe_open(out / "model.safetensors", "pt") as f:
            f.keys()
    except Exception as e:
        return [f"wrote a file safetensors refuses: {e}"]
    return [f"left behind: {leftovers}"] if leftovers else []


def check(seed: Path, name: str, content: bytes, tally: Tally, workroot: Path) -> None:
    """Write the mutant into a copy of `seed` and run it; count what happened."""
    work = Path(tempfile.mkdtemp(dir=workroot))
    canary = work / "canary"
    os.environ[CANARY] = str(canary)
    src = shutil.copytree(seed, work / "src")
    (src / name).write_bytes(content)
    started = time.perf_counter()
    try:
        with _deadline(TIMEOUT):
            code, problems = _problems(src, content, work, canary)
    except Hang:
        code, problems = "hang", [f"hang: more than {TIMEOUT} s"]
    tally.seconds += time.perf_counter() - started
    tally.tried += 1
    tally.codes[code] += 1
    tally.executed += any("ran code" in p for p in problems)
    tally.left_behind += any("left behind" in p for p in problems)
    tally.changed_source += any("changed the source" in p for p in problems)
    tally.clean += not problems
    shutil.rmtree(work, ignore_errors=True)
    if problems:
        tally.crashes.append(f"{name}: {problems[0]}")
        tally.crashers = [*tally.crashers[-2:], content]  # the last is the shrunk one
        raise AssertionError("; ".join(problems))


def campaign(
    target: str, seeds: dict[str, Path], examples: int, seed: int | None, tally: Tally, shrink=True
):
    """Run `examples` mutants of one target; an AssertionError names the first failure
    (hypothesis shrinks it to a minimal mutant first, unless not to `shrink`)."""
    seed_name, file_name, mutator = TARGETS[target]
    path = seeds[seed_name] / file_name
    workroot = Path(tempfile.mkdtemp(prefix="bertconv-fuzz-"))

    @fuzz_code.runs(examples, seed, shrink)
    @given(st.data())
    def run_one(data):
        content = mutator(data.draw, path)
        check(seeds[seed_name], file_name, content, tally, workroot)

    try:
        run_one()
    finally:
        shutil.rmtree(workroot, ignore_errors=True)


# Mapping tables -----------------------------------------------------------------------------------


@st.composite
def table_mutant(draw, text: str) -> str:
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        kind, at = _entry_mutation(draw, lines, ("retarget", "bytes"))
        if kind == "retarget" and " = " in lines[at] and draw(st.booleans()):
            key, value = lines[at].split(" = ", 1)  # a name no file can hold, or show
            lines[at] = f"{json.dumps(draw(st.sampled_from(ODD_NAMES)))} = {value}"
        elif kind == "retarget" and " = " in lines[at]:
            key = lines[at].split(" = ")[0]
            lines[at] = f"{key} = {json.dumps(draw(JSON_VALUES))}"
        elif kind in ("retarget", "bytes"):
            mutated = draw(byte_mutant(lines[at].encode()))
            lines[at] = mutated.decode("utf-8", "replace")
    return "\n".join(lines) + "\n"


def table_campaign(examples: int, seed: int | None, tally: Tally) -> None:
    """Mutated tables: each is refused with a TableError naming the file, or read; a table
    that is read converts official weights both ways, or refuses them, cleanly."""
    from test_mapping import random_official

    from bertconv.config import BertConfig
    from bertconv.convert import convert
    from conftest import TINY

    config = BertConfig(**TINY)
    official = random_official()
    texts = {name: (tables.TABLES / f"{name}.toml").read_text() for name in tables.layout_names()}
    original = tables.TABLES

    @fuzz_code.runs(examples, seed)
    @given(st.sampled_from(sorted(texts)), st.data())
    def run_one(name, data):
        mutated = data.draw(table_mutant(texts[name]))
        with tempfile.TemporaryDirectory() as folder:
            for other, text in texts.items():
                Path(folder, f"{other}.toml").write_text(mutated if other == name else text)
            tables.TABLES = Path(folder)
            _clear_caches()
            tally.tried += 1
            try:
                with _deadline(TIMEOUT):
                    there = convert(official, config, "transformers", name).state_dict
                    convert(there, config, name, "transformers")
                tally.codes[0] += 1
            except TableError as e:
                tally.codes[e.exit_code] += 1
                if folder not in str(e):
                    tally.crashes.append(f"table {name}: an error that names no file: {e}")
                    raise AssertionError(str(e)) from None
            except BertconvError as e:
                tally.codes[e.exit_code] += 1
            except Hang:
                tally.crashes.append(f"table {name}: hang")
                raise AssertionError("hang") from None
            except Exception as e:
                tally.crashes.append(f"table {name}: {type(e).__name__}: {e}")
                raise AssertionError(f"{type(e).__name__}: {e}") from e
            finally:
                tables.TABLES = original
                _clear_caches()
            tally.clean += 1

    run_one()


def _clear_caches() -> None:
    """Forget every table read: the next test reads the shipped ones again."""
    mapping.forget()


# The command --------------------------------------------------------------------------------------


def report(tallies: dict[str, Tally]) -> str:
    lines = [
        "| target | inputs tried | handled cleanly | exit codes | crashes | code executed "
        "| files left behind | source changed | s/input |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for target, t in tallies.items():
        codes = ", ".join(f"{c}: {n}" for c, n in sorted(t.codes.items()))
        per = t.seconds / t.tried if t.tried else 0
        lines.append(
            f"| {target} | {t.tried} | {t.clean} | {codes} | {len(t.crashes)} | {t.executed} "
            f"| {t.left_behind} | {t.changed_source} | {per:.3f} |"
        )
    total = Tally()
    for t in tallies.values():
        total.tried += t.tried
        total.clean += t.clean
        total.crashes += t.crashes
        total.executed += t.executed
        total.left_behind += t.left_behind
    lines.append(
        f"\nIn all: {total.tried} inputs tried, {total.clean} handled cleanly, "
        f"{len(total.crashes)} crashes, code executed: {total.executed}, "
        f"files left behind: {total.left_behind}."
    )
    lines += [f"  crash: {c}" for c in total.crashes[:20]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="mutants per target")
    parser.add_argument("--seed", type=int, default=None, help="derandomize (repeatable)")
    args = parser.parse_args(argv)
    tallies = {}
    with tempfile.TemporaryDirectory(prefix="bertconv-fuzz-seeds-") as root:
        seeds = make_seeds(Path(root))
        for target in TARGETS:
            tallies[target] = Tally()
            with contextlib.suppress(AssertionError):
                campaign(target, seeds, args.examples, args.seed, tallies[target])
            print(f"{target}: {tallies[target].tried} tried", file=sys.stderr)
    tallies["mapping tables"] = Tally()
    with contextlib.suppress(AssertionError):
        table_campaign(args.examples, args.seed, tallies["mapping tables"])
    tallies["the user's code"] = Tally()
    with contextlib.suppress(AssertionError):
        fuzz_code.campaign(args.examples, args.seed, tallies["the user's code"])
    print(report(tallies))
    return 1 if any(t.crashes for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
