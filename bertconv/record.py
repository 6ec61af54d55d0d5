"""What bertconv wrote into an output directory, recorded so that it knows its own files again.

An output directory holds one checkpoint: a conversion replaces an earlier one's files, and
removes those it does not write itself (another model's tokenizer.json). But the directory may
be the user's, holding their own files under the names bertconv writes (a tokenizer they
trained, their own model.safetensors). So each output records the files it wrote, each by name,
size and CRC32C (files.checksum), for the next conversion there to tell them from the user's:

    safetensors   in model.safetensors' metadata: `bertconv.files`, the files written before it
                  (config.json, the tokenizer files); `bertconv.crc32c`, its first field, its
                  own checksum, those 8 digits read as 0s
    google-tf     in bertconv-manifest.json, beside the bundle: every other file of the output
                  (a TensorFlow checkpoint has no room for metadata)
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


def metadata(out: files.Output, given: dict[str, str]) -> dict[str, str]:
    """The metadata `given`, for the model.safetensors about to be staged, with the record of
    the files staged before it and room for its seal (`seal`)."""
    return {SEAL_KEY: UNSEALED, **given, FILES_KEY: json.dumps(_staged(out), sort_keys=True)}


def seal(path: Path) -> None:
    """Write into a safetensors file written with `metadata` its own checksum."""
    span = _seal_span(path)
    digits = files.checksum(path, span)["crc32c"]
    with open(path, "r+b") as f:
        f.seek(span[0])
        f.write(digits.encode())


def write_manifest(out: files.Output) -> None:
    """Stage the record of every file staged so far (a TensorFlow checkpoint's)."""
    text = json.dumps(WRITTEN_BY | {"files": _staged(out)}, indent=2, sort_keys=True)
    out.stage(MANIFEST).write_text(text + "\n")


def _staged(out: files.Output) -> dict[str, dict]:
    return {final.name: files.checksum(tmp) for tmp, final in out.staged}


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
