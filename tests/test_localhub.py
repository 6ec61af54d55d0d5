"""The local Hub (localhub.py) against the real huggingface_hub client, over real HTTP.

Also a record of what the client does when downloads go wrong, which is what bertconv has to
cope with. huggingface_hub's resume loop (``file_download.http_get``) has no settings: it
sleeps a hard-coded 1 s between attempts and gives up after 6 attempts in a row that wrote
nothing; bytes only count once a whole ``constants.DOWNLOAD_CHUNK_SIZE`` (10 MiB) chunk
arrived. The ``sleeps`` fixture records those sleeps instead of waiting.
"""

import hashlib
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from localhub import LocalHub, git_blob_sha1, use_hub

WEIGHTS = bytes(range(256)) * 8  # 2048 bytes, LFS by its name
FILES = {
    "config.json": b'{"hidden_size": 32}',
    "model.safetensors": WEIGHTS,
    "tokenizer/vocab.txt": b"[PAD]\n[UNK]\n",
    "README.md": b"# tiny\n",
}


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with LocalHub() as hub:
        use_hub(monkeypatch, hub.url, tmp_path / "hf")
        hub.add_repo("org/tiny", FILES)
        yield hub


@pytest.fixture
def sleeps(monkeypatch):
    """The seconds huggingface_hub's download retries sleep, recorded instead of slept."""
    from huggingface_hub import file_download

    slept = []
    monkeypatch.setattr(file_download, "time", SimpleNamespace(sleep=slept.append))
    return slept


def gets(hub, filename):
    return [r for r in hub.requests if r.method == "GET" and r.path.endswith("/" + filename)]


def fetch(url, **headers):
    """(status, headers, body) of a plain GET, errors included."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def test_model_info(hub):
    from huggingface_hub import HfApi, model_info

    info = HfApi().model_info("org/tiny", files_metadata=True)
    assert info.id == "org/tiny" and info.sha == hub._repos["org/tiny"].refs["main"]
    siblings = {s.rfilename: s for s in info.siblings}
    assert sorted(siblings) == sorted(FILES)
    lfs, regular = siblings["model.safetensors"], siblings["config.json"]
    assert lfs.size == len(WEIGHTS) and lfs.lfs.sha256 == hashlib.sha256(WEIGHTS).hexdigest()
    assert regular.lfs is None and regular.blob_id == git_blob_sha1(FILES["config.json"])
    assert info.private is False and info.gated is False and info.last_modified is not None
    assert model_info("org/tiny").sha == info.sha  # the module-level HfApi is pointed too


def test_snapshot_download_with_allow_patterns(hub):
    from huggingface_hub import snapshot_download

    path = Path(snapshot_download("org/tiny", allow_patterns=["*.json", "tokenizer/*"]))
    got = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()}
    assert got == {"config.json", "tokenizer/vocab.txt"}
    assert all((path / name).read_bytes() == FILES[name] for name in got)
    assert path.name == hub._repos["org/tiny"].refs["main"]
    paths = [r.path for r in hub.requests]
    assert "/api/models/org/tiny/revision/main" in paths  # then the tree at the commit
    assert any(p.startswith("/api/models/org/tiny/tree/") for p in paths)


def test_download_by_branch_tag_and_commit(hub):
    from huggingface_hub import hf_hub_download

    first = hub._repos["org/tiny"].refs["main"]
    hub.tag("org/tiny", "v1", first)
    second = hub.commit("org/tiny", {**FILES, "config.json": b'{"hidden_size": 64}'})
    side = hub.commit("org/tiny", {"config.json": b"{}"}, branch="dev")
    assert len({first, second, side}) == 3
    # same files, same parent (main's head): same sha
    assert hub.commit("org/tiny", FILES, branch="b1") == hub.commit("org/tiny", FILES, "b2")

    def config(revision):
        path = Path(hf_hub_download("org/tiny", "config.json", revision=revision))
        return path.parent.name, path.read_bytes()

    assert config("main") == (second, b'{"hidden_size": 64}')
    assert config("v1") == (first, FILES["config.json"])
    assert config(first) == (first, FILES["config.json"])
    assert config("dev") == (side, b"{}")


@pytest.mark.parametrize(
    "repo, revision, filename, error",
    [
        ("org/nope", None, "config.json", "RepositoryNotFoundError"),
        ("org/tiny", "nope", "config.json", "RevisionNotFoundError"),
        ("org/tiny", None, "nope.json", "RemoteEntryNotFoundError"),
    ],
)
def test_errors_map_to_the_clients_exceptions(hub, repo, revision, filename, error):
    from huggingface_hub import HfApi, errors, hf_hub_download

    with pytest.raises(getattr(errors, error)) as caught:
        hf_hub_download(repo, filename, revision=revision)
    assert type(caught.value) is getattr(errors, error)
    if filename == "nope.json":
        assert isinstance(caught.value, errors.EntryNotFoundError)
    else:
        with pytest.raises(getattr(errors, error)):
            HfApi().model_info(repo, revision=revision)


def test_gated_repo(hub, monkeypatch):
    from huggingface_hub import HfApi, errors, hf_hub_download

    hub.add_repo("org/gated", FILES, gated_token="hf_right")
    assert HfApi().model_info("org/gated").gated == "auto"  # the info is public, as on the Hub
    with pytest.raises(errors.GatedRepoError, match="401") as caught:
        hf_hub_download("org/gated", "config.json")
    assert "must have access to it and be authenticated" in str(caught.value)
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(errors.GatedRepoError, match="403"):
        hf_hub_download("org/gated", "config.json")
    monkeypatch.setenv("HF_TOKEN", "hf_right")
    assert Path(hf_hub_download("org/gated", "config.json")).read_bytes() == FILES["config.json"]
    assert gets(hub, "config.json")[-1].headers["Authorization"] == "Bearer hf_right"


def test_headers_and_ranges(hub):
    url = hub.url + "/org/tiny/resolve/main/"
    request = urllib.request.Request(url + "model.safetensors", method="HEAD")
    with urllib.request.urlopen(request) as head:
        pass
    sha256 = hashlib.sha256(WEIGHTS).hexdigest()
    assert head.headers["ETag"] == head.headers["X-Linked-Etag"] == f'"{sha256}"'
    assert head.headers["X-Linked-Size"] == head.headers["Content-Length"] == str(len(WEIGHTS))
    assert head.headers["X-Repo-Commit"] == hub._repos["org/tiny"].refs["main"]
    assert not [h for h in head.headers if h.lower().startswith("x-xet")]
    status, headers, body = fetch(url + "config.json")
    assert headers["ETag"] == f'"{git_blob_sha1(FILES["config.json"])}"'
    assert "X-Linked-Etag" not in headers and body == FILES["config.json"]

    status, headers, body = fetch(url + "model.safetensors", Range="bytes=100-199")
    assert (status, headers["Content-Range"], body) == (206, "bytes 100-199/2048", WEIGHTS[100:200])
    assert fetch(url + "model.safetensors", Range="bytes=2000-")[2] == WEIGHTS[2000:]
    assert fetch(url + "model.safetensors", Range="bytes=-48")[2] == WEIGHTS[-48:]
    status, headers, _ = fetch(url + "model.safetensors", Range="bytes=5000-")
    assert (status, headers["Content-Range"]) == (416, "bytes */2048")

    status, headers, _ = fetch(url + "nope.json")
    assert (status, headers["X-Error-Code"]) == (404, "EntryNotFound")
    assert fetch(hub.url + "/api/models/org/nope")[1]["X-Error-Code"] == "RepoNotFound"
    tree = fetch(hub.url + "/api/models/org/tiny/tree/main")[2]
    assert b'"tokenizer"' in tree and b"vocab.txt" not in tree  # not recursive: the folder
    assert [r.status for r in hub.requests][-2:] == [404, 200]


def test_cut_once_the_client_downloads_again(hub, sleeps):
    """Less than a 10 MiB chunk arrived: nothing is kept, the retry asks for the whole file."""
    from huggingface_hub import hf_hub_download

    hub.fault("cut", "model.safetensors", times=1)
    assert Path(hf_hub_download("org/tiny", "model.safetensors")).read_bytes() == WEIGHTS
    assert [(r.status, r.headers["Range"]) for r in gets(hub, "model.safetensors")] == [
        (200, None),
        (200, None),
    ]
    assert sleeps == [1]


def test_cut_once_the_client_resumes_after_whole_chunks(hub, sleeps, monkeypatch):
    from huggingface_hub import constants, hf_hub_download

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 256)  # 10 MiB by default
    hub.fault("cut", "model.safetensors", times=1)
    assert Path(hf_hub_download("org/tiny", "model.safetensors")).read_bytes() == WEIGHTS
    second = gets(hub, "model.safetensors")[1]
    assert (second.status, second.headers["Range"]) == (206, "bytes=1024-")
    assert sleeps == [1]


def test_cut_every_time_the_client_gives_up_after_six_attempts(hub, sleeps, tmp_path):
    """Unpatched, this takes 5 s (the sleeps) and raises httpx2.RemoteProtocolError (httpx's
    under huggingface_hub 1.x), a TransportError, not a huggingface_hub error."""
    from huggingface_hub import hf_hub_download

    hub.fault("cut", "model.safetensors")
    with pytest.raises(Exception, match="received 1024 bytes, expected 2048") as caught:
        hf_hub_download("org/tiny", "model.safetensors")
    assert type(caught.value).__name__ == "RemoteProtocolError"
    assert type(caught.value).__module__.split(".")[0] in ("httpx", "httpx2")
    assert len(gets(hub, "model.safetensors")) == 6 and sleeps == [1] * 5
    cache = tmp_path / "hf" / "hub" / "models--org--tiny"
    assert not list(cache.glob("blobs/*")) and not list(cache.glob("snapshots/*/*"))


def test_corrupt_bytes_are_accepted_silently(hub):
    """The client checks the size only: a wrong body of the right size lands in the cache,
    under the blob name of the true sha256. This is the gap bertconv fills."""
    from huggingface_hub import hf_hub_download

    hub.fault("corrupt", "model.safetensors", times=1)
    path = Path(hf_hub_download("org/tiny", "model.safetensors"))
    data = path.read_bytes()
    assert len(data) == len(WEIGHTS) and data != WEIGHTS
    blob = path.resolve().name
    assert blob == hashlib.sha256(WEIGHTS).hexdigest() != hashlib.sha256(data).hexdigest()
    assert Path(hf_hub_download("org/tiny", "model.safetensors")).read_bytes() == data  # cached


def test_slow_body_times_out_and_is_fetched_again(hub, sleeps, monkeypatch):
    from huggingface_hub import constants, hf_hub_download

    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 0.2)  # HF_HUB_DOWNLOAD_TIMEOUT=10
    hub.fault("slow", "model.safetensors", times=1, delay=1.0)
    start = time.monotonic()
    assert Path(hf_hub_download("org/tiny", "model.safetensors")).read_bytes() == WEIGHTS
    assert time.monotonic() - start < 1.0 and sleeps == [1]


def test_faults_count_down_and_clear(hub):
    url = hub.url + "/org/tiny/resolve/main/config.json"
    hub.fault("corrupt", "config.json", times=2)
    assert [fetch(url)[2] == FILES["config.json"] for _ in range(3)] == [False, False, True]
    hub.fault("corrupt", "config.json")
    hub.clear_faults()
    assert fetch(url)[2] == FILES["config.json"]
    with pytest.raises(ValueError):
        hub.fault("explode", "config.json")


def test_command_line(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "config.json").write_bytes(b"{}")
    (tmp_path / "sub" / "vocab.txt").write_bytes(b"a\n")
    script = Path(__file__).with_name("localhub.py")
    command = [sys.executable, script, "--repo", f"org/demo={tmp_path}"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        try:
            line = p.stdout.readline()
            assert line.startswith("serving http://127.0.0.1:")
            assert fetch(line.split()[1] + "/org/demo/resolve/main/sub/vocab.txt")[2] == b"a\n"
        finally:
            p.terminate()
        assert p.wait(5) == 0 and p.stdout.read() == "" and p.stderr.read() == ""
