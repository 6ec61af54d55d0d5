"""bertconv's exceptions. Each carries the exit code the command line gives it (docs/exit-codes.md),
named where the class is declared; the library raises them and never prints. Every failure of
`load`, `convert`, `fetch` and `verify` that a file or a user can cause is one of these."""

from collections.abc import Iterable

# How many names a message lists before it says how many more there are: a checkpoint of the
# wrong model can miss every one of its hundreds of tensors.
LISTED = 12


def listed(items: Iterable, sep: str = ", ") -> str:
    """`a, b, c, and 4 more`: the first LISTED of `items`, then how many it leaves out."""
    names = [str(item) for item in items]
    more = [f"and {len(names) - LISTED} more"] if len(names) > LISTED else []
    return sep.join(names[:LISTED] + more)


class Given(str):
    """A model's PKG.MODULE:NAME as the user gave it, which messages name: `MODEL 'x.py:M'`
    (infer's argument) where `--model 'x.py:M'` (verify's option) is not what was typed."""

    said: str


def given_as(spec: str, how: str) -> Given:
    found = Given(spec)
    found.said = f"{how} {spec!r}"
    return found


def said(spec: str) -> str:
    """How messages name the model: as the user gave it (verify's `--model` by default)."""
    return getattr(spec, "said", f"--model {spec!r}")


class BertconvError(Exception):
    """Something the user can act on; the message says what and what to do: in Python's terms
    (`layout=`), and on the command line in its own (`on_the_command_line`: `--from`)."""

    exit_code = 1

    def on_the_command_line(self) -> str:
        return str(self)

    def __init_subclass__(cls, exit_code: int | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class NotBertError(BertconvError):
    """A user's model that no table makes compute what BERT computes (bertconv infer)."""


class UsageError(BertconvError, exit_code=2):
    """The command was asked for something it cannot do (an unknown layout, say)."""


class UserCodeError(UsageError):
    """The user's own model (`--model`, `infer`) raised or exited in its import, its build or its
    forward: the message is theirs, with where in their code. `did`: what their code did (raised
    what, where), for a note that says so without the rest of the message."""

    def __init__(self, message: str, did: str = ""):
        super().__init__(message)
        self.did = did or message


class TableError(UsageError):
    """A mapping table that does not follow the tables' schema; the message names the row."""


class NotFoundError(BertconvError, exit_code=3):
    """No such directory, file, Hub repository or revision."""


class CheckpointError(BertconvError, exit_code=4):
    """The checkpoint's tensors or config do not fit the model: missing, unexpected, wrong shape,
    unsupported settings, unreadable or malformed files."""


class UnnamedTable(CheckpointError):
    """A file bertconv wrote with a table file of the user's (`file:NAME.toml`) that is not at
    hand: neither beside it as recorded, nor named."""

    def __init__(self, source: str, name: str, why: str):
        self.source, self.name, self.why = source, name, why
        super().__init__(self._said(f"layout='path/to/{name}'"))

    def _said(self, naming: str) -> str:
        return (
            f"{self.source}: written with your table {self.name} ({self.why}); name that "
            f"table: {naming}"
        )

    def on_the_command_line(self) -> str:
        also = "with verify --model, --layout names it too"
        return self._said(f"--from path/to/{self.name} ({also})")


class HubError(BertconvError, exit_code=5):
    """The Hugging Face Hub could not be reached or refused the download."""


class MissingDependencyError(BertconvError, exit_code=6):
    """An optional extra is needed for this command."""


class OutputError(BertconvError, exit_code=7):
    """The output could not be written (disk full, no permission); nothing was left half-written."""


class IntegrityError(HubError):
    """A downloaded or cached file does not match the ETag the Hub gave for it."""


class AuthError(HubError, exit_code=8):
    """The repository is gated or private, and the request carried no token it accepts."""


class Interrupted(BertconvError):
    """Ctrl-C or SIGTERM arrived; what was being written has been removed."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number  # the shell's convention: 130 for SIGINT
