"""The user's code misbehaving, fuzzed (issue 26): hypothesis writes a from-scratch BERT (the
zoo's PooledBert, in a project of its own) with one fault put somewhere in it: a print (Python's
or the file descriptor's), an exit, an exception of any kind, a write into its inputs, a change
to the process (its working directory, sys.stderr, Ctrl-C's handler); at import, in __init__,
or in the forward, before or after it computes, on every call or the k-th only.
Each is run as a user runs it, `bertconv infer` then `bertconv verify --json`, and must end as
its fault calls for:

- stdout holds bertconv's output alone, which parses (a TOML table, strict JSON); nothing the
  model writes reaches file descriptor 1;
- a documented exit code, and at most one clean message, never a traceback;
- a fault that leaves the arithmetic alone (a print, a write into inputs already used, a change
  to the process) PASSES;
- a model that exits or raises wherever bertconv runs it is exit 2, said as the model's own;
- a write into its inputs before it reads them, on every call, is never a PASS;
- what it changes of the process (the working directory, sys.stdout and sys.stderr, Ctrl-C's
  handler, the warning filters, the recursion limit) is put back: bertconv goes on as started.

fuzz.py runs it with the file campaigns (`make fuzz`); test_fuzz.py runs it briefly, seeded.
"""

import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bertconv import cli

ZOO = Path(__file__).parent / "zoo"
PROJECT = ("family_bert.py", "head_parts.py")  # the modules the model imports beside it
USERS = {0: "done", 1: "FAILED or not BERT", 2: "the model's own fault"}

TEMPLATE = """\
import os
import signal
import sys
import warnings

import torch
from family_bert import PooledBert


class Stop(BaseException):
    pass


{import_}


class Bert(PooledBert):
    calls = 0

    def __init__(self, config):
        super().__init__(config)
{init}

    def forward(self, input_ids, attention_mask, token_type_ids):
        type(self).calls += 1
{before}
        out = super().forward(input_ids, attention_mask, token_type_ids)
{after}
        return out
"""

PRINTS = [
    'print("debug", torch.zeros(2).shape)',
    'sys.stdout.write("step\\n")',
    'os.write(1, b"fd noise\\n")',
    'print("to stderr", file=sys.stderr)',
]
EXITS = ["sys.exit(3)", "sys.exit(0)", 'sys.exit("bye")', "exit()", "raise SystemExit(1)"]
RAISES = [
    'raise ValueError("bad shape")',
    'raise RuntimeError("CUDA is required")',
    'raise KeyError("hidden")',
    'raise AssertionError("x.dim() == 3")',
    'raise Stop("a control-flow exception")',
    "1 / 0",
    "import not_a_module_anywhere",
]
WRITES = ["attention_mask.zero_()", "input_ids.fill_(0)", "token_type_ids.add_(1)"]
# The process changed beyond the model: bertconv must go on as the user started it.
STATE = [
    'os.chdir("/")',
    'sys.stdout = open(os.devnull, "w")',
    'sys.stderr = open(os.devnull, "w")',
    "signal.signal(signal.SIGINT, signal.SIG_IGN)",
    'warnings.simplefilter("error")',
    "sys.setrecursionlimit(5000)",
]


@dataclass(frozen=True)
class Fault:
    kind: str  # print, exit, raise, write, state
    place: str  # import, init, before, after
    code: str
    on_call: int | None  # forward faults: on this call only (None: every call)

    @property
    def harmless(self) -> bool:
        """Leaves the arithmetic as it is."""
        return self.kind in ("print", "state") or (self.kind == "write" and self.place == "after")

    @property
    def always(self) -> bool:
        """Stops every run of the model."""
        return self.kind in ("exit", "raise") and (
            self.place in ("import", "init") or self.on_call is None
        )

    @property
    def spoils(self) -> bool:
        """Changes what every run computes: writes into its inputs before reading them."""
        return self.kind == "write" and self.place == "before" and self.on_call is None

    def module(self) -> str:
        slots = dict.fromkeys(("import_", "init", "before", "after"), "")
        key, indent = ("import_", "") if self.place == "import" else (self.place, " " * 8)
        code = self.code
        if self.on_call is not None:
            code = f"if type(self).calls == {self.on_call}:\n{indent}    {code}"
        slots[key] = indent + code if key != "import_" else code
        return TEMPLATE.format(**slots)


@st.composite
def faults(draw) -> Fault:
    codes = {"print": PRINTS, "exit": EXITS, "raise": RAISES, "write": WRITES, "state": STATE}
    kind = draw(st.sampled_from(sorted(codes)))
    code = draw(st.sampled_from(codes[kind]))
    places = ["before", "after"] if kind == "write" else ["import", "init", "before", "after"]
    place = draw(st.sampled_from(places))
    forward = place in ("before", "after")
    on_call = draw(st.none() | st.integers(1, 8)) if forward else None
    return Fault(kind, place, code, on_call)


def runs(examples: int, seed: int | None, shrink: bool = True):
    """How every campaign runs hypothesis: `examples` inputs, the same ones every time where a
    seed is given, no database, no deadline (a run may take seconds); `shrink`: a failure
    shrunk to a minimal input (a test that only needs to see it fail need not wait for that)."""
    phases = [p for p in Phase if shrink or p not in (Phase.shrink, Phase.explain)]
    return settings(
        max_examples=examples,
        derandomize=seed is not None,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=phases,
    )


@dataclass
class Seeds:
    checkpoint: Path  # a tiny BertModel, written by transformers
    table: Path  # the zoo's PooledBert's table, inferred


def make_seeds(root: Path) -> Seeds:
    from conftest import reference_model, write_variant

    checkpoint = write_variant(reference_model(), "base", root / "base")
    table = root / "pooled.toml"
    spec = f"{ZOO / 'family_bert.py'}:PooledBert"
    config = str(checkpoint / "config.json")
    code, _, err, _ = run_cli(["infer", spec, "--config", config, "--out", str(table)])
    assert code == 0, err
    return Seeds(checkpoint, table)


def run_cli(args: list[str]) -> tuple[int, str, str, bytes]:
    """One command line in this process: its exit code, its stdout and stderr, and what
    reached file descriptor 1 beneath them."""
    out, err = io.StringIO(), io.StringIO()
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as beneath:
        os.dup2(beneath.fileno(), 1)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = cli.run(args)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        beneath.seek(0)
        leaked = beneath.read()
    return code, out.getvalue(), err.getvalue(), leaked


def problems(fault: Fault, seeds: Seeds, work: Path) -> tuple[dict[str, int], list[str]]:
    """Run the faulty model as a user would: what each command answered, and what went wrong."""
    for name in PROJECT:
        shutil.copy(ZOO / name, work / name)
    (work / "model.py").write_text(fault.module())
    spec, config = f"{work / 'model.py'}:Bert", str(seeds.checkpoint / "config.json")
    commands = {
        "infer": ["infer", spec, "--config", config],
        "verify": ["verify", str(seeds.checkpoint), "--model", spec, "--layout", str(seeds.table),
                   "--json"],
    }  # fmt: skip
    codes, found = {}, []
    for name, args in commands.items():
        before = process_state()
        code, out, err, leaked = run_cli(args)
        if process_state() != before:
            found.append(f"{name} ({fault}): the process was left changed: {process_state()}")
        codes[name] = code
        said = f"{name} ({fault}): exit {code}: {err.strip()[-300:]}"
        if code not in USERS:
            found.append(f"undocumented exit, {said}")
        if "Traceback" in err or err.count("bertconv: error: ") > 1:
            found.append(f"not one clean message, {said}")
        if leaked:
            found.append(f"{name}: the model's output reached stdout's descriptor: {leaked[:80]!r}")
        found += _unparsed(name, code, out)
        if fault.harmless and code != 0:
            found.append(f"a harmless fault was not passed, {said}")
        if fault.always and (code != 2 or "the model's code" not in err):
            found.append(f"a fault on every run is not exit 2 said as the model's, {said}")
        if fault.spoils and name == "verify" and code == 0:
            found.append(f"a model spoiling its own inputs PASSED, {said}")
    return codes, found


def process_state() -> tuple:
    """What a model's module may change of the process, beyond its model."""
    import signal
    import warnings

    handler, filters = signal.getsignal(signal.SIGINT), warnings.filters[:]
    return os.getcwd(), sys.stdout, sys.stderr, sys.getrecursionlimit(), handler, filters


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")


def _unparsed(name: str, code: int, out: str) -> list[str]:
    """stdout as bertconv writes it: a table (infer, done), strict JSON (verify, any verdict)."""
    try:
        if name == "infer" and code == 0:
            tomllib.loads(out)
        elif name == "verify" and code in (0, 1):
            json.loads(out, parse_constant=_not_json)
    except ValueError as e:
        return [f"{name}: stdout does not parse ({e}): {out[:120]!r}"]
    return []


def campaign(examples: int, seed: int | None, tally, seeds: Seeds | None = None) -> None:
    """`examples` faulty models, counted in `tally` (fuzz.Tally); an AssertionError names the
    first that ends wrongly (hypothesis shrinks it first)."""
    root = Path(tempfile.mkdtemp(prefix="bertconv-fuzz-code-"))
    seeds = seeds or make_seeds(root)

    @runs(examples, seed)
    @given(faults())
    def run_one(fault):
        work = Path(tempfile.mkdtemp(dir=root))
        started = time.perf_counter()
        try:
            codes, found = problems(fault, seeds, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        tally.seconds += time.perf_counter() - started
        tally.tried += 1
        tally.codes.update(f"{name} {code}" for name, code in codes.items())
        tally.clean += not found
        if found:
            tally.crashes.append(re.sub(r"/tmp/\S+/", "", found[0]))
            raise AssertionError("; ".join(found))

    try:
        run_one()
    finally:
        shutil.rmtree(root, ignore_errors=True)
