"""A short, seeded fuzzing campaign (fuzz.py) over every target: mutated safetensors headers,
shard indexes, config files, .bin files (one of them a pickle that would run code), TensorFlow
checkpoints (index and data), tf_model.h5 files and mapping tables. Each mutant ends in success
or one clean bertconv error, the same twice; never a traceback, a hang, a changed source, a file
left behind, or code run. `make fuzz` runs the long campaign."""

import pytest

import fuzz

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
        fuzz.campaign("safetensors header", seeds, 5, seed=0, tally=tally)
    assert tally.crashes and "exit 70" in tally.crashes[0]
