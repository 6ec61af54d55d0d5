"""`bertconv fetch` end to end: the real huggingface_hub client over real HTTP against the local
Hub (localhub.py), in a fresh process as a user runs it, with each fault the issue names."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from bertconv.checkpoint import LAYOUT_KEY, REVISION_KEY, SOURCE_KEY
from localhub import LocalHub

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
TOKEN = "hf_secret_token_for_tests"


CLI = [sys.executable, "-c", "from bertconv.cli import main; main()"]  # the console script


def bertconv(*args, env: dict, cwd=None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        **kwargs,
    )


def hub_env(url: str, home: Path, **extra) -> dict:
    """A user's environment pointed at the local Hub, with its own cache and no token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    return env | {"HF_ENDPOINT": url, "HF_HOME": str(home), "HF_HUB_DISABLE_XET": "1"} | extra


def metadata(out: Path) -> dict:
    with safe_open(out / "model.safetensors", "pt") as f:
        return f.metadata()


def gets(hub, name: str) -> int:
    """How many times the Hub was asked for the bytes of `name`."""
    return sum(r.method == "GET" and r.path.endswith("/" + name) for r in hub.requests)


@pytest.fixture
def hub(checkpoints, minilm, tmp_path):
    with LocalHub() as hub:
        hub.add_repo(MINILM, minilm)
        hub.add_repo("org/tiny", checkpoints["pretraining"])
        yield hub


@pytest.fixture
def env(hub, tmp_path) -> dict:
    return hub_env(hub.url, tmp_path / "hf")


def test_fetch_the_real_checkpoint_converts_and_records_the_commit(hub, env, tmp_path, minilm):
    out = tmp_path / "out"
    done = bertconv("fetch", MINILM, "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    commit = metadata(out)[REVISION_KEY]
    assert f"fetched {MINILM} at commit {commit}" in done.stderr and len(commit) == 40
    assert metadata(out)[SOURCE_KEY] == MINILM and metadata(out)[LAYOUT_KEY] == "bertconv"
    assert done.stdout.strip() == str(out)
    # the tokenizer and sentence-transformers' files came with the weights; nothing else
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json"} <= names
    assert {"modules.json", "sentence_bert_config.json", "1_Pooling"} <= names
    asked = {
        r.path.split("/resolve/", 1)[-1].split("/", 1)[-1]
        for r in hub.requests
        if r.method == "GET" and "/resolve/" in r.path
    }
    assert "README.md" not in asked and "data_config.json" not in asked
    assert {"modules.json", "1_Pooling/config.json"} <= asked
    assert (out / "1_Pooling/config.json").read_bytes() == (
        minilm / "1_Pooling/config.json"
    ).read_bytes()
    weights = load_file(out / "model.safetensors")
    official = load_file(minilm / "model.safetensors")
    assert torch.equal(
        weights["encoder.layer.5.attention.self.Wv.weight"],
        official["encoder.layer.5.attention.self.value.weight"],
    )


def test_a_second_fetch_does_no_work_and_says_so(hub, env, tmp_path):
    out = tmp_path / "out"
    assert bertconv("fetch", "org/tiny", "--out", str(out), env=env).returncode == 0
    before = (out / "model.safetensors").stat().st_mtime_ns
    downloads = len(hub.requests)
    again = bertconv("fetch", "org/tiny", "--out", str(out), env=env)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stderr
    assert (out / "model.safetensors").stat().st_mtime_ns == before
    new = hub.requests[downloads:]
    assert [r.path for r in new if "/resolve/" in r.path] == []  # asked only which commit main is


@pytest.mark.parametrize("lost", ["vocab.txt", "config.json", "changed"])
def test_a_second_fetch_into_an_output_that_lost_a_file_restores_it(lost, hub, env, tmp_path):
    """Up to date only where every file the output records is there as recorded: one lost
    (or changed since) is written again, not "nothing to do"."""
    out = tmp_path / "out"
    assert bertconv("fetch", "org/tiny", "--out", str(out), env=env).returncode == 0
    if lost == "changed":
        (out / "vocab.txt").write_text((out / "vocab.txt").read_text() + "extra\n")
    else:
        (out / lost).unlink()
    again = bertconv("fetch", "org/tiny", "--out", str(out), env=env)
    if lost == "changed":  # the user's now: refused, never replaced
        assert again.returncode == 7 and "vocab.txt" in again.stderr, again.stderr
        return
    assert again.returncode == 0 and "nothing to do" not in again.stderr, again.stderr
    assert (out / lost).is_file()


@pytest.mark.parametrize("to", ["bertconv", "google-tf"])
def test_fetch_into_a_folder_of_the_users_refuses_before_downloading(to, hub, env, tmp_path):
    """`fetch --out .` in a folder holding the user's own tokenizer (and files bertconv never
    writes): refused by name, before a byte of weights is downloaded; every file as it was."""
    mine = tmp_path / "mine"
    mine.mkdir()
    own = {"vocab.json": '{"hello": 0}', "merges.txt": "#version: 0.2\n", "README.md": "# me\n"}
    own |= {"tokenizer.json": '{"model": {"type": "BPE"}}', "train.py": "print()\n"}
    for name, text in own.items():
        (mine / name).write_text(text)
    done = bertconv("fetch", "org/tiny", "--to", to, "--out", ".", env=env, cwd=mine)
    assert done.returncode == 7, done.stderr
    assert f"{mine}: holds files this conversion would replace or remove" in done.stderr
    for name in ("vocab.json", "merges.txt", "tokenizer.json"):
        assert f"{name} (not bertconv's)" in done.stderr, done.stderr
    assert {p.name: p.read_text() for p in mine.iterdir()} == own
    assert gets(hub, "model.safetensors") == 0


@pytest.mark.parametrize("which", ["branch", "tag", "commit"])
def test_revision_by_branch_tag_or_commit(which, hub, env, tmp_path, checkpoints):
    first = hub.commit("org/tiny", checkpoints["legacy"], branch="old")
    hub.tag("org/tiny", "v1", first)
    revision = {"branch": "old", "tag": "v1", "commit": first}[which]
    out = tmp_path / "out"
    done = bertconv("fetch", "org/tiny", "--revision", revision, "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert metadata(out)[REVISION_KEY] == first and f"at commit {first}" in done.stderr


def test_safetensors_preferred_bin_when_alone_and_shards(hub, env, tmp_path, checkpoints):
    both = {**{p.name: p for p in checkpoints["pretraining"].iterdir()}}
    both["pytorch_model.bin"] = checkpoints["legacy-bin"] / "pytorch_model.bin"
    hub.add_repo("org/both", both)
    hub.add_repo("org/bin", checkpoints["legacy-bin"])
    hub.add_repo("org/sharded", checkpoints["sharded"])
    for repo in ("org/both", "org/bin", "org/sharded"):
        done = bertconv("fetch", repo, "--out", str(tmp_path / repo), env=env)
        assert done.returncode == 0, (repo, done.stderr)
    assert gets(hub, "pytorch_model.bin") == 1  # org/bin's only
    assert gets(hub, "model.safetensors.index.json") == 1
    assert (
        sum(
            r.method == "GET" and "/org/sharded/" in r.path and "-of-" in r.path
            for r in hub.requests
        )
        == 5
    )
    a, b = (load_file(tmp_path / r / "model.safetensors") for r in ("org/both", "org/sharded"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_gated_repo_needs_a_token(hub, env, tmp_path, checkpoints):
    hub.add_repo("org/gated", checkpoints["base"], gated_token=TOKEN)
    denied = bertconv("fetch", "org/gated", "--out", str(tmp_path / "a"), env=env)
    assert denied.returncode == 8
    assert (
        "gated" in denied.stderr
        and "hf auth login" in denied.stderr
        and "HF_TOKEN" in denied.stderr
    )
    assert not (tmp_path / "a").exists()
    allowed = bertconv(
        "fetch", "org/gated", "--out", str(tmp_path / "b"), env=env | {"HF_TOKEN": TOKEN}
    )
    assert allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["org/nothing"], 3, "org/nothing: no such model on the Hub"),
        (
            ["org/tiny", "--revision", "v9"],
            3,
            "org/tiny at revision 'v9': no such branch, tag or commit",
        ),
    ],
)
def test_unknown_repo_or_revision(args, code, message, env, tmp_path):
    done = bertconv("fetch", *args, "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == code and message in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["org/.."], "is not a Hub model id"),
        (["../etc"], "is not a Hub model id"),
        (["org--x/tiny"], "is not a Hub model id"),
        (["org/tiny-"], "is not a Hub model id"),
        (["org/tiny", "--revision", "../../../x"], "not a branch, tag or commit name"),
        (["org/tiny", "--revision", "/main"], "not a branch, tag or commit name"),
    ],
)
def test_ids_and_revisions_that_could_be_paths_are_refused(args, message, env, tmp_path):
    done = bertconv("fetch", *args, "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()


def test_a_hub_index_naming_a_path_is_refused_and_nothing_made(hub, env, tmp_path, checkpoints):
    shards = {p.name: p for p in checkpoints["sharded"].iterdir()}
    index = json.loads(shards["model.safetensors.index.json"].read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = "../../../../../etc/passwd"
    shards["model.safetensors.index.json"] = json.dumps(index).encode()
    hub.add_repo("org/sly", shards)
    done = bertconv("fetch", "org/sly", "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 4 and "only plain file names" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_only_top_level_files_are_fetched(hub, env, tmp_path, checkpoints):
    files = {p.name: p for p in checkpoints["pretraining"].iterdir()}
    files["onnx/model.safetensors"] = b"not wanted"
    hub.add_repo("org/nested", files)
    done = bertconv("fetch", "org/nested", "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stderr
    assert gets(hub, "onnx/model.safetensors") == 0


def test_hub_unreachable_without_and_with_a_cached_copy(hub, tmp_path):
    closed = LocalHub()  # a port nothing listens on once it is closed
    closed._server.server_close()
    cache = tmp_path / "hf"
    nowhere = bertconv(
        "fetch", "org/tiny", "--out", str(tmp_path / "a"), env=hub_env(closed.url, cache)
    )
    assert nowhere.returncode == 5
    assert (
        "the Hub cannot be reached" in nowhere.stderr
        and "the cache holds no copy" in nowhere.stderr
    )
    assert (
        bertconv(
            "fetch", "org/tiny", "--out", str(tmp_path / "b"), env=hub_env(hub.url, cache)
        ).returncode
        == 0
    )
    cached = bertconv(
        "fetch", "org/tiny", "--out", str(tmp_path / "c"), env=hub_env(closed.url, cache)
    )
    assert cached.returncode == 0, cached.stderr
    assert (
        "using the cached copy of org/tiny" in cached.stderr
        and "cannot be reached" in cached.stderr
        and "fetched" not in cached.stderr  # one line, true: nothing was fetched
    )
    assert (
        load_file(tmp_path / "c" / "model.safetensors").keys()
        == load_file(tmp_path / "b" / "model.safetensors").keys()
    )


def test_offline_mode_is_served_from_the_cache(hub, env, tmp_path):
    offline = env | {"HF_HUB_OFFLINE": "1"}
    missing = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "a"), env=offline)
    assert missing.returncode == 5 and "HF_HUB_OFFLINE is set" in missing.stderr
    assert bertconv("fetch", "org/tiny", "--out", str(tmp_path / "b"), env=env).returncode == 0
    asked = len(hub.requests)
    served = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "c"), env=offline)
    assert served.returncode == 0, served.stderr
    assert "using the cached copy" in served.stderr and len(hub.requests) == asked


def test_a_download_cut_mid_stream_is_reported_and_resumed_once(hub, env, tmp_path):
    hub.fault("cut", "model.safetensors")  # every time: huggingface_hub gives up after ~5 s
    cut = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "a"), env=env)
    assert cut.returncode == 5, cut.stderr
    assert "the download of model.safetensors broke off" in cut.stderr
    assert "RemoteProtocolError" in cut.stderr and "Run the command again" in cut.stderr
    assert "Traceback" not in cut.stderr and not (tmp_path / "a").exists()
    hub.fault("cut", "model.safetensors", times=1)
    resumed = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "a"), env=env)
    assert resumed.returncode == 0, resumed.stderr


def test_right_size_wrong_bytes_is_caught_and_evicted(hub, env, tmp_path):
    hub.fault("corrupt", "model.safetensors", times=1)
    bad = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "a"), env=env)
    assert bad.returncode == 5
    assert (
        "the download of model.safetensors does not match the ETag" in bad.stderr
        and "sha256" in bad.stderr
    )
    assert not (tmp_path / "a").exists()
    again = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "a"), env=env)  # fault spent
    assert again.returncode == 0, again.stderr


def test_a_cached_file_damaged_on_disk_is_downloaded_again(hub, env, tmp_path):
    assert bertconv("fetch", "org/tiny", "--out", str(tmp_path / "a"), env=env).returncode == 0
    (blob,) = [p for p in (tmp_path / "hf" / "hub").rglob("blobs/*") if p.stat().st_size > 10_000]
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    done = bertconv("fetch", "org/tiny", "--out", str(tmp_path / "b"), env=env)
    assert done.returncode == 0, done.stderr
    assert "the cached copy of model.safetensors is damaged" in done.stderr
    assert blob.read_bytes() != bytes(data)


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b"version https://git-lfs.github.com/spec/v1\noid sha256:4b0c\nsize 440473133\n",
            "Git LFS pointer",
        ),
        (b"<!DOCTYPE html>\n<html><body>Sign in</body></html>\n", "HTML page"),
    ],
)
def test_a_pointer_or_a_page_in_place_of_the_weights(
    content, message, hub, env, tmp_path, checkpoints
):
    files = {"config.json": checkpoints["base"] / "config.json", "model.safetensors": content}
    hub.add_repo("org/broken", files)
    done = bertconv("fetch", "org/broken", "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 4 and message in done.stderr
    assert not (tmp_path / "out").exists()


def test_the_output_disk_full_leaves_nothing_half_written(hub, env, tmp_path):
    """A real full disk: a 4 MB tmpfs, in a mount namespace of its own."""
    out = tmp_path / "small"
    out.mkdir()
    cli = f"{sys.executable} -c 'from bertconv.cli import main; main()'"
    script = f"mount -t tmpfs -o size=4m tmpfs {out} && {cli} fetch {MINILM} --out {out}/x"
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, env=env
    )
    assert done.returncode == 7, done.stderr
    assert "No space left on device" in done.stderr and "nothing in it was changed" in done.stderr


def test_killed_while_writing_leaves_the_old_output_intact(hub, env, tmp_path):
    out = tmp_path / "out"
    assert bertconv("fetch", "org/tiny", "--out", str(out), env=env).returncode == 0
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    for _ in range(5):  # the kill must land while the files are being written aside
        proc = subprocess.Popen(
            [*CLI, "fetch", MINILM, "--out", str(out)], env=env, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while (
            not list(out.glob(".*.partial")) and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        if proc.wait() == -signal.SIGKILL:
            break
        for p in out.iterdir():  # it finished first: put the old output back, try again
            p.unlink()
        for name, data in old.items():
            (out / name).write_bytes(data)
    assert proc.returncode == -signal.SIGKILL
    assert {p.name: p.read_bytes() for p in out.iterdir() if not p.name.endswith(".partial")} == old
    again = bertconv("fetch", MINILM, "--out", str(out), env=env)
    assert again.returncode == 0 and not list(out.glob(".*.partial"))
    assert metadata(out)[SOURCE_KEY] == MINILM


def test_two_fetches_at_once_both_succeed_with_one_result(hub, env, tmp_path):
    out = tmp_path / "out"
    cmd = [*CLI, "fetch", MINILM, "--out", str(out)]
    procs = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p.wait(), p.stderr.read()) for p in procs]
    assert [code for code, _ in results] == [0, 0], results
    assert sum("nothing to do" in err for _, err in results) == 1
    assert sorted(p.name for p in out.iterdir()) == [
        "1_Pooling",
        "config.json",
        "config_sentence_transformers.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    assert gets(hub, "model.safetensors") == 1


def test_a_sentence_transformers_repos_module_folders_come_byte_for_byte(
    hub, env, tmp_path, encoder
):
    """modules.json names the folders: each one's files are fetched (Dense's weights too),
    none of another folder; the output encodes as the repository does."""
    from sentence_transformers import SentenceTransformer

    from bertconv import load
    from st_dirs import written

    src = written(encoder, tmp_path / "st", ("cls", "mean"), torch.nn.Tanh())
    files = {p.relative_to(src).as_posix(): p for p in src.rglob("*") if p.is_file()}
    files["onnx/model.onnx"] = b"not wanted"
    hub.add_repo("org/sentences", files)
    out = tmp_path / "out"
    done = bertconv("fetch", "org/sentences", "--out", str(out), "--to", "minbert", env=env)
    assert done.returncode == 0, done.stderr
    for name in [n for n in files if n.startswith(("1_", "2_", "3_")) or n == "modules.json"]:
        assert (out / name).read_bytes() == (src / name).read_bytes(), name
    assert gets(hub, "onnx/model.onnx") == 0 and (out / "2_Dense/model.safetensors").is_file()
    texts = ["a man is eating food.", "ok"]
    expected = SentenceTransformer(str(src), device="cpu").encode(texts, convert_to_tensor=True)
    assert (load(out).encode(texts) - expected).abs().max() <= 1e-5
