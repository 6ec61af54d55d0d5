"""Reading `.bin` checkpoints, which are pickles, without ever running code from one.

A pickle is a program: loading it calls whatever functions it names. torch's `weights_only=True`
reader allows a list of functions, and that list has had holes before. So bertconv reads the
globals a pickle names from its opcodes first, without running it, and refuses anything beyond
the few that `torch.save` writes for a state dict; refuses compressed zip members (torch never
writes them, and a few KB could inflate to gigabytes); bounds every read by the bytes that are
there; and only then lets torch read the file, with `weights_only=True`. What torch returns must
be a flat dict of plain tensors. A pickled model object (what torch.save(model) writes) is named
as one, with how to save its state dict instead. A refusal never passes on torch's advice to
load the file some less safe way.
"""

import os
import pickletools
import re
import zipfile
from pathlib import Path

from . import files, storage
from .errors import CheckpointError, listed

# What a pickled state dict needs, and all that bertconv lets a pickle name: torch.save writes
# these for tensors, parameters and their storages. Anything else is refused before torch runs.
STORAGES = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
PICKLE_GLOBALS = {
    "collections.OrderedDict",
    "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    *(f"torch.{kind}Storage" for kind in STORAGES),
}
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch's pre-1.6 format
# Where nn.Module's own classes live: a pickle that names them holds a model object, which
# torch.save(model) writes (BERT-pytorch's trainer saves so), not a state dict.
MODULES = "torch.nn.modules."
BUILTINS = ("__builtin__.", "builtins.")  # a pickled module's sets: not the model's classes


def read_bin(path: Path) -> dict[str, storage.Tensor]:
    """A pickled state dict, vetted before torch reads it (torch itself with weights_only)."""
    import torch

    with files.open_regular(path) as f:
        is_zip = zipfile.is_zipfile(f)
        f.seek(0)
        names = _zip_globals(path, f) if is_zip else _legacy_globals(path, f)
    refused = sorted(names - PICKLE_GLOBALS)
    if any(name.startswith(MODULES) for name in refused):
        raise CheckpointError(_model_object(path, refused))
    if refused:
        raise CheckpointError(
            f"{path}: its pickle asks for {', '.join(refused)}, which a state dict never needs; "
            "it was not read. bertconv reads pickles that hold tensors only, and never runs code "
            "from one. Use the model's safetensors file instead."
        )
    try:
        # mmap needs the zip format of torch >= 1.6; older files are read whole
        loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except Exception as e:  # torch's reader raises many kinds; none of them is the user's bug
        reason, hint = _torch_reason(e), files.diagnose(path)
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({reason}). {hint}"
        ) from None
    return _state_dict(path, loaded)


def _model_object(path: Path, refused: list[str]) -> str:
    """What to say of a pickled model object: its classes (the model's own first, then
    torch.nn's), and how to save the state dict that bertconv reads instead."""
    classes = [n for n in refused if not n.startswith(BUILTINS)]
    classes.sort(key=lambda n: (n.startswith("torch."), n))
    return (
        f"{path}: holds a pickled model object, as torch.save(model) writes (its classes: "
        f"{listed(classes)}), not a state dict. It was not read: reading it would run those "
        "classes' code, and bertconv reads pickles that hold tensors only. In your own code, "
        "where the model is built, save its weights alone, "
        'torch.save(model.state_dict(), "pytorch_model.bin"), and give bertconv that file.'
    )


def _torch_reason(error: Exception) -> str:
    """What torch objected to, without the advice torch attaches to a refusal of its weights-only
    reader (load with weights_only=False, allowlist the global): bertconv never gives that."""
    text = str(error) or type(error).__name__
    refusal = re.search(r"WeightsUnpickler error: (.*)", text)
    if refusal:
        return f"torch's weights-only reader refused it: {refusal.group(1)[:200]}"
    if "weights_only" in text or "safe_globals" in text:
        return "torch's weights-only reader refused it"
    return text.splitlines()[0][:200]


def _state_dict(path: Path, loaded) -> dict[str, storage.Tensor]:
    import torch

    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path}: holds a {type(loaded).__name__}, not a state dict")
    nested = [k for k, v in loaded.items() if isinstance(v, dict)]
    if nested:
        raise CheckpointError(
            f"{path}: holds dicts under [{listed(map(repr, nested))}] (a training checkpoint?), "
            "not a state dict of tensors. Save the model's state_dict() alone, or convert that."
        )
    bad = [
        f"{k!r} ({_what(v)})"
        for k, v in loaded.items()
        if not isinstance(k, str)
        or not isinstance(v, torch.Tensor)
        or v.layout != torch.strided
        or v.is_quantized
        or v.dtype not in storage.torch_dtypes().values()
    ]
    if bad:
        raise CheckpointError(
            f"{path}: holds entries that are not plain tensors bertconv can read: " + listed(bad)
        )
    return {name: storage.from_torch(t) for name, t in loaded.items()}


def _what(value) -> str:
    return f"{value.dtype}, {value.layout}" if hasattr(value, "dtype") else type(value).__name__


def _zip_globals(path: Path, f) -> set[str]:
    """The globals of the pickle in a zip-format .bin. torch writes every member stored, not
    compressed; a compressed member is refused, so that a small file cannot inflate."""
    try:
        archive = zipfile.ZipFile(f)
        members = archive.infolist()
        if any(m.compress_type != zipfile.ZIP_STORED for m in members):
            raise CheckpointError(
                f"{path}: has compressed members, which torch.save never writes; not read"
            )
        pickles = [m for m in members if m.filename.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise CheckpointError(f"{path}: a zip file, but not one torch.save wrote")
        with archive.open(pickles[0]) as pkl:
            return _globals(path, Bounded(pkl, pickles[0].file_size))
    # zipfile's errors for a damaged archive: bad records, unsupported versions, encryption
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint ({e})") from None


def _legacy_globals(path: Path, f) -> set[str]:
    """torch's pre-1.6 format is pickles in a row: a magic number, the protocol, system info,
    then the state dict. Anything else (a text file, an HTML page) is refused here."""
    size = os.fstat(f.fileno()).st_size
    try:
        # The first pickle holds one plain number, read without unpickling.
        ops = pickletools.genops(Bounded(f, size))
        values = [arg for op, arg, _ in ops if op.name not in ("PROTO", "STOP", "FRAME")]
        if len(values) != 1 or not isinstance(values[0], int):
            raise ValueError("it does not start with torch's magic number")
    except (ValueError, EOFError, IndexError, KeyError, OverflowError) as e:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint ({e or type(e).__name__}). "
            f"{files.diagnose(path)}"
        ) from None
    if values[0] != LEGACY_MAGIC:
        raise CheckpointError(
            f"{path}: not a PyTorch checkpoint (neither torch's zip format nor its legacy "
            f"one). {files.diagnose(path)}"
        )
    # The pickles after the magic number: protocol, system info, state dict.
    return set().union(*(_globals(path, Bounded(f, size - f.tell())) for _ in range(3)))


class Bounded:
    """A stream that never reads past `size` bytes from where it starts. A pickle opcode may
    claim a string of 2**64 bytes; reading it from this gives what is there, not an attempt to
    allocate the claim."""

    def __init__(self, stream, size: int):
        self.stream, self.left = stream, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.stream.read(n)
        self.left -= len(data)
        return data

    def readline(self) -> bytes:
        line = self.stream.readline(self.left)
        self.left -= len(line)
        return line


def _globals(path: Path, stream) -> set[str]:
    """The globals one pickle names, read from its opcodes without running it. A global built on
    the stack (STACK_GLOBAL) is resolved from the strings pushed before it; one that cannot be,
    or an extension code, is refused."""
    found, strings, memo = set(), [], {}
    try:
        for op, arg, _ in pickletools.genops(stream):
            name = op.name
            if name in ("GLOBAL", "INST"):
                found.add(arg.replace(" ", "."))
            elif name == "STACK_GLOBAL":
                if len(strings) < 2 or not all(isinstance(s, str) for s in strings[-2:]):
                    raise ValueError("a global whose name cannot be read")
                found.add(f"{strings[-2]}.{strings[-1]}")
            elif name.startswith("EXT"):
                raise ValueError("an extension code, which names code by number")
            elif "UNICODE" in name or "STRING" in name:
                strings.append(arg)
            elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
                memo[arg] = strings[-1] if strings else None
            elif name == "MEMOIZE":
                memo[len(memo)] = strings[-1] if strings else None
            elif name in ("BINGET", "LONG_BINGET", "GET"):
                strings.append(memo.get(arg))
    except (ValueError, EOFError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as e:
        raise CheckpointError(
            f"{path}: not a readable PyTorch checkpoint (its pickle: {e or type(e).__name__})"
        ) from None
    return found
