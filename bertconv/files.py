"""Files from strangers, and files bertconv writes.

Reading: checkpoints are published by people bertconv's users do not know, so only regular files
are opened (a FIFO would hang, /dev/zero would never end), JSON files have a size limit, and a
name read from a file is never used as a path (`plain_name`).

Writing: `Output` is an output directory being written. It is locked for the time of the writing
(the lock is on the directory itself: no lock file anyone could plant or redirect), every file is
staged under a name only bertconv uses and renamed into place at the end, and on any failure,
Ctrl-C included, what bertconv created is removed again: staged files, and the directory itself
if bertconv made it.
"""

import json
import os
import re
import secrets
import shutil
import stat
from contextlib import suppress
from pathlib import Path
from typing import BinaryIO

from .errors import BertconvError, CheckpointError, NotFoundError, OutputError, UsageError

JSON_LIMIT = 64 << 20  # bytes; config.json is ~1 KB, a large shard index ~100 KB
# Staged files: `.NAME.bertconv-<12 hex>.partial`. Only names of this form are ever cleared.
PARTIAL = re.compile(r"^\..+\.bertconv-[0-9a-f]{12}\.partial$")


def _kind(mode: int) -> str:
    for test, name in [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: Path) -> BinaryIO:
    """Open `path` for reading, refusing anything but a regular file (symlinks are followed: the
    Hugging Face cache is made of them)."""
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise CheckpointError(f"{path}: is {_kind(mode)}, not a file; bertconv reads files only")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def is_present(path: Path) -> bool:
    """Is there anything at `path` (a broken symlink counts)?"""
    return os.path.lexists(path)


def _no_constants(name: str):
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: Path, limit: int = JSON_LIMIT):
    """Parse a JSON file of at most `limit` bytes. NaN and Infinity, which Python's parser
    accepts but JSON does not, are refused."""
    with open_regular(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise CheckpointError(f"{path}: larger than {limit >> 20} MB; this is not a {path.name}")
    try:
        return json.loads(data, parse_constant=_no_constants)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, too deep, too long
        reason = str(e) or type(e).__name__
        raise CheckpointError(f"{path}: not valid JSON ({reason}); is the file complete?") from None


def read_json_object(path: Path, limit: int = JSON_LIMIT) -> dict:
    value = read_json(path, limit)
    if not isinstance(value, dict):
        raise CheckpointError(f"{path}: holds a JSON {_json_type(value)}, not an object")
    return value


def _json_type(value) -> str:
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def plain_name(name: object, where: str) -> str:
    """A file name read from a file, checked to name a file in the same directory: never a path
    (no separator, no `..`), so that a hostile index cannot point bertconv at /etc/passwd."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
    ):
        raise CheckpointError(
            f"{where}: names {name!r} as a file; only plain file names in the same directory "
            "are accepted"
        )
    return name


def diagnose(path: Path) -> str:
    """What a file that should hold weights holds instead, and what to do about it."""
    try:
        with open_regular(path) as f:
            head = f.read(512).lstrip().lower()
    except (BertconvError, OSError):
        return "It cannot be read."
    if head.startswith(b"version https://git-lfs"):
        return (
            "It is a Git LFS pointer, a small text file standing in for the weights: they were "
            "never downloaded, or the pointer was committed in their place. In a git clone, run "
            "`git lfs pull`."
        )
    if head.startswith((b"<!doctype html", b"<html")):
        return (
            "It is an HTML page (an error or login page?) saved in place of the weights. "
            "Download the file again."
        )
    return "It may be truncated or damaged: download it again."


class Output:
    """An output directory, for the time it is written (a context manager).

    On entry the directory is made if need be and locked: of two writers into it at once, the
    second waits, then finds the first's result. `stage(name)` gives a path to write `name` to;
    `commit()` renames the staged files into place in the order they were staged (put the file
    that marks a complete output last). On a failure before commit, and on Ctrl-C, the staged
    files are removed, and so is the directory if it was made here and is empty again."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.created: list[Path] = []
        self.staged: list[tuple[Path, Path]] = []
        self.fd: int | None = None

    def __enter__(self) -> "Output":
        try:
            self._lock()
            self._clear_leftovers()
        except OSError as e:
            self._undo()
            raise OutputError(f"{self.path}: cannot write there ({e.strerror or e})") from None
        except BaseException:
            self._undo()
            raise
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is None:
            self._unlock()
            return
        self._undo()
        if isinstance(error, OSError):
            reason = error.strerror or error
            raise OutputError(
                f"{self.path}: writing the converted checkpoint failed ({reason}); nothing in it "
                "was changed"
            ) from error

    def _lock(self) -> None:
        import fcntl

        while True:
            self._make_directories()
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed, or the process ends
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return
            # The writer before us made the directory, failed, and removed it: start again.
            os.close(fd)

    def _make_directories(self) -> None:
        missing = []
        for parent in [self.path, *self.path.parents]:
            if os.path.lexists(parent):
                break
            missing.append(parent)
        for directory in reversed(missing):
            try:
                directory.mkdir()
            except FileExistsError:
                continue  # another writer made it: not ours to remove
            self.created.append(directory)

    def _clear_leftovers(self) -> None:
        """Staged files of a writer that was killed (we hold the lock, so none is writing)."""
        for name in os.listdir(self.path):
            if PARTIAL.match(name):
                (self.path / name).unlink(missing_ok=True)

    def check_not_source(self, directory: Path, files: list[Path], names: list[str]) -> None:
        """Refuse to write where the source lives: into its directory (by any spelling), or onto
        a name that the source reads through (its files may be symlinks)."""
        if self.path.is_dir() and directory.is_dir() and os.path.samefile(self.path, directory):
            raise UsageError(
                f"{self.path}: is the source directory {directory}; converting in place would "
                "replace its weights. Choose another --out."
            )
        targets = {(self.path / n).resolve() for n in names}
        clash = sorted(str(f) for f in files if Path(f).resolve() in targets)
        if clash:
            raise UsageError(
                f"{self.path}: writing there would replace the source's own files "
                f"({', '.join(clash)}). Choose another --out."
            )

    def stage(self, name: str) -> Path:
        """A new path beside `name` to write it to."""
        final = self.path / name
        tmp = final.with_name(f".{name}.bertconv-{secrets.token_hex(6)}.partial")
        tmp.touch(exist_ok=False)
        self.staged.append((tmp, final))
        return tmp

    def copy_in(self, name: str, source: Path) -> None:
        """Stage a copy of the file `source`, streamed: a file of any size costs no memory."""
        with open_regular(source) as src, open(self.stage(name), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)

    def commit(self) -> list[Path]:
        for tmp, final in self.staged:
            os.replace(tmp, final)
        done = [final for _, final in self.staged]
        self.staged = []
        return done

    def _undo(self) -> None:
        """Remove what this writer created. Cleaning up must never hide the failure that
        brought us here, so its own errors are ignored."""
        for tmp, _ in self.staged:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
        self.staged = []
        self._unlock()
        for directory in reversed(self.created):
            with suppress(OSError):
                directory.rmdir()  # only if empty: another writer may have filled it since
        self.created = []

    def _unlock(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
