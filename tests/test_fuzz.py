"""A short, seeded fuzzing campaign (fuzz.py) over every target: mutated safetensors headers,
shard indexes, config files, .bin files (one of them a pickle that would run code), TensorFlow
checkpoints (index and data), tf_model.h5 files and mapping tables. Each mutant ends in success
or one clean bertconv error, the same twice; never a traceback, a hang, a changed source, a file
left behind, or code run. Faults put into a user's own BERT (fuzz_code.py) end as each calls
for. `make fuzz` runs the long campaign."""

import tempfile
from pathlib import Path

import pytest

import fuzz
import fuzz_code

EXAMPLES = 40  # per target; the seed makes the run the same every time


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return fuzz.make_seeds(tmp_path_factory.mktemp("fuzz-seeds"))


@pytest.mark.parametrize("target", fuzz.TARGETS)
def test_every_mutant_ends_cleanly(target, seeds):
    tally = fuzz.Tally()
    fuzz.campaign(target, seeds, EXAMPLES, seed=0, tally=tally)
    assert tally.tried >= EXAMPLES and tally.clean == tally.tried, tally.crashes
    assert tally.executed == tally.left_behind == tally.changed_source == 0
    assert set(tally.codes) <= set(fuzz.DOCUMENTED)


def test_every_mutated_table_is_read_or_refused_naming_its_file():
    tally = fuzz.Tally()
    fuzz.table_campaign(EXAMPLES, seed=0, tally=tally)
    assert tally.tried >= EXAMPLES and tally.clean == tally.tried, tally.crashes
    assert 2 in tally.codes, "no mutant was refused: the mutator does not reach the reader"


def test_the_checks_catch_a_crash(seeds, monkeypatch):
    """The harness itself: a reader that raises a plain exception is reported, not passed."""
    from bertconv import storage

    def broken(path):
        raise KeyError("data_offsets")

    monkeypatch.setattr(storage, "read_header", broken)
    tally = fuzz.Tally()
    with pytest.raises(AssertionError):
        fuzz.campaign("safetensors header", seeds, 5, seed=0, tally=tally, shrink=False)
    assert tally.crashes and "exit 70" in tally.crashes[0]


def test_every_fault_in_the_users_code_ends_as_it_calls_for():
    """fuzz_code.py: prints, exits, exceptions and writes into its inputs, put anywhere in a
    from-scratch BERT, through infer and verify --json."""
    tally = fuzz.Tally()
    fuzz_code.campaign(EXAMPLES, seed=0, tally=tally)
    assert tally.tried >= EXAMPLES and tally.clean == tally.tried, tally.crashes
    assert {"infer 0", "verify 0", "infer 2", "verify 2"} <= set(tally.codes), tally.codes


def test_the_checks_catch_the_models_print_on_stdout(monkeypatch):
    """The campaign itself: with the user's output no longer sent to stderr, a print in the
    model reaches stdout, and the campaign says so."""
    import contextlib

    from bertconv.yours import fence, harness

    for module in (fence, harness):  # where the model's code runs: fenced, and traced
        monkeypatch.setattr(module, "users_code", contextlib.nullcontext)
    fault = fuzz_code.Fault("print", "before", 'os.write(1, b"fd noise\\n")', None)
    with tempfile.TemporaryDirectory() as root:
        seeds = fuzz_code.make_seeds(Path(root))
        work = Path(root) / "work"
        work.mkdir()
        _, found = fuzz_code.problems(fault, seeds, work)
    assert any("reached stdout's descriptor" in f for f in found), found
