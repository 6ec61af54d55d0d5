"""Round trips: official -> X -> official is bit-identical, tensor by tensor, through
every pair of shipped tables for every class they hold, and through random tables built from the
transform registry on random configs (hypothesis)."""

import itertools
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertconv import storage
from bertconv.catalog import of
from bertconv.config import BertConfig
from bertconv.convert import convert
from bertconv.mapping import layout
from bertconv.tables import OFFICIAL, layout_names
from bertconv.transforms import REGISTRY
from conftest import TINY

CONFIG = BertConfig(**TINY)


def random_tensors(config: BertConfig, groups, seed: int = 0, dtype=torch.float32) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        name: storage.from_torch(torch.randn(shape, generator=g).to(dtype))
        for name, shape in of(config.model_type).shapes(config, list(groups)).items()
    }


def identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(storage.equal(a[k], b[k]) for k in a)


def holds(name: str, groups: list[str]) -> bool:
    table = layout(name, CONFIG)
    return set(groups) <= table.groups and table.requires <= set(groups)


PAIRS = [
    (cls, a, b)
    for cls, groups in ((c, list(s.groups)) for c, s in of("bert").classes.items())
    for a, b in itertools.product(layout_names(), repeat=2)
    if holds(a, groups + ["pooler"]) and holds(b, groups + ["pooler"])
]


@pytest.mark.parametrize("cls, a, b", PAIRS)
def test_official_through_every_pair_of_shipped_tables_is_bit_identical(cls, a, b):
    groups = [*of("bert").groups_of(cls)]
    groups += ["pooler"] if "pooler" not in groups else []
    official = random_tensors(CONFIG, groups)
    there = convert(official, CONFIG, OFFICIAL, a).state_dict
    between = convert(there, CONFIG, a, b).state_dict
    back = convert(between, CONFIG, b, OFFICIAL).state_dict
    strip = {k.removeprefix("bert."): v for k, v in back.items()}
    assert identical(strip, official)


# Random tables ---------------------------------------------------------------------------------


@st.composite
def configs(draw) -> BertConfig:
    heads = draw(st.integers(1, 4))
    return BertConfig(
        vocab_size=draw(st.integers(2, 30)),
        hidden_size=heads * draw(st.integers(1, 4)),
        num_hidden_layers=draw(st.integers(1, 3)),
        num_attention_heads=heads,
        intermediate_size=draw(st.integers(1, 20)),
        max_position_embeddings=draw(st.integers(1, 20)),
        type_vocab_size=draw(st.integers(1, 3)),
    )


QKV = ("query", "key", "value")


@st.composite
def tables(draw, catalog: dict[str, dict]) -> str:
    """A table of random names whose every row takes a transform from the registry its
    tensors' ranks allow; in a layer, the query, key and value may be fused, in any order."""
    rows, n = [], itertools.count()
    for group in ("encoder", "pooler"):
        patterns = dict(catalog[group])
        if group == "encoder" and draw(st.booleans()):
            order = draw(st.permutations(QKV))
            for part in ("weight", "bias"):
                names = [f"encoder.layer.{{layer}}.attention.self.{p}.{part}" for p in order]
                kinds = [
                    k for k, t in REGISTRY.items() if t.fuses and len(patterns[names[0]]) in t.ranks
                ]
                rows.append(
                    (group, f"L.{{layer}}.qkv{next(n)}", {draw(st.sampled_from(kinds)): names})
                )
                for name in names:
                    del patterns[name]
        for pattern, dims in patterns.items():
            kinds = [k for k, t in REGISTRY.items() if not t.fuses and len(dims) in t.ranks]
            kind = draw(st.sampled_from(kinds))
            name = f"L.{{layer}}.t{next(n)}" if "{layer}" in pattern else f"g{next(n)}"
            rows.append((group, name, pattern if kind == "rename" else {kind: pattern}))
    draw(st.randoms()).shuffle(rows)  # a table's rows in any order
    return _toml(rows)


def _value(spec) -> str:
    """A row's value in TOML: a name, or { transform = name or [names] }."""
    if isinstance(spec, str):
        return f'"{spec}"'
    ((kind, target),) = spec.items()
    targets = _value(target) if isinstance(target, str) else f"[{', '.join(map(_value, target))}]"
    return f"{{ {kind} = {targets} }}"


def _toml(rows) -> str:
    sections = {"encoder": [], "pooler": []}
    for group, name, spec in rows:
        sections[group].append(f'"{name}" = {_value(spec)}')
    encoder, pooler = ("\n".join(sections[g]) for g in ("encoder", "pooler"))
    head = 'name = "random"\ndescription = "random"\n'
    return f"{head}\n[encoder]\n{encoder}\n\n[groups.pooler]\n{pooler}\n"


def _catalog() -> dict[str, dict]:
    from bertconv import catalog

    tensors = catalog.of("bert").tensors
    return {g: {p: list(d) for p, d in tensors[g].items()} for g in ("encoder", "pooler")}


@settings(
    max_examples=60,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    config=configs(),
    data=st.data(),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
)
def test_a_random_table_round_trips_bit_identically(config, data, dtype):
    text = data.draw(tables(_catalog()))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "random.toml"
        path.write_text(text)
        official = random_tensors(
            config, ["pooler"], seed=data.draw(st.integers(0, 99)), dtype=dtype
        )
        there = convert(official, config, OFFICIAL, str(path)).state_dict
        back = convert(there, config, str(path), OFFICIAL).state_dict
    assert identical(back, official)
