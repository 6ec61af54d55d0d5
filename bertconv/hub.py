"""Downloads from the Hugging Face Hub through huggingface_hub, which honours HF_ENDPOINT, HF_TOKEN,
HF_HOME and HF_HUB_OFFLINE. Only the files conversion needs are fetched, and each is checked
against its ETag, which huggingface_hub itself does not do.

Two steps, so that a caller can stop in between when its output is already up to date:
`locate` resolves a revision to a commit (from the cache when the Hub cannot be reached), and
`download` fetches and checks the files.
"""

import errno
import fnmatch
import hashlib
import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from . import formats, sentence
from .checkpoint import CONFIG_FILES, TOKENIZER_FILES
from .errors import (
    AuthError,
    BertconvError,
    HubError,
    IntegrityError,
    NotFoundError,
    OutputError,
    UsageError,
)

REPO_ID = re.compile(r"^[\w.-]{1,96}(/[\w.-]{1,96})?$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")  # the ETag of a Git LFS file: its content's sha256
GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")  # the ETag of a regular file: its git blob id
CHUNK = 1 << 20


@dataclass
class Remote:
    """A revision of a Hub repository, resolved to a commit, and the files bertconv wants of it."""

    model_id: str
    revision: str  # as asked for: a branch, a tag or a commit
    commit: str
    files: list[str]
    offline: str | None = None  # why the Hub was not asked, where the cache answered instead
    listing: tuple[str, ...] = ()  # every file of the revision: modules' folders are among them


def is_repo_id(text: str) -> bool:
    """`name` or `org/name` as the Hub spells them: no part starts or ends with `.` or `-`, and
    none holds `..` or `--` (so that an id is never a path)."""
    return bool(REPO_ID.match(text)) and not any(
        p.startswith((".", "-")) or p.endswith((".", "-")) or ".." in p or "--" in p
        for p in text.split("/")
    )


def check_revision(revision: str | None) -> None:
    """A branch, tag or commit name; never one that could climb out of the cache (`..`)."""
    # An empty name, or one that starts with "/", has an empty part; "\0" is not printable.
    if revision is not None and (
        any(p in ("", ".", "..") for p in revision.split("/"))
        or "\\" in revision
        or not revision.isprintable()
    ):
        raise UsageError(f"--revision {revision!r}: not a branch, tag or commit name")


def files_to_fetch(repo_files: list[str]) -> list[str]:
    """The config, the tokenizer files there are, and one form of weights: the first there is, in
    formats.py's order (safetensors, PyTorch's, TensorFlow's). Only files at the top of the
    repository: a checkpoint's files sit side by side."""
    top = [f for f in repo_files if isinstance(f, str) and "/" not in f and f not in (".", "..")]
    patterns = formats.weight_patterns(top)
    wanted = [*CONFIG_FILES, *TOKENIZER_FILES, *sentence.FILES, *patterns]
    return [f for f in top if any(fnmatch.fnmatchcase(f, p) for p in wanted)]


def locate(model_id: str, revision: str | None = None) -> Remote:
    """Resolve `revision` (branch, tag or commit; default main) to a commit. Where the Hub cannot
    be reached or HF_HUB_OFFLINE is set, the cache answers, and `offline` says why."""
    from huggingface_hub import HfApi

    if not is_repo_id(model_id):
        raise UsageError(f"{model_id!r} is not a Hub model id (org/name)")
    check_revision(revision)
    try:
        with _hub_errors(model_id, revision):
            info = HfApi().model_info(model_id, revision=revision)
    except HubError as unreachable:
        if isinstance(unreachable, AuthError | IntegrityError):
            raise
        return _locate_in_cache(model_id, revision, unreachable)
    listing = [s.rfilename for s in info.siblings or []]
    files = files_to_fetch(listing)
    return Remote(model_id, revision or "main", info.sha, files, None, tuple(listing))


def _locate_in_cache(model_id: str, revision: str | None, unreachable: HubError) -> Remote:
    from huggingface_hub import try_to_load_from_cache

    found = [try_to_load_from_cache(model_id, name, revision=revision) for name in CONFIG_FILES]
    config = next((f for f in found if isinstance(f, str)), None)
    if config is None:
        raise HubError(f"{unreachable}, and the cache holds no copy of it") from unreachable
    snapshot = Path(config).parent
    listing = sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*"))
    reason = str(unreachable).removeprefix(f"{model_id}: ")
    return Remote(model_id, revision or "main", snapshot.name, files_to_fetch(listing), reason,
                  (*listing,))  # fmt: skip


def download(remote: Remote, say=lambda message: None) -> Path:
    """Fetch `remote.files` into the Hub cache (nothing is fetched that is there already), check
    each against its ETag, and return the snapshot directory."""
    paths = [_fetch_checked(remote, name, say) for name in remote.files]
    snapshot = paths[0].parent
    for name in module_files(remote, snapshot):
        _fetch_checked(remote, name, say)
    if not remote.offline:
        _remember_revision(remote)
    return snapshot


def module_files(remote: Remote, snapshot: Path) -> list[str]:
    """The files of a sentence-transformers repository's module folders (1_Pooling/, 2_Dense/),
    which its modules.json, fetched, names."""
    if "modules.json" not in remote.files:
        return []
    folders = sentence.module_folders(snapshot)
    inside = [f for f in remote.listing if ".." not in Path(f).parts]
    return [f for f in inside if any(f.startswith(d + "/") for d in folders)]


def _remember_revision(remote: Remote) -> None:
    """Files are fetched by commit, so that a branch moving mid-download cannot mix two
    commits. Ask for the config once more by the revision's name (a HEAD request; the file is
    cached) so that huggingface_hub records which commit the name points to, and a later
    offline fetch of the same name finds it."""
    from huggingface_hub import hf_hub_download

    config = next((f for f in remote.files if f in CONFIG_FILES), None)
    if config is None:
        raise NotFoundError(f"{remote.model_id}: the repository has no config.json")
    with _hub_errors(remote.model_id, remote.revision):
        hf_hub_download(remote.model_id, config, revision=remote.revision)


def _fetch_checked(remote: Remote, name: str, say) -> Path:
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    cached = isinstance(try_to_load_from_cache(remote.model_id, name, revision=remote.commit), str)
    if remote.offline and not cached:
        raise HubError(f"{remote.model_id}: {name} is not in the cache, and {remote.offline}")
    with _hub_errors(remote.model_id, None, name):
        path = Path(
            hf_hub_download(remote.model_id, name, revision=remote.commit)
            if not remote.offline
            else try_to_load_from_cache(remote.model_id, name, revision=remote.commit)
        )
    problem = integrity_problem(path)
    if not problem:
        return path
    blob = path.resolve()  # the file and its blob removed: the next attempt downloads it afresh
    path.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)
    if cached and not remote.offline:
        say(f"the cached copy of {name} is damaged ({problem}): downloading it again")
        return _fetch_checked(remote, name, say)
    where = "cached copy" if cached else "download"
    raise IntegrityError(
        f"{remote.model_id}: the {where} of {name} does not match the ETag the Hub gave for it "
        f"({problem}); it was removed from the cache. Run the command again; if this persists, "
        "something between you and the Hub is altering the file."
    )


def integrity_problem(path: Path) -> str | None:
    """Check a cached file against its ETag. huggingface_hub stores each file as a blob named
    after the ETag the Hub sent: the sha256 of the content for LFS files, the git blob id for
    regular ones. It checks only the size; this checks the bytes."""
    etag = path.resolve().name
    if SHA256.match(etag):
        digest, kind = _hash(path, hashlib.sha256()), "sha256"
    elif GIT_SHA1.match(etag):
        header = b"blob %d\0" % path.stat().st_size
        digest, kind = _hash(path, hashlib.sha1(header)), "git blob id"
    else:
        return None  # not a blob of the Hub cache (a local_dir copy): no ETag to check against
    return None if digest == etag else f"{kind} {digest}, expected {etag}"


def _hash(path: Path, h) -> str:
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@contextmanager
def _hub_errors(model_id: str, revision: str | None, filename: str | None = None) -> Iterator[None]:
    """Turn huggingface_hub's and httpx's exceptions into bertconv's, each saying what to do."""
    try:
        yield
    except Exception as e:
        answer = _answer(e, filename or "a file")
        if answer is None:
            raise
        error, message = answer
        what = model_id + (f" at revision {revision!r}" if revision else "")
        raise error(f"{what}: {message}") from e


def _answer(e: Exception, filename: str) -> tuple[type[BertconvError], str] | None:
    """bertconv's error and message for an exception of the Hub's, from one table read in order
    (a gated repository's error is a RepositoryNotFoundError too); None for any other."""
    from huggingface_hub import errors

    gated = (
        "the repository is gated and this request carried no token it accepts. Accept its terms "
        "on its Hub page, then log in with `hf auth login` or set HF_TOKEN to a token with read "
        "access."
    )
    private = "if it is private, log in with `hf auth login` or set HF_TOKEN"
    broke_off = f"the download of {filename} broke off ({type(e).__name__}: {e})"
    table = [
        (errors.GatedRepoError, AuthError, gated),
        (errors.RepositoryNotFoundError, NotFoundError, f"no such model on the Hub ({private})"),
        (errors.RevisionNotFoundError, NotFoundError, "no such branch, tag or commit"),
        (errors.OfflineModeIsEnabled, HubError, "HF_HUB_OFFLINE is set, so the Hub is not asked"),
        ((errors.LocalEntryNotFoundError, *_transport_errors(_CONNECT)), HubError,
            f"the Hub cannot be reached ({e})"),
        (_transport_errors(_TRANSPORT), HubError,
            f"{broke_off}. Run the command again: huggingface_hub resumes where it stopped."),
        (errors.HfHubHTTPError, HubError, f"the Hub refused the request ({e})"),
        (errors.HFValidationError, UsageError, str(e)),
    ]  # fmt: skip
    for kinds, error, message in table:
        if isinstance(e, kinds):
            return error, message
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return OutputError, f"no space left for the download in the Hub cache ({e})"
    if isinstance(e, OSError):
        return HubError, f"the download failed ({e})"
    return None


_CONNECT = ("ConnectError", "ConnectTimeout")
_TRANSPORT = ("TransportError",)


def _transport_errors(names: tuple[str, ...]) -> tuple[type[Exception], ...]:
    """httpx's exception classes: huggingface_hub 1.x uses httpx, 2.x its fork httpx2."""
    found = []
    for module in ("httpx", "httpx2"):
        with suppress(ImportError):
            found += [getattr(importlib.import_module(module), name) for name in names]
    return tuple(found)
