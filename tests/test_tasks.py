"""Every BERT class transformers writes: written by transformers in every form real
checkpoints come in, read, converted into every layout that can hold it, loaded into bertconv's
class for it, and verified against transformers' class with every head's outputs compared."""

import json

import pytest
from safetensors.torch import load_file

import bertconv
from bertconv.api import Source, convert_checkpoint, inspect
from bertconv.catalog import of
from bertconv.errors import CheckpointError
from bertconv.mapping import layout
from bertconv.tables import layout_names, refusal
from bertconv.verify import FLOAT32_MAX_ABS, verify
from conftest import FORMS, TASKS, TINY

LABELS = ("num_labels", "id2label", "label2id", "problem_type")


def class_of(task: str) -> str:
    return TASKS[task][0]


def has_pooler(task: str) -> bool:
    if class_of(task) == "BertModel":
        return TASKS[task][2].get("add_pooling_layer", True)
    return "pooler" in of("bert").groups_of(class_of(task))


def head_rows(model_class: str) -> list[str]:
    return [row for row, _, _ in of("bert").classes[model_class].outputs]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("task", TASKS)
def test_every_form_of_every_class_verifies_against_transformers(task, form, tasks):
    report = verify(str(tasks[task, form]), "cpu")
    assert report.model_class == class_of(task)
    names = [row.name for row in report.rows]
    layers = [f"layer {i}" for i in range(1, TINY["num_hidden_layers"] + 1)]
    pooler = ["pooler"] if has_pooler(task) else []
    assert names == ["embeddings", *layers, *pooler, *head_rows(class_of(task))]
    assert report.passed and all(row.max_abs <= FLOAT32_MAX_ABS for row in report.rows)


def convert(path, out, to="bertconv", heads=None):
    return convert_checkpoint(Source(str(path), path), out, to, None, heads)


@pytest.mark.parametrize("task", TASKS)
def test_every_form_converts_into_the_same_tensors(task, tasks, tmp_path):
    files = {}
    for form in FORMS:
        convert(tasks[task, form], tmp_path / form)
        files[form] = load_file(tmp_path / form / "model.safetensors")
    first = files[FORMS[0]]
    for form in FORMS[1:]:
        assert files[form].keys() == first.keys(), form
        assert all((files[form][k] == first[k]).all() for k in first), form


def holds(layout_name: str, task: str) -> bool:
    """Does the layout have a place for the class (and its model all it needs)?"""
    table = layout(layout_name, bertconv.BertConfig(**TINY))
    return table.requires <= ({"pooler"} if has_pooler(task) else set())


# Every layout bertconv writes (it reads tf_model.h5 but does not write it, and never converts
# into a layout it recognises only).
WRITTEN = [
    n
    for n in layout_names()
    if layout(n, bertconv.BertConfig(**TINY)).format != "h5" and not refusal(n)
]
PLACES = [(t, n) for n in WRITTEN for t in TASKS if holds(n, t)]


@pytest.mark.parametrize("task, to", PLACES)
def test_converted_into_each_layout_it_loads_verifies_and_keeps_its_labels(
    task, to, tasks, tmp_path
):
    src = tasks[task, "safetensors"]
    result = convert(src, tmp_path, to).conversion
    expected = class_of(task) if to != "minbert" else "BertModel"
    assert result.model_class == expected
    if to == "minbert":
        assert set(result.dropped) == set(of("bert").groups_of(class_of(task))) - {"pooler"}
    report = verify(str(tmp_path), "cpu")
    assert report.passed and report.model_class == expected
    assert set(head_rows(expected)) <= {row.name for row in report.rows}
    model = bertconv.load(tmp_path)
    assert type(model).__name__ == expected and not model.training
    source_config = json.loads((src / "config.json").read_text())
    config = "bert_config.json" if to == "google-tf" else "config.json"
    written = json.loads((tmp_path / config).read_text())
    assert {k: written.get(k) for k in LABELS} == {k: source_config.get(k) for k in LABELS}
    assert written["architectures"] == [expected]


@pytest.mark.parametrize("task", [t for t in TASKS if not holds("minbert", t)])
def test_a_class_without_a_pooler_cannot_go_into_minbert(task, tasks, tmp_path):
    with pytest.raises(CheckpointError, match="cannot do without the pooler"):
        convert(tasks[task, "safetensors"], tmp_path, "minbert")
    assert not tmp_path.joinpath("model.safetensors").exists()


@pytest.mark.parametrize("task", TASKS)
def test_load_gives_the_class_and_heads_narrow_it(task, tasks):
    path = tasks[task, "legacy"]
    assert type(bertconv.load(path)).__name__ == class_of(task)
    narrowed = bertconv.load(path, heads=False)
    assert type(narrowed).__name__ == "BertModel"
    assert (narrowed.pooler is not None) == has_pooler(task)


@pytest.mark.parametrize("task", TASKS)
def test_inspect_names_the_class_groups_and_nothing_unplaced(task, tasks):
    found = inspect(tasks[task, "legacy"])
    assert found.layout == "transformers" and found.layout_found == "by its names"
    assert found.model_class == class_of(task) and not found.unplaced and not found.problems
    groups = set(of("bert").groups_of(class_of(task))) | ({"pooler"} if has_pooler(task) else set())
    assert set(found.groups) == groups


def test_inspect_finds_the_layout_by_its_names_and_lists_what_it_cannot_place(tasks, tmp_path):
    convert(tasks["BertModel", "safetensors"], tmp_path / "mb", "minbert")
    from safetensors.torch import save_file

    tensors = load_file(tmp_path / "mb" / "model.safetensors")
    tensors["extra.weight"] = tensors["pooler_dense.bias"].clone()
    save_file(tensors, tmp_path / "mb" / "model.safetensors")  # no metadata: found by its names
    found = inspect(tmp_path / "mb")
    assert (found.layout, found.layout_found) == ("minbert", "by its names")
    assert found.unplaced == ["extra.weight"] and "extra.weight" in found.problems


def test_inspect_on_the_command_line(tasks, cli):
    code, out, err = cli("inspect", tasks["BertForTokenClassification", "bin"])
    assert code == 0, err
    assert "BertForTokenClassification (groups: token_classifier)" in out and "5 labels" in out
    code, out, _ = cli("inspect", tasks["BertForQuestionAnswering", "safetensors"], "--json")
    assert code == 0 and json.loads(out)["groups"] == ["qa"]


def test_groups_and_heads_on_the_command_line(tasks, cli, tmp_path):
    src = tasks["BertForPreTraining", "safetensors"]
    code, _, err = cli("convert", src, "--groups", "pooler,mlm", "--out", tmp_path / "a")
    assert code == 0 and "left out the nsp group: as asked" in err
    assert "(BertForMaskedLM: mlm, pooler)" in err
    code, _, err = cli("convert", src, "--to", "minbert", "--heads", "--out", tmp_path / "b")
    assert code == 4 and "'minbert' layout has no place for mlm, nsp" in err
    code, _, err = cli("convert", src, "--groups", "qa", "--out", tmp_path / "c")
    assert code == 4 and "has no ['qa']" in err
    code, _, err = cli("convert", src, "--groups", "mlm", "--no-heads", "--out", tmp_path / "d")
    assert code == 2 and "leave out --heads/--no-heads" in err
