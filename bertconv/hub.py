"""Downloads from the Hugging Face Hub, through huggingface_hub (which honours HF_ENDPOINT,
HF_TOKEN, HF_HOME and HF_HUB_OFFLINE). Only the files conversion needs are fetched."""

import importlib
import re
from contextlib import contextmanager, suppress
from pathlib import Path

from .checkpoint import TOKENIZER_FILES
from .errors import HubError, NotFoundError

# The weights, in order of preference; each with the files it brings along.
WEIGHTS = (
    ("model.safetensors", ["model.safetensors"]),
    ("model.safetensors.index.json", ["model.safetensors.index.json", "*.safetensors"]),
    ("pytorch_model.bin", ["pytorch_model.bin"]),
    ("pytorch_model.bin.index.json", ["pytorch_model.bin.index.json", "pytorch_model-*.bin"]),
)
REPO_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def is_repo_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and not text.startswith((".", "~"))


def files_to_fetch(repo_files: list[str]) -> list[str]:
    """config.json, the tokenizer files there are, and one form of weights, safetensors first."""
    for marker, patterns in WEIGHTS:
        if marker in repo_files:
            present = [f for f in ("config.json", *TOKENIZER_FILES) if f in repo_files]
            return present + patterns
    raise NotFoundError(
        "the repository has no weights bertconv can read (looked for "
        + ", ".join(marker for marker, _ in WEIGHTS)
        + ")"
    )


def download(model_id: str, revision: str | None = None) -> tuple[Path, str]:
    """Fetch a model's config, tokenizer and weights into the Hub cache.

    Returns the snapshot directory and the commit it is at."""
    from huggingface_hub import HfApi, snapshot_download

    with _hub_errors(model_id, revision):
        info = HfApi().model_info(model_id, revision=revision)
        patterns = files_to_fetch([s.rfilename for s in info.siblings or []])
        path = snapshot_download(model_id, revision=info.sha, allow_patterns=patterns)
    return Path(path), info.sha


@contextmanager
def _hub_errors(model_id: str, revision: str | None):
    """Turn huggingface_hub's and httpx's exceptions into bertconv's, each saying what to do."""
    from huggingface_hub import errors

    what = model_id + (f" at revision {revision!r}" if revision else "")
    try:
        yield
    except errors.GatedRepoError as e:  # before RepositoryNotFoundError, its base class
        raise HubError(
            f"{what}: the repository is gated. Accept its terms on the Hub, then log in "
            "(`hf auth login`) or set HF_TOKEN."
        ) from e
    except errors.RepositoryNotFoundError as e:
        raise NotFoundError(
            f"{what}: no such model on the Hub (if it is private, log in or set HF_TOKEN)"
        ) from e
    except errors.RevisionNotFoundError as e:
        raise NotFoundError(f"{what}: no such branch, tag or commit") from e
    except (errors.LocalEntryNotFoundError, *_transport_errors()) as e:
        raise HubError(
            f"{what}: the Hub cannot be reached ({e}) and no cached copy was found"
        ) from e
    except errors.HfHubHTTPError as e:
        raise HubError(f"{what}: the Hub refused the download ({e})") from e


def _transport_errors() -> tuple[type[Exception], ...]:
    """Connection failures: huggingface_hub 1.x raises httpx's, 2.x those of its fork httpx2."""
    found = []
    for name in ("httpx", "httpx2"):
        with suppress(ImportError):
            found.append(importlib.import_module(name).TransportError)
    return tuple(found)
