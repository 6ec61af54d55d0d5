"""bertconv's exceptions. Each carries the exit code the command line gives it (README: Exit codes);
the library raises them and never prints. Every failure of `load`, `convert`, `fetch` and
`verify` that a file or a user can cause is one of these."""


class BertconvError(Exception):
    """Something the user can act on; the message says what and what to do."""

    exit_code = 1


class NotBertError(BertconvError):
    """A user's model that no table makes compute what BERT computes (bertconv infer)."""

    exit_code = 1


class UsageError(BertconvError):
    """The command was asked for something it cannot do (an unknown layout, say)."""

    exit_code = 2


class UserCodeError(UsageError):
    """The user's own model (`--model`, `infer`) raised or exited in its import, its build or its
    forward: the message is theirs, with where in their code."""


class TableError(UsageError):
    """A mapping table that does not follow the tables' schema; the message names the row."""


class NotFoundError(BertconvError):
    """No such directory, file, Hub repository or revision."""

    exit_code = 3


class CheckpointError(BertconvError):
    """The checkpoint's tensors or config do not fit the model: missing, unexpected, wrong shape,
    unsupported settings, unreadable or malformed files."""

    exit_code = 4


class HubError(BertconvError):
    """The Hugging Face Hub could not be reached or refused the download."""

    exit_code = 5


class MissingDependencyError(BertconvError):
    """An optional extra is needed for this command."""

    exit_code = 6


class OutputError(BertconvError):
    """The output could not be written (disk full, no permission); nothing was left half-written."""

    exit_code = 7


class IntegrityError(HubError):
    """A downloaded or cached file does not match the ETag the Hub gave for it."""


class AuthError(HubError):
    """The repository is gated or private, and the request carried no token it accepts."""

    exit_code = 8


class Interrupted(BertconvError):
    """Ctrl-C or SIGTERM arrived; what was being written has been removed."""

    def __init__(self, message: str, signal_number: int):
        super().__init__(message)
        self.exit_code = 128 + signal_number  # the shell's convention: 130 for SIGINT
