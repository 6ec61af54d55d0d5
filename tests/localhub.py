"""A local Hugging Face Hub on 127.0.0.1 for tests: a TEST UTILITY, standard library only.

It imitates the part of huggingface.co that huggingface_hub's downloads use, closely enough
for the real client (``HfApi().model_info``, ``snapshot_download``, ``hf_hub_download``) to
work against it over real HTTP (see ``use_hub``):

* ``HEAD|GET /{repo}/resolve/{revision}/{path}``: the file, with ``X-Repo-Commit``, a quoted
  ``ETag`` (git blob sha1; for LFS files their sha256, plus ``X-Linked-Etag``/``X-Linked-Size``)
  and ``Range`` -> 206 + ``Content-Range`` (416 when unsatisfiable).
* ``GET /api/models/{repo}[/revision/{revision}][?blobs=true]``: model info.
* ``GET /api/models/{repo}/tree/{revision}[/{path}][?recursive=true]``: the tree listing.
* Errors with the Hub's ``X-Error-Code``: RepoNotFound, RevisionNotFound, EntryNotFound (404),
  GatedRepo (401 without a token, 403 with a wrong one); ``X-Error-Message``, JSON body.

A revision is a branch, a tag or a full commit sha (percent-encoded, ``refs%2Fpr%2F1`` works
once there is such a branch). As on the Hub, a gated repo's info and tree are public; only
``/resolve/`` wants the token. Model repos only; never Xet (no ``X-Xet-*`` headers), no CDN
redirect: LFS files are served directly. ``LocalHub.fault`` makes a file's GETs misbehave.

Demo: ``python tests/localhub.py --repo ORG/NAME=DIR [--repo ...] [--port 0]`` prints
``serving http://127.0.0.1:PORT`` and serves until SIGTERM/SIGINT.
"""

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".onnx", ".ot")
LFS_THRESHOLD = 10 * 1024 * 1024
FAULTS = ("cut", "corrupt", "slow")
Files = dict[str, bytes | Path] | Path  # name -> content (or a file to read), or a directory
_INVERT = bytes(255 - i for i in range(256))
DATE = "%Y-%m-%dT%H:%M:%S.000Z"  # the Hub's, which huggingface_hub parses
_JSON = "application/json; charset=utf-8"
_INFO = {"private": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [], "spaces": []}
_CLEARED = "HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_HUB_CACHE"


def use_hub(monkeypatch, url: str, home: str | os.PathLike) -> None:
    """Point huggingface_hub at ``url``, its cache and token file under ``home``, no HF_TOKEN.

    Setting the environment is not enough once huggingface_hub is imported: it copies
    HF_ENDPOINT, HF_HOME, the cache and token paths, HF_HUB_OFFLINE, HF_HUB_DISABLE_XET, the
    timeouts... into ``huggingface_hub.constants`` at import, and the ``HfApi`` behind
    ``huggingface_hub.model_info`` & co. keeps the endpoint it was built with. So this sets
    the variables (for subprocesses) and patches those copies. HF_TOKEN is read at each call.
    """
    home = str(home)
    for name in _CLEARED.split():
        monkeypatch.delenv(name, raising=False)
    for name, value in {"HF_ENDPOINT": url, "HF_HOME": home, "HF_HUB_DISABLE_XET": "1"}.items():
        monkeypatch.setenv(name, value)
    from huggingface_hub import constants, hf_api

    patches = {
        "ENDPOINT": url,
        "HUGGINGFACE_CO_URL_TEMPLATE": url + "/{repo_id}/resolve/{revision}/{filename}",
        "HF_HOME": home,
        "HF_HUB_CACHE": os.path.join(home, "hub"),
        "HF_ASSETS_CACHE": os.path.join(home, "assets"),
        "HF_TOKEN_PATH": os.path.join(home, "token"),
        "HF_STORED_TOKENS_PATH": os.path.join(home, "stored_tokens"),
        "HF_HUB_OFFLINE": False,
        "HF_HUB_DISABLE_XET": True,
    }
    for name, value in patches.items():
        monkeypatch.setattr(constants, name, value, raising=False)
    monkeypatch.setattr(hf_api.api, "endpoint", url)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class File:
    """A file's content and the ids the Hub gives it."""

    def __init__(self, name: str, data: bytes):
        self.data, self.size = data, len(data)
        self.lfs = name.endswith(LFS_SUFFIXES) or self.size > LFS_THRESHOLD
        self.sha256 = hashlib.sha256(data).hexdigest()
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\n"
        self.pointer = (pointer + f"size {self.size}\n").encode()
        self.oid = git_blob_sha1(self.pointer if self.lfs else data)  # git's id: the pointer's
        self.etag = self.sha256 if self.lfs else self.oid

    def lfs_info(self, oid_key: str) -> dict:
        return {oid_key: self.sha256, "size": self.size, "pointerSize": len(self.pointer)}


@dataclass
class Commit:
    sha: str
    files: dict[str, File]  # path in the repo -> file
    date: str


@dataclass
class Repo:
    gated_token: str | None
    created: str
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit sha
    commits: dict[str, Commit] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str  # as sent (percent-encoding kept), without the query
    query: dict[str, str]
    headers: Message  # case-insensitive: headers["Range"], headers.get("authorization")
    status: int | None = None  # None until the status line is sent


class HubError(Exception):
    """An error answer: status, X-Error-Code (None: none sent), X-Error-Message, more headers."""

    def __init__(self, status: int, code: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers or {}


def _load(files: Files) -> dict[str, File]:
    if isinstance(files, str | os.PathLike):
        root = Path(files)
        files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    return {
        name: File(name, data if isinstance(data, bytes) else Path(data).read_bytes())
        for name, data in sorted(files.items())
    }


def _byte_range(spec: str, size: int) -> tuple[int, int] | None:
    """[start, end) of one ``bytes=`` range; None: no usable range (ignored, as RFC 9110 allows)."""
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", spec)
    if not m or m.groups() == ("", ""):
        return None
    first, last = m.groups()
    if first:
        start, end = int(first), min(int(last) + 1, size) if last else size
    else:
        start, end = max(size - int(last), 0), size
    if start >= end:
        raise HubError(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
    return start, end


class LocalHub:
    """Context manager: a ThreadingHTTPServer on 127.0.0.1 (port 0: any free), daemon thread."""

    def __init__(self, port: int = 0):
        self.requests: list[Request] = []  # every request, in order of arrival
        self._repos: dict[str, Repo] = {}
        self._faults: dict[str, list] = {}  # filename -> [kind, times left or None, delay]
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self._server.hub = self
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "LocalHub":
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:  # idle keep-alive connections: end their threads
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def add_repo(self, repo_id: str, files: Files, *, gated_token: str | None = None) -> str:
        """Create the repo with a first commit on 'main', whose sha it returns. ``files``: a
        directory (all its files, subfolders too) or name -> content. With ``gated_token``,
        downloads without ``Authorization: Bearer <gated_token>`` get the gated-repo error."""
        if repo_id in self._repos:
            raise ValueError(f"{repo_id} exists")
        self._repos[repo_id] = Repo(gated_token, datetime.now(UTC).strftime(DATE))
        return self.commit(repo_id, files)

    def commit(self, repo_id: str, files: Files, branch: str = "main") -> str:
        """A commit on ``branch`` (a new one starts from main) holding exactly ``files``.
        Its sha is sha1 over the names, contents and parent: deterministic."""
        repo, loaded = self._repos[repo_id], _load(files)
        h = hashlib.sha1(f"parent {repo.refs.get(branch) or repo.refs.get('main')}\n".encode())
        for name, f in loaded.items():
            h.update(f"{name}\0{f.etag}\n".encode())
        commit = Commit(h.hexdigest(), loaded, datetime.now(UTC).strftime(DATE))
        repo.commits[commit.sha] = commit
        repo.refs[branch] = commit.sha
        return commit.sha

    def tag(self, repo_id: str, tag: str, commit: str) -> None:
        """Tag ``commit`` (a sha, or a branch or tag name)."""
        repo = self._repos[repo_id]
        repo.refs[tag] = self._resolve(repo, commit).sha

    def fault(self, kind: str, filename: str, times: int | None = None, *, delay: float = 1.0):
        """Misbehave on GETs of ``filename`` (a path in the repo, or a base name; any repo).

        'cut': full headers (Content-Length of the whole file or range), half the body, then
        the connection is closed. 'corrupt': the right size, wrong bytes (the ETag is still the
        true one). 'slow': half the body, a pause of ``delay`` seconds, the rest.
        ``times``: None, every time; N, the next N GETs only."""
        if kind not in FAULTS or (times is not None and times < 1):
            raise ValueError(f"fault({kind!r}, times={times!r})")
        with self._lock:
            self._faults[filename] = [kind, times, delay]

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, path: str) -> tuple[str, float] | None:
        with self._lock:
            name = path if path in self._faults else path.rsplit("/", 1)[-1]
            entry = self._faults.get(name)
            if entry and entry[1] is not None:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._faults[name]
            return (entry[0], entry[2]) if entry else None

    def _resolve(self, repo: Repo, rev: str) -> Commit:
        sha = repo.refs.get(rev, rev)
        if sha not in repo.commits:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return repo.commits[sha]

    def _repo(self, segments: list[str]) -> tuple[str, Repo, list[str]]:
        """The repo the first two (or one) path segments name, and the segments after it."""
        for n in (2, 1):
            repo_id = unquote("/".join(segments[:n]))
            if repo_id in self._repos:
                return repo_id, self._repos[repo_id], segments[n:]
        raise HubError(404, "RepoNotFound", "Repository not found")

    def _info(self, repo_id: str, repo: Repo, commit: Commit, blobs: bool) -> dict:
        siblings = []
        for name, f in commit.files.items():
            siblings.append({"rfilename": name})
            if blobs:
                siblings[-1] |= {"size": f.size, "blobId": f.oid}
                siblings[-1] |= {"lfs": f.lfs_info("sha256")} if f.lfs else {}
        info = {"id": repo_id, "modelId": repo_id, "sha": commit.sha, "siblings": siblings}
        info |= {"lastModified": commit.date, "createdAt": repo.created, **_INFO}
        info["author"] = repo_id.split("/")[0] if "/" in repo_id else None
        return info | {"gated": "auto" if repo.gated_token else False}

    def _tree(self, commit: Commit, path: str, recursive: bool) -> list[dict]:
        prefix = path.strip("/") + "/" if path.strip("/") else ""
        entries: dict[str, dict] = {}
        for name, f in commit.files.items():
            parts = name[len(prefix) :].split("/") if name.startswith(prefix) else []
            for i in range(1, len(parts) if recursive else min(len(parts), 2)):
                d = prefix + "/".join(parts[:i])
                oid = hashlib.sha1(f"{commit.sha}:{d}".encode()).hexdigest()
                entries.setdefault(d, {"type": "directory", "oid": oid, "size": 0, "path": d})
            if parts and (recursive or len(parts) == 1):
                entries[name] = {"type": "file", "oid": f.oid, "size": f.size, "path": name}
                entries[name] |= {"lfs": f.lfs_info("oid")} if f.lfs else {}
        if prefix and not entries:
            raise HubError(404, "EntryNotFound", f'{path} does not exist on "{commit.sha}"')
        return list(entries.values())

    def _answer(self, handler: "_Handler", segments: list[str], query: dict[str, str]) -> None:
        flag = {k: v.lower() in ("1", "true") for k, v in query.items()}
        if segments[:2] == ["api", "models"]:
            repo_id, repo, rest = self._repo(segments[2:])
            if not rest or (rest[0] == "revision" and len(rest) == 2):
                commit = self._resolve(repo, unquote(rest[1]) if rest else "main")
                info = self._info(repo_id, repo, commit, flag.get("blobs", False))
                return handler.send(200, {"Content-Type": _JSON}, json.dumps(info).encode())
            if rest[0] == "tree" and len(rest) >= 2:
                commit = self._resolve(repo, unquote(rest[1]))
                tree = self._tree(commit, unquote("/".join(rest[2:])), flag.get("recursive", False))
                return handler.send(200, {"Content-Type": _JSON}, json.dumps(tree).encode())
        elif "resolve" in segments[1:3]:
            at = segments.index("resolve", 1)
            repo_id, repo, _ = self._repo(segments[:at])
            auth = handler.headers.get("Authorization")
            if repo.gated_token and auth != f"Bearer {repo.gated_token}":
                msg = f"Access to model {repo_id} is restricted"
                if auth is None:
                    msg += ". You must have access to it and be authenticated to access it."
                    raise HubError(401, "GatedRepo", msg + " Please log in.")
                msg += f" and you are not in the authorized list. Visit {self.url}/{repo_id}"
                raise HubError(403, "GatedRepo", msg + " to ask for access.")
            revision, _, path = "/".join(segments[at + 1 :]).partition("/")
            return self._send_file(handler, self._resolve(repo, unquote(revision)), unquote(path))
        raise HubError(404, None, "Not Found")

    def _send_file(self, handler: "_Handler", commit: Commit, path: str) -> None:
        f = commit.files.get(path)
        if f is None:
            raise HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit.sha})
        headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"}
        headers["Content-Type"] = "application/octet-stream"
        if f.lfs:
            headers |= {"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)}
        status, (start, end) = 200, (0, f.size)
        if span := _byte_range(handler.headers.get("Range", ""), f.size):
            status, (start, end) = 206, span
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        fault = self._take_fault(path) if handler.command == "GET" else None
        handler.send(status, headers, f.data[start:end], fault)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the Hub
    server_version = "localhub"

    def setup(self):
        super().setup()
        with self.server.hub._lock:
            self.server.hub._conns.add(self.connection)

    def handle(self):  # quiet about clients that went away
        with contextlib.suppress(OSError):
            super().handle()

    def finish(self):
        with self.server.hub._lock:
            self.server.hub._conns.discard(self.connection)
        super().finish()

    def log_message(self, format, *args):  # quiet
        pass

    def log_request(self, code="-", size="-"):  # called by send_response
        self.record.status = int(code)

    def do_GET(self):
        hub, url = self.server.hub, urlsplit(self.path)
        self.record = Request(self.command, url.path, dict(parse_qsl(url.query)), self.headers)
        hub.requests.append(self.record)
        try:
            hub._answer(self, url.path.lstrip("/").split("/"), self.record.query)
        except HubError as e:
            headers = {"Content-Type": _JSON, **e.headers}
            if e.code:
                headers |= {"X-Error-Code": e.code, "X-Error-Message": e.message}
            self.send(e.status, headers, json.dumps({"error": e.message}).encode())
        except OSError:  # the client went away
            self.close_connection = True

    do_HEAD = do_GET

    def send(self, status: int, headers: dict, body: bytes, fault=None) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        kind, delay = fault or (None, 0)
        if kind == "corrupt":
            body = body.translate(_INVERT)
        elif kind in ("cut", "slow"):
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if kind == "cut":
                self.close_connection = True
                return
            time.sleep(delay)
            body = body[len(body) // 2 :]
        self.wfile.write(body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve directories as a local Hugging Face Hub.")
    parser.add_argument("--repo", action="append", required=True, metavar="ORG/NAME=DIR")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    hub = LocalHub(args.port)
    for spec in args.repo:
        repo_id, sep, directory = spec.partition("=")
        if not sep or not Path(directory).is_dir():
            parser.error(f"--repo {spec!r}: expected ORG/NAME=DIR with an existing DIR")
        hub.add_repo(repo_id, Path(directory))
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before the server thread starts
    with hub:
        print(f"serving {hub.url}", flush=True)
        signal.sigwait(stop)


if __name__ == "__main__":
    main()
