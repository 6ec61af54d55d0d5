"""What bertconv wrote into an output directory, recorded so that it knows its own files again.

An output directory holds one checkpoint: a conversion replaces an earlier one's files, and
removes those it does not write itself (another model's tokenizer.json). But the directory may
be the user's, holding their own files under the names bertconv writes (a tokenizer they
trained, their own model.safetensors): those are never replaced nor removed. So each output
records the files it wrote, each by name, size and CRC32C (files.checksum), and a file counts as
bertconv's only where a record names it and it is still as recorded:

    safetensors   in model.safetensors' metadata: `bertconv.files`, the files written before it
                  (config.json, the tokenizer files); `bertconv.crc32c`, its first field, its
                  own checksum, those 8 digits read as 0s
    google-tf     in bertconv-manifest.json, beside the bundle: every other file of the output
                  (a TensorFlow checkpoint has no room for metadata)

A name read from a record is never opened: only the names an output is made of are looked up in
it.
"""

import json
from pathlib import Path

from . import files, storage
from .errors import BertconvError

FILES_KEY, SEAL_KEY = "bertconv.files", "bertconv.crc32c"
UNSEALED = "0" * 8  # the seal's digits until the file is written, and as its checksum reads them
MANIFEST = "bertconv-manifest.json"
WEIGHTS = "model.safetensors"
WRITTEN_BY = {"written by": "bertconv"}  # what marks a manifest
ENTRY = {"bytes", "crc32c"}  # a file's entry in a record: files.checksum's
CHANGED = "changed since bertconv wrote it"


def metadata(out: files.OutputDir, given: dict[str, str]) -> dict[str, str]:
    """The metadata `given`, for the model.safetensors about to be staged, with the record of
    the files staged before it and room for its seal (`seal`)."""
    return {SEAL_KEY: UNSEALED, **given, FILES_KEY: json.dumps(_staged(out), sort_keys=True)}


def seal(path: Path, digits: str) -> None:
    """Write into a safetensors file written with `metadata` its own checksum: the `digits` of
    the file as written, its seal's digits as `UNSEALED` (writing.write_safetensors')."""
    span = _seal_span(path)
    with open(path, "r+b") as f:
        f.seek(span[0])
        f.write(digits.encode())


def write_manifest(out: files.OutputDir) -> None:
    """Stage the record of every file staged so far (a TensorFlow checkpoint's)."""
    text = json.dumps(WRITTEN_BY | {"files": _staged(out)}, indent=2, sort_keys=True)
    out.stage(MANIFEST).write_text(text + "\n")


def _staged(out: files.OutputDir) -> dict[str, dict]:
    return {out.name(final): files.checksum(tmp) for tmp, final in out.staged}


def strangers(directory: Path, names: list[str]) -> dict[str, str]:
    """Of the files `names` in `directory`, those that no record there shows bertconv wrote as
    they are, each with why: what a conversion may neither replace nor remove."""
    listed = _listed(directory) if names else {}
    why = {}
    for name in names:
        path = directory / name
        if path.is_symlink():
            why[name] = "a link, which bertconv never writes"
            continue
        kept = _self_recorded(path)
        if kept is None and name in listed:
            kept = _as_listed(path, listed[name])
        if kept is None:
            why[name] = "not bertconv's"
        elif not kept:
            why[name] = CHANGED
    return why


def intact(directory: Path) -> bool:
    """Is the output in `directory` whole, as bertconv wrote it: its weights file as its seal
    says, and every file its record lists there as recorded (one lost or changed since, a
    module folder's, the tokenizer's: the result is no longer what it records)? A listed name
    leading out of the directory is never looked up: the record is not whole."""
    if not _self_recorded(directory / WEIGHTS):
        return False
    listed = _listed(directory)
    inside = all(not Path(n).is_absolute() and ".." not in Path(n).parts for n in listed)
    return inside and all(_as_listed(directory / n, entry) for n, entry in listed.items())


def _listed(directory: Path) -> dict[str, dict]:
    """The files the records in `directory` list: name -> its checksum as written."""
    found = _entries(_metadata(directory / WEIGHTS).get(FILES_KEY))
    return found | (_manifest(directory / MANIFEST) or {})


def _self_recorded(path: Path) -> bool | None:
    """Whether a file holding its own record (model.safetensors, the manifest) is as bertconv
    wrote it; None for any other file, and one holding no record."""
    if path.name == MANIFEST:
        return True if _manifest(path) is not None else None
    sealed = _metadata(path).get(SEAL_KEY) if path.name == WEIGHTS else None
    span = _seal_span(path) if sealed else None
    return None if span is None else _as_listed(path, {"crc32c": sealed}, span)


def _as_listed(path: Path, written: dict, blank: tuple[int, int] | None = None) -> bool:
    """Is the file as `written` (its checksum, or the part of it recorded) says?"""
    try:
        found = files.checksum(path, blank)
    except OSError:  # unreadable, or no longer a file
        return False
    return {key: found[key] for key in written} == written


def _seal_span(path: Path) -> tuple[int, int] | None:
    """Where the digits of a safetensors file's seal lie, bytes [start, end): in its header
    (bertconv writes the seal first; a tool saving the file again may move it)."""
    try:
        with files.open_regular(path) as f:
            length = int.from_bytes(f.read(8), "little")  # read_metadata held it to the format
            header = f.read(min(length, storage.MAX_HEADER))
    except BertconvError:
        return None
    field = f'"{SEAL_KEY}":"'.encode()
    at = header.find(field)
    if at < 0:
        return None
    start = 8 + at + len(field)
    return start, start + len(UNSEALED)


def _metadata(path: Path) -> dict[str, str]:
    return {} if path.is_symlink() else storage.read_metadata(path)


def _manifest(path: Path) -> dict[str, dict] | None:
    """The files a manifest lists; None where there is no manifest, or not one of bertconv's."""
    try:
        value = {} if path.is_symlink() else files.read_json_object(path)
    except BertconvError:
        return None
    if not WRITTEN_BY.items() <= value.items() or not isinstance(value.get("files"), dict):
        return None
    return _entries(value["files"])


def _entries(record) -> dict[str, dict]:
    """A record's entries, {name: {"bytes": N, "crc32c": HEX}}, read from JSON text or parsed;
    anything else in it is no entry."""
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except (ValueError, RecursionError):
            return {}
    if not isinstance(record, dict):
        return {}
    return {n: c for n, c in record.items() if isinstance(c, dict) and set(c) == ENTRY}
