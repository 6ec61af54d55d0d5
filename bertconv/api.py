"""The Python API: convert a checkpoint (local or on the Hub) into a layout, or load it into
bertconv's model in one call."""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from . import files, storage
from .checkpoint import (
    HEADS_KEY,
    LAYOUT_KEY,
    REVISION_KEY,
    SOURCE_KEY,
    TOKENIZER_FILES,
    Checkpoint,
    read_checkpoint,
    read_metadata,
    tokenizer_files,
    write_checkpoint,
)
from .convert import Conversion, convert
from .errors import BertconvError, NotFoundError

WRITTEN = ("model.safetensors", "config.json", *TOKENIZER_FILES)  # what a conversion writes

if TYPE_CHECKING:
    from . import hub


def _quiet(message: str) -> None:
    """The library never prints; the command line passes its own `say`."""


@dataclass
class Source:
    """Where a checkpoint came from: a local directory, or a Hub repository at a commit."""

    name: str
    path: Path
    revision: str | None = None


def resolve(source: "str | Path | Source", revision: str | None = None, say=_quiet) -> Source:
    """A local checkpoint directory as it is; anything else that looks like `org/name`, from
    the Hub (or its cache)."""
    if isinstance(source, Source):
        return source
    path = Path(source).expanduser()
    if path.is_dir():
        return Source(str(source), path)
    from . import hub  # only for Hub ids: local conversions skip its imports

    if isinstance(source, Path) or not hub.is_repo_id(str(source)):
        raise NotFoundError(f"{source}: no such directory, and not a Hub model id (org/name)")
    try:
        remote = hub.locate(str(source), revision)
    except BertconvError as e:
        reason = str(e).removeprefix(f"{source}")
        raise type(e)(f"{source}: not a local directory, and as a Hub model id{reason}") from e
    return fetch_source(remote, say)


def fetch_source(remote: "hub.Remote", say=_quiet) -> Source:
    """Download a located Hub revision (see hub.locate) and name it as a source."""
    from . import hub

    if remote.offline:
        say(f"using the cached copy of {remote.model_id} at {remote.commit}: {remote.offline}")
    return Source(remote.model_id, hub.download(remote, say), remote.commit)


def up_to_date(out: Path, source: str, revision: str, layout: str, heads: bool | None) -> bool:
    """Does `out` already hold `source` at `revision`, converted into `layout`?"""
    meta = read_metadata(Path(out) / "model.safetensors")
    wanted = {SOURCE_KEY: source, REVISION_KEY: revision, LAYOUT_KEY: layout}
    if heads is not None:
        wanted[HEADS_KEY] = str(heads).lower()
    return (Path(out) / "config.json").is_file() and all(
        meta.get(k) == v for k, v in wanted.items()
    )


@dataclass
class Converted:
    """What a conversion read, made and wrote."""

    checkpoint: Checkpoint
    conversion: Conversion
    written: list[Path]
    nonfinite: list[str]  # tensors of the source holding NaN or Inf, copied as they are


def convert_checkpoint(
    src: Source,
    out: Path,
    to_layout: str = "bertconv",
    from_layout: str | None = None,
    heads: bool | None = None,
) -> Converted:
    """Read `src`, convert it into `to_layout` and write it to `out` (see write_checkpoint).
    Conversions into the same `out` at once take turns."""
    with files.Output(out) as output:
        return _convert_into(src, output, to_layout, from_layout, heads)


def fetch(
    model_id: str,
    out: Path,
    to_layout: str = "bertconv",
    revision: str | None = None,
    heads: bool | None = None,
    say=_quiet,
) -> tuple["hub.Remote", Converted | None]:
    """Download a Hub model and convert it into `out`. Where `out` already holds that commit in
    that layout, nothing is downloaded or written, and the conversion returned is None."""
    from . import hub

    remote = hub.locate(model_id, revision)
    with files.Output(out) as output:
        if up_to_date(out, model_id, remote.commit, to_layout, heads):
            return remote, None
        src = fetch_source(remote, say)
        return remote, _convert_into(src, output, to_layout, None, heads)


def _convert_into(src: Source, output: files.Output, to_layout, from_layout, heads) -> Converted:
    ckpt = read_checkpoint(src.path, from_layout)
    output.check_not_source(src.path, [*ckpt.files, *tokenizer_files(src.path)], WRITTEN)
    result = convert(ckpt.state_dict, ckpt.config, ckpt.layout, to_layout, heads, str(src.path))
    metadata = {
        LAYOUT_KEY: to_layout,
        SOURCE_KEY: src.name,
        REVISION_KEY: src.revision or ckpt.metadata.get(REVISION_KEY, ""),
        HEADS_KEY: str(result.heads).lower(),
    }
    nonfinite = storage.nonfinite_soon(ckpt.state_dict)
    written = write_checkpoint(output, result.state_dict, ckpt.config_dict, metadata, src.path)
    return Converted(ckpt, result, written, nonfinite())


def load(
    source: "str | Path | Source",
    revision: str | None = None,
    heads: bool | None = None,
    from_layout: str | None = None,
):
    """bertconv's model with the weights of `source`, in eval mode.

    `source` is a checkpoint directory (official, or converted by bertconv into any layout) or a
    Hub model id. The result is a BertForPreTraining when the checkpoint has pre-training heads
    (and `heads` is not False), a BertModel otherwise. Loading is strict: every parameter comes
    from the file, none is left at an initial value."""
    import torch

    from .model import BertForPreTraining, BertModel

    src = resolve(source, revision)
    ckpt = read_checkpoint(src.path, from_layout)
    result = convert(ckpt.state_dict, ckpt.config, ckpt.layout, "bertconv", heads, str(src.path))
    cls = BertForPreTraining if result.heads else BertModel
    with torch.device("meta"), _skip_init():  # every parameter comes from the file
        model = cls(ckpt.config)
    maps = {}
    weights = {name: storage.to_torch(t, maps) for name, t in result.state_dict.items()}
    model.load_state_dict(weights, strict=True, assign=True)
    return model.eval()


def _skip_init():
    """A torch function mode that skips torch.nn.init's random initialisation. Parameters built
    under it (on the meta device, where they hold no memory) are about to be replaced by loaded
    weights; initialising meta tensors would also import torch's compiler stack (~1 s)."""
    from torch.overrides import TorchFunctionMode

    class SkipInit(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__module__", None) == "torch.nn.init":
                return args[0] if args else kwargs["tensor"]  # untouched
            return func(*args, **(kwargs or {}))

    return SkipInit()
