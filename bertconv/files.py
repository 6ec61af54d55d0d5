"""Files from strangers, and files bertconv writes.

Reading: checkpoints are published by people bertconv's users do not know, so only regular files
are opened (a FIFO would hang, /dev/zero would never end), JSON files have a size limit, and a
name read from a file is never used as a path (`plain_name`).

Writing: `OutputDir` is an output directory being written. It is locked for the time of the writing
(the lock is on the directory itself: no lock file anyone could plant or redirect), every file is
staged under a name only bertconv uses and renamed into place at the end, and on any failure,
Ctrl-C included, what bertconv created is removed again: staged files, and the directory itself
if bertconv made it. A file bertconv did not write is never replaced nor removed (record.py
says which are its own).
"""

import errno
import json
import os
import re
import shutil
import stat
from collections.abc import Callable
from contextlib import contextmanager, suppress
from functools import cache
from itertools import takewhile
from pathlib import Path
from typing import BinaryIO, TypeVar

from .errors import BertconvError, CheckpointError, NotFoundError, OutputError, UsageError

JSON_LIMIT = 64 << 20  # bytes; config.json is ~1 KB, a large shard index ~100 KB
# Nesting: config.json's deepest fields (task_specific_params) are three or four levels down;
# written back indented, a deeper file would grow by its depth.
JSON_DEPTH = 32
# Staged files: `.NAME.bertconv-<12 hex>.partial`. Only names of this form are ever cleared.
PARTIAL = re.compile(r"^\..+\.bertconv-[0-9a-f]{12}\.partial$")
DEPTH = 3  # folders below an output directory where bertconv stages files (a module's)


KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}
LOCK_TRIES = 100
READ_TRIES = 3  # reads of files that another process keeps rewriting, before giving up
CHECKSUM_READ = 1 << 20  # bytes read at a time to checksum a file
CHECKED: dict[tuple, str] = {}  # (identity and times, blank) -> CRC32C: each file read once
# The CRC32C a reader took of a file's ranges as it read them: identity -> start -> (end, CRC32C)
RANGES: dict[tuple, dict[int, tuple[int, int]]] = {}
SCANS: list = []  # a threading.Event for each scan still remembering ranges, set when it ends
T = TypeVar("T")


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
        kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise CheckpointError(f"{path}: is {kind}, not a file; bertconv reads files only")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def is_present(path: Path) -> bool:
    """Is there anything at `path` (a broken symlink counts)?"""
    return os.path.lexists(path)


def identity(path: Path) -> tuple[int, int, int, int] | None:
    """What tells that a file changed: which file it is, its size, when it was last written;
    None where it cannot be found (its reader says why, when it reads it)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def checksum(path: Path, blank: tuple[int, int] | None = None) -> dict:
    """What tells a file bertconv wrote from the same file changed since: its size and CRC32C,
    bytes [start, end) of `blank` read as '0's (where a file holds its own checksum). CRC32C is
    TensorFlow's checksum: bert-base's 438 MB in ~0.05 s, where SHA-256 takes ~0.3 s; neither
    would keep out a forger, since anyone may write a record. A link is not followed (bertconv
    writes none), nor a FIFO waited on: OSError. A file checked before, unchanged since (its
    identity, times and `blank` the same), is not read again."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb", buffering=0) as f:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        key = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
        if (key, blank) not in CHECKED:
            if len(CHECKED) > 64:
                CHECKED.clear()
            CHECKED[key, blank] = _crc32c(f, blank)
    return {"bytes": found.st_size, "crc32c": CHECKED[key, blank]}


def remember_range(path: Path, start: int, end: int, crc: int) -> None:
    """Take `crc` as the CRC32C of bytes [start, end) of `path`, as it is now, read by one who
    checksummed them as it read them (a conversion's scan of its source, a bundle's check):
    what a conversion copies of them is not read again to checksum it."""
    key = identity(path)
    if key is not None and end > start:  # an empty one starts where another does
        if len(RANGES) > 64:  # files, each with its tensors' ranges
            RANGES.clear()
        RANGES.setdefault(key, {})[start] = (end, crc)


def range_checksum(path: Path, start: int, end: int) -> int | None:
    """The CRC32C of bytes [start, end) of `path` from the ranges remembered of it as it is
    now, where they join into exactly those bytes; None where they do not. Scans still running
    are waited for."""
    for scan in list(SCANS):
        scan.wait()
    known, crc = RANGES.get(identity(path), {}), 0
    while start < end and start in known:
        stop, found = known[start]
        if not start < stop <= end:
            return None
        crc, start = crc32c_combine(crc, found, stop - start), stop
    return crc if start == end else None


def remember(path: Path, digits: str) -> None:
    """Take `digits` as the checksum of the file `path`, just written by one who computed them
    as it wrote: `checksum` then does not read it again while it is as it is now."""
    found = os.stat(path, follow_symlinks=False)
    key = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
    CHECKED[key, None] = digits


# CRC32C (Castagnoli's polynomial, reflected), as google_crc32c computes it; the arithmetic
# modulo that polynomial lets two checksums be joined without the bytes (zlib's crc32_combine).
CASTAGNOLI = 0x82F63B78


def crc32c_combine(first: int, second: int, length: int) -> int:
    """The CRC32C of A then B, from A's (`first`), B's (`second`) and B's `length` in bytes."""
    return _times(_x_power(length), first) ^ second


def _times(a: int, b: int) -> int:
    """a times b, modulo the polynomial (bit 31 is x^0)."""
    product, bit = 0, 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ CASTAGNOLI if b & 1 else b >> 1
    return product


@cache
def _x_power(length: int) -> int:
    """x^(8 * length) modulo the polynomial: a checksum shifted past `length` zero bytes."""
    power, square, n = 1 << 31, 1 << 30, 8 * length  # x^0; x^1
    while n:
        if n & 1:
            power = _times(square, power)
        square, n = _times(square, square), n >> 1
    return power


def _crc32c(f: BinaryIO, blank: tuple[int, int] | None) -> str:
    import google_crc32c

    crc, at = 0, 0
    while block := f.read(CHECKSUM_READ):
        if blank and blank[0] < at + len(block) and at < blank[1]:
            low, high = max(blank[0] - at, 0), min(blank[1] - at, len(block))
            block = block[:low] + b"0" * (high - low) + block[high:]
        crc = google_crc32c.extend(crc, block)
        at += len(block)
    return f"{crc:08x}"


def changed(seen: dict[Path, tuple]) -> Path | None:
    """The first file that is not as `seen` (identity) found it: rewritten in place, cut short,
    replaced or removed since. What was read of it meanwhile may mix two versions."""
    return next((path for path, before in seen.items() if identity(path) != before), None)


def unchanged(seen: dict[Path, tuple]) -> None:
    """Raise where a file converted is not as `seen` found it before a byte was read."""
    path = changed(seen)
    if path is not None:
        raise CheckpointError(
            f"{path}: changed while it was being converted (rewritten, cut short or "
            "replaced); what was read may mix two versions, so nothing was written. Convert "
            "it again once nothing is writing it"
        )


def held_still(read: Callable[[], tuple[T, dict[Path, tuple]]], doing: str) -> T:
    """What `read()` returns (a value, and its files' identities as first found) once the files
    held still while it read them; read again where one changed meanwhile, READ_TRIES times in
    all, then refused by name. `doing`: what it is, as in 'while it was being read'."""
    for _ in range(READ_TRIES):
        value, seen = read()
        moved = changed(seen)
        if moved is None:
            return value
    raise CheckpointError(
        f"{moved}: changed while it was being {doing}, {READ_TRIES} times in a row (rewritten, "
        "cut short or replaced); what was read would mix two versions of it. Try again once "
        "nothing is writing it"
    )


def _no_constants(name: str):
    raise ValueError(f"{name} is not a JSON number")


def read_json_object(path: Path) -> dict:
    """Parse a JSON file of at most JSON_LIMIT bytes that holds an object. NaN and Infinity,
    which Python's parser accepts but JSON does not, are refused."""
    return read_json(path, dict)


def read_json(path: Path, kind: type = dict):
    """Parse a JSON file of at most JSON_LIMIT bytes that holds a `kind` (an object, or a list:
    modules.json), as read_json_object does."""
    with open_regular(path) as f:
        data = f.read(JSON_LIMIT + 1)
    if len(data) > JSON_LIMIT:
        raise CheckpointError(
            f"{path}: larger than {JSON_LIMIT >> 20} MB; this is not a {path.name}"
        )
    try:
        value = json.loads(data, parse_constant=_no_constants)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, too deep, too long
        reason = str(e) or type(e).__name__
        raise CheckpointError(f"{path}: not valid JSON ({reason}); is the file complete?") from None
    if _depth(value) > JSON_DEPTH:
        raise CheckpointError(
            f"{path}: nested more than {JSON_DEPTH} deep; no {path.name} is (config.json's "
            "deepest field is a few levels down)"
        )
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
             float: "number"}  # fmt: skip
    if not isinstance(value, kind):
        found = "null" if value is None else names.get(type(value), type(value).__name__)
        raise CheckpointError(f"{path}: holds a JSON {found}, not an {names[kind]}")
    return value


def _depth(value) -> int:
    """How deeply a parsed JSON value nests, without recursing (a value may nest ~1000 deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def plain_name(name: object, where: str) -> str:
    """A file name read from a file, checked to name a file in the same directory: never a path
    (no separator, no `..`), so that a hostile index cannot point bertconv at /etc/passwd."""
    if not isinstance(name, str) or name in ("", ".", "..") or any(c in name for c in "/\\\0"):
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


class OutputDir:
    """An output directory, for the time it is written (a context manager).

    On entry the directory is made if need be and locked: of two writers into it at once, the
    second waits, then finds the first's result. `stage(name)` gives a path to write `name` to;
    `commit()` puts every staged file in place at once: each file it replaces is kept aside
    until all are in place, and put back if any fails, with Ctrl-C and SIGTERM held off until
    the directory is whole (the old or the new). The directory holds one result: the files
    named in `replaces` (what any result is made of) that this one does not write are set
    aside with them, and removed once it is in place. Only files that `strangers` finds
    bertconv wrote are ever replaced or removed: any other is refused by name
    (check_replaceable). On a failure before commit, and on Ctrl-C, the staged files are
    removed, and so are the directories made here, if still empty."""

    def __init__(self, path: Path, replaces: tuple[str, ...] = (), strangers=None):
        self.path = Path(path)
        self.replaces = replaces
        # (directory, names) -> {name: why} for the files no record shows bertconv wrote as
        # they are (record.strangers); without one, no file there is bertconv's to replace
        self.strangers = strangers or (lambda directory, names: dict.fromkeys(names, "not ours"))
        self.created: list[Path] = []
        self.staged: list[tuple[Path, Path]] = []
        self.protected: list[Path] = []  # what the command reads: never cleared, never replaced
        self.fd: int | None = None

    def __enter__(self) -> "OutputDir":
        try:
            self._lock()
            self._check_places()
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
        """Lock the directory, made if need be. Another writer may remove a directory it made
        (it failed) between our finding it and our opening it: then start again."""
        import fcntl

        for _ in range(LOCK_TRIES):
            try:
                self._make_directories()
                fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except FileNotFoundError:
                _refuse_dangling(self.path)  # no writer will ever make it
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed, or the process ends
            with suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                    self.fd = fd
                    return
            # The writer before us made the directory, failed, and removed it: start again.
            os.close(fd)
        raise OSError(errno.EAGAIN, "other writers keep removing it")

    def _check_places(self) -> None:
        """A directory where a result's file goes (`vocab.txt/`) would be moved aside, unseen,
        by each commit: refused by name before anything is written."""
        taken = [n for n in self.replaces if _is_directory(self.path / n)]
        if taken:
            raise OutputError(
                f"{self.path / taken[0]}: is a directory, where bertconv writes the file "
                f"{taken[0]}; move it out of {self.path} or choose another --out"
            )

    def check_replaceable(self) -> None:
        """Refuse, by name, the files of `replaces` there that this result would replace or
        remove but that no record shows bertconv wrote, as they are (`strangers`): a user's own
        tokenizer.json, a vocab.txt they edited. Never one the command reads (nor a directory:
        _check_places'). Called before the work of a conversion, and again at its commit."""
        there = [self.path / n for n in self.replaces if os.path.lexists(self.path / n)]
        present = [self.name(p) for p in there if not _is_directory(p) and not self._read_here(p)]
        found = self.strangers(self.path, present)
        if found:
            listed = ", ".join(f"{name} ({why})" for name, why in found.items())
            where = self.path.absolute()  # `--out .` said as where it is
            raise OutputError(
                f"{where}: holds files this conversion would replace or remove, which bertconv "
                f"did not record writing there as they are: {listed}. Nothing was written; "
                f"move them out of {where}, or choose another --out"
            )

    def _read_here(self, path: Path) -> bool:
        """Is `path` a file the command reads?"""
        return any(_same_file(path, source) for source in self.protected)

    def _make_directories(self) -> None:
        missing = takewhile(lambda p: not os.path.lexists(p), [self.path, *self.path.parents])
        for directory in reversed(list(missing)):
            try:
                directory.mkdir()
            except FileExistsError:
                continue  # another writer made it: not ours to remove
            self.created.append(directory)

    def _clear_leftovers(self) -> None:
        """Staged files of a writer that was killed (we hold the lock, so none is writing); never
        one the command reads, nor one of ours."""
        ours = {tmp for tmp, _ in self.staged}
        for top, folders, names in os.walk(self.path, followlinks=False):
            # in the module folders too (1_Pooling/), where a conversion stages their files
            folders[:] = [] if len(Path(top).relative_to(self.path).parts) >= DEPTH else folders
            for name in names:
                path = Path(top, name)
                if not PARTIAL.match(name) or path in ours or _is_directory(path):
                    continue  # a directory is never a file bertconv staged
                if not self._read_here(path):
                    path.unlink(missing_ok=True)

    def check_not_source(self, directory: Path, files: list[Path], names: list[str]) -> None:
        """Refuse to write where the source lives: into its directory (by any spelling), or onto
        a name that the source reads through (its files may be symlinks). What the source reads
        is never cleared as a leftover either."""
        self.protected += [directory, *map(Path, files)]
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

    def name(self, path: Path) -> str:
        """`path`'s name in the directory: `1_Pooling/config.json` for a module's file."""
        return Path(path).relative_to(self.path).as_posix()

    def stage(self, name: str) -> Path:
        """A new path to write `name` to, at the top of the directory whatever folder `name`
        lies in (1_Pooling/config.json): a writer killed before its commit leaves no folder of
        its own among the user's, only staged files the next run clears."""
        final = self.path / name
        self._make_folders(final.parent, make=False)  # a link or a file in the way: said now
        tmp = partial(self.path / name.replace("/", "~"))
        tmp.touch(exist_ok=False)
        self.staged.append((tmp, final))
        return tmp

    def _make_folders(self, folder: Path, make: bool = True) -> None:
        """The folders between the directory and `folder`, made where missing (`make`); one
        that is a link (it could lead anywhere) or a file is refused by name."""
        parts = folder.relative_to(self.path).parts
        for place in (self.path.joinpath(*parts[: i + 1]) for i in range(len(parts))):
            if place.is_symlink() or (os.path.lexists(place) and not _is_directory(place)):
                raise OutputError(
                    f"{place}: is {'a link' if place.is_symlink() else 'a file'}, where bertconv "
                    "writes a folder of the checkpoint's; move it out of the way, or choose "
                    "another --out"
                )
            if make and not os.path.lexists(place):
                place.mkdir()
                self.created.append(place)

    def copy_in(self, name: str, source: Path, within: Path | None = None) -> None:
        """Stage a copy of the file `source`, streamed: a file of any size costs no memory. A
        symlink is followed only within the source's own directory `within` (by default the
        file's; or the Hugging Face cache repository it is a snapshot of): a stranger's link to
        a private file is refused."""
        with open_regular(source) as src:
            confined(source, within)
            with open(self.stage(name), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)

    def commit(self) -> list[Path]:
        """Every staged file into place, all or none; signals held off meanwhile."""
        with _signals_held():
            self.check_replaceable()  # what may have come since the first check
            self._clear_leftovers()
            kept: list[tuple[Path, Path | None]] = []  # (final, the file it replaced)
            try:
                for stale in self._stale():  # an earlier result's, that this one does not write
                    kept.append((stale, _set_aside(stale, replaced=False)))
                for tmp, final in self.staged:
                    self._make_folders(final.parent)
                    kept.append((final, _set_aside(final)))
                    os.replace(tmp, final)
            except BaseException:
                _restore(kept)
                raise
            for _, aside in kept:
                if aside is not None:
                    with suppress(OSError):
                        aside.unlink()
            self._remove_emptied([final for final, aside in kept if aside is not None])
        done = [final for _, final in self.staged]
        self.staged = []
        return done

    def _remove_emptied(self, removed: list[Path]) -> None:
        """The folders of an earlier result's files, where removing them left them empty."""
        folders = {p for path in removed for p in path.parents if self.path in p.parents}
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            with suppress(OSError):
                folder.rmdir()  # only if empty

    def _stale(self) -> list[Path]:
        """The files of `replaces` in the directory that this result does not write (never one
        the command reads)."""
        written = {final.relative_to(self.path).as_posix() for _, final in self.staged}
        present = [self.path / n for n in self.replaces if Path(n).as_posix() not in written]
        return [path for path in present if os.path.lexists(path) and not self._read_here(path)]

    def _undo(self) -> None:
        """Remove what this writer created, signals held off. Cleaning up must never hide the
        failure that brought us here, so its own errors are ignored."""
        with _signals_held():
            for tmp, _ in self.staged:
                with suppress(OSError):
                    tmp.unlink(missing_ok=True)
            self.staged = []
            # The directories made here go while the lock is held: a writer waiting on it then
            # finds the directory gone and makes it again, rather than lose it as it writes.
            for directory in reversed(self.created):
                with suppress(OSError):
                    directory.rmdir()  # only if empty: another writer may have filled it since
            self.created = []
            self._unlock()

    def _unlock(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _refuse_dangling(path: Path) -> None:
    """Refuse `path` where it, or a directory above it, is a link to nothing: its directory can
    be neither opened nor made there (bertconv makes no directory at the end of a link)."""
    for link in [path, *path.parents]:
        if link.is_symlink() and not link.exists():
            above = "" if link == path else f", above {path}"
            raise OutputError(
                f"{link}: is a link to {os.path.realpath(link)}, which does not exist{above}; "
                "make that directory, or choose another --out"
            )


def partial(path: Path) -> Path:
    """A new name beside `path`, of the form PARTIAL (which only bertconv uses)."""
    return path.with_name(f".{path.name}.bertconv-{os.urandom(6).hex()}.partial")


def _set_aside(final: Path, replaced: bool = True) -> Path | None:
    """Keep the file at `final` under a name the next run may clear: where a staged file is
    about to replace it, a hard link (it stays in place till then), or where links are refused
    a rename; where nothing will (a file of an earlier result), a rename. A directory there is
    refused, not moved."""
    if not os.path.lexists(final):
        return None
    if _is_directory(final):  # made since the output was opened
        raise OutputError(f"{final}: is a directory, where bertconv writes a file; move it away")
    aside = partial(final)
    if not (replaced and _linked(final, aside)):
        os.rename(final, aside)
    return aside


def _linked(path: Path, link: Path) -> bool:
    try:
        os.link(path, link, follow_symlinks=False)
    except OSError:  # a file system without hard links
        return False
    return True


def _is_directory(path: Path) -> bool:
    """A directory itself, not a link to one (a link is replaced like a file)."""
    return stat.S_ISDIR(os.lstat(path).st_mode) if os.path.lexists(path) else False


def _restore(kept: list[tuple[Path, Path | None]]) -> None:
    for final, aside in reversed(kept):
        with suppress(OSError):
            if aside is None:
                final.unlink(missing_ok=True)
            elif _same_file(aside, final):  # not replaced yet; rename() of a file onto a link
                aside.unlink()  # to it does nothing, and would leave the link
            else:
                os.replace(aside, final)


@contextmanager
def _signals_held():
    """Ctrl-C and SIGTERM wait until the block is done (a commit or a clean-up half done is
    worse than one a moment late); they are raised again as it ends. (Masking them would not
    do: torch's threads would take them.)"""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, lambda n, f: caught.append(n)) for number in held}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def confined(path: Path, within: Path | None = None) -> Path:
    """`path`, where it (through any symlinks) stays within its directory `within` (by default
    its own), or, for a snapshot in the Hugging Face cache (whose files are links into the
    repository's blobs), within the cached repository; refused, by name, where a link leads out
    of it."""
    path = Path(path)
    root = Path(within if within is not None else path.parent).resolve()
    if root.parent.name == "snapshots" and root.parents[1].name.startswith(
        ("models--", "datasets--", "spaces--")
    ):
        root = root.parents[1]
    target = path.resolve()
    if not target.is_file():  # a device, a FIFO, nothing: the reader refuses it as such
        return path
    if target != root and root not in target.parents:
        raise CheckpointError(
            f"{path}: is a link to {target}, outside the checkpoint's directory; bertconv "
            "follows links only within it (a stranger's checkpoint could link a private file). "
            "Copy the file in if you meant it."
        )
    return path
