"""The Python API: convert a checkpoint (local or on the Hub) into a layout, or load it into
bertconv's model in one call."""

from dataclasses import dataclass
from pathlib import Path

from .checkpoint import (
    LAYOUT_KEY,
    REVISION_KEY,
    SOURCE_KEY,
    Checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from .convert import Conversion, convert
from .errors import BertconvError, NotFoundError
from .hub import download, is_repo_id


@dataclass
class Source:
    """Where a checkpoint came from: a local directory, or a Hub repository at a commit."""

    name: str
    path: Path
    revision: str | None = None


def resolve(source: str | Path, revision: str | None = None) -> Source:
    """A local checkpoint directory as it is; anything else that looks like `org/name`, from
    the Hub."""
    path = Path(source).expanduser()
    if path.is_dir():
        return Source(str(source), path)
    if isinstance(source, Path) or not is_repo_id(str(source)):
        raise NotFoundError(f"{source}: no such directory, and not a Hub model id (org/name)")
    try:
        snapshot, commit = download(str(source), revision)
    except BertconvError as e:
        reason = str(e).removeprefix(f"{source}: ")
        raise type(e)(f"{source}: not a local directory, and as a Hub model id: {reason}") from e
    return Source(str(source), snapshot, commit)


def convert_checkpoint(
    src: Source,
    out: Path,
    to_layout: str = "bertconv",
    from_layout: str | None = None,
    heads: bool | None = None,
) -> tuple[Checkpoint, Conversion, list[Path]]:
    """Read `src`, convert it into `to_layout` and write it to `out` (see write_checkpoint)."""
    ckpt = read_checkpoint(src.path, from_layout)
    result = convert(ckpt.state_dict, ckpt.config, ckpt.layout, to_layout, heads, str(src.path))
    metadata = {
        LAYOUT_KEY: to_layout,
        SOURCE_KEY: src.name,
        REVISION_KEY: src.revision or ckpt.metadata.get(REVISION_KEY, ""),
    }
    written = write_checkpoint(out, result.state_dict, ckpt.config_dict, metadata, src.path)
    return ckpt, result, written


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

    src = source if isinstance(source, Source) else resolve(source, revision)
    ckpt = read_checkpoint(src.path, from_layout)
    result = convert(ckpt.state_dict, ckpt.config, ckpt.layout, "bertconv", heads, str(src.path))
    cls = BertForPreTraining if result.heads else BertModel
    with torch.device("meta"):  # no random initialisation: every parameter comes from the file
        model = cls(ckpt.config)
    model.load_state_dict(result.state_dict, strict=True, assign=True)
    return model.eval()
