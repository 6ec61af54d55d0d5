"""Your own BERT's module, imported as Python would import it, and its code fenced: what it
prints goes to stderr, its exits and exceptions are reported as its own (where in its code),
what it changes of torch is recorded (and undone for bertconv's own arithmetic and
transformers'), and what it changes of the process is put back after each call.
"""

import importlib
import importlib.util
import inspect
import os
import re
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from contextlib import contextmanager, redirect_stdout, suppress
from pathlib import Path

import torch
from torch import nn

from ..errors import UsageError, UserCodeError, said


def import_factory(spec: str) -> Callable:
    """The class or function `spec` names: `package.module:Name` or `path/to/file.py:Name`. torch
    as shipped first (no other model's patches), then as this model's module leaves it (PATCHES)."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise UsageError(f"{said(spec)}: expected PKG.MODULE:NAME or path/to/file.py:NAME")
    path, module_name, root = Path(where), where, Path.cwd()
    if where.endswith(".py") or "/" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"{said(spec)}: cannot import {where} (no such file {path})")
        module_name, root = _module_name(path)
    unpatch()
    spaces = _torch_namespaces()
    before = _attributes(spaces)
    if not SHIPPED:
        SHIPPED.update(before)
    with guarded(spec, f"importing {where}"), _importing(root, str(path)):
        if module_name != where:
            module = _exec_file(module_name, path)
        else:  # a module by its dotted name
            try:
                module = importlib.import_module(where)
            except ModuleNotFoundError as e:
                if e.name is None or not where.startswith(e.name):
                    raise  # the module's own imports: its error
                raise UsageError(
                    f"{said(spec)}: cannot import {where} (ModuleNotFoundError: {e})"
                ) from None
    _apply(PATCHES.setdefault(module.__name__, _patches(spaces, before)))  # imported before: redone
    factory = getattr(module, name, None)
    if not callable(factory):
        raise UsageError(f"{said(spec)}: {where} has no class or function {name!r}")
    return factory


MISSING = object()
# What each model's module changed in torch when it was imported, by module name, and what is in
# effect now: {(namespace, attribute): (the namespace, torch's own value or MISSING, the module's)}.
PATCHES: dict[str, dict[tuple[str, str], tuple]] = {}
APPLIED: dict[tuple[str, str], tuple] = {}
# torch's attributes before the first model's module was imported: what differs from them
# later, that no import recorded (a forward that patches torch as it runs), is put back too
# while bertconv computes (`shipped`).
SHIPPED: dict[tuple[str, str], object] = {}


def _torch_namespaces() -> dict[str, object]:
    """Where a model's module may patch torch, by name: torch, torch.Tensor, torch.nn and its
    modules (functional, init, ...), nn's module classes."""
    spaces = {n: m for n, m in list(sys.modules.items()) if n.startswith("torch.nn") and m}
    classes = {f"torch.nn.{n}": c for n, c in vars(nn).items() if isinstance(c, type)}
    return {"torch": torch, "torch.Tensor": torch.Tensor} | spaces | classes


def _attributes(spaces: dict[str, object]) -> dict[tuple[str, str], object]:
    return {(n, a): value for n, space in spaces.items() for a, value in list(vars(space).items())}


def _patches(spaces: dict[str, object], before: dict) -> dict[tuple[str, str], tuple]:
    """What changed since `before`, but the submodules an import adds to its package."""
    after = _attributes(spaces)
    changed = {k for k in before.keys() | after.keys() if before.get(k) is not after.get(k)}
    changed -= {k for k in changed - before.keys() if inspect.ismodule(after[k])}
    return {k: (spaces[k[0]], before.get(k, MISSING), after.get(k, MISSING)) for k in changed}


def _set(space, attribute: str, value) -> None:
    if value is not MISSING:
        setattr(space, attribute, value)
    elif attribute in vars(space):
        delattr(space, attribute)


def _apply(patches: dict[tuple[str, str], tuple]) -> None:
    APPLIED.update(patches)
    for (_, attribute), (space, _, patched) in patches.items():
        _set(space, attribute, patched)


def unpatch() -> None:
    """torch as shipped again: every patch a model's module made undone."""
    for (_, attribute), (space, shipped, _) in APPLIED.items():
        _set(space, attribute, shipped)
    APPLIED.clear()


@contextmanager
def shipped():
    """torch as shipped while it runs (bertconv's own arithmetic, transformers'), then as the
    models left it: what their modules' imports changed, and what their forwards did."""
    applied = dict(APPLIED)
    unpatch()
    spaces = _torch_namespaces()
    now = {k: v for k, v in _attributes(spaces).items() if k in SHIPPED}
    later = {k: (spaces[k[0]], SHIPPED[k], v) for k, v in now.items() if v is not SHIPPED[k]}
    for (_, attribute), (space, before, _) in later.items():
        _set(space, attribute, before)
    try:
        yield
    finally:
        for (_, attribute), (space, _, after) in later.items():
            _set(space, attribute, after)
        _apply(applied)


def _module_name(path: Path) -> tuple[str, Path]:
    """The name Python would import a file under, and the directory that makes it importable: a
    file inside packages (beside an `__init__.py`) is `pkg.sub.file`, so that its relative
    imports work; any other is its stem, its own directory on the path."""
    if not path.stem.isidentifier():  # bert.v2.py, my-bert.py: imported by its path alone
        return "bertconv_user_" + re.sub(r"\W", "_", path.stem), path.parent
    parts, directory = [path.stem], path.parent
    while (directory / "__init__.py").is_file() and directory.name.isidentifier():
        parts.insert(0, directory.name)
        directory = directory.parent
    return ".".join(parts), directory


def _exec_file(module_name: str, path: Path):
    """Run the file as module `module_name`, in sys.modules while it runs and after, as an import
    would (a dataclass, `sys.modules[__name__]`, pickling need it). A file imported already is
    that module, as for Python; a name another module holds is not taken from it."""
    known = sys.modules.get(module_name)
    if known is not None:
        if Path(getattr(known, "__file__", "") or "").resolve() == path:
            return known
        module_name = f"bertconv_user.{module_name}"
    if "." in module_name and not module_name.startswith("bertconv_user."):
        importlib.import_module(module_name.rpartition(".")[0])  # its packages, for `from .x`
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = sys.modules[module_name] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]  # as a failed import leaves it
        raise
    return module


@contextmanager
def _importing(root: Path, program: str):
    """The model's directory importable (for its own imports of its neighbours), and sys.argv
    its own, as when Python runs it: a file that parses its arguments on import sees none."""
    saved_argv, sys.argv = sys.argv, [program]
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.argv = saved_argv
        if str(root) in sys.path:
            sys.path.remove(str(root))


@contextmanager
def guarded(spec: str, doing: str, advice: str = ""):
    """The user's code raising or exiting is reported as theirs: what, and where in their code
    (and `advice`, what to do); what it prints goes to stderr."""
    try:
        with users_code():
            yield
    except (UsageError, KeyboardInterrupt):
        raise
    except SystemExit as e:
        did = f"called sys.exit({e.code!r}){_where(e)}; bertconv compared nothing{advice}"
        raise UserCodeError(f"{said(spec)}: {doing}, the model's code {did}", did) from None
    except BaseException as e:  # the user's code: whatever it raises
        message = (str(e).splitlines() or [""])[0][:300]
        did = f"raised {type(e).__name__}: {message}{_where(e)}{advice}"
        raise UserCodeError(f"{said(spec)}: {doing}, the model's code {did}", did) from None


@contextmanager
def users_code():
    """The user's code running. What it prints (a `print` in a forward, a C extension's output)
    goes to stderr, at Python's level and the file descriptor's: stdout holds only bertconv's
    output, a table or a JSON report that must parse. What it changes of the process besides
    its model is put back after, so that bertconv goes on as the user started it: the working
    directory (`--out t.toml` stays where the user meant), sys.stdout and sys.stderr (its
    messages are seen), the handlers of Ctrl-C and SIGTERM, the recursion limit, the warning
    filters."""
    sys.stdout.flush()
    saved, kept = os.dup(1), _process_state()
    os.dup2(2, 1)
    try:
        with warnings.catch_warnings(), redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        _put_back(*kept)


HANDLED = ("SIGINT", "SIGTERM")  # the signals bertconv answers (cli.py, files.py)


def _process_state() -> tuple:
    try:
        cwd = os.getcwd()
    except OSError:  # removed from under us: nothing to go back to
        cwd = None
    handlers = {name: signal.getsignal(getattr(signal, name)) for name in HANDLED}
    return cwd, sys.stdout, sys.stderr, sys.getrecursionlimit(), handlers


def _put_back(cwd, stdout, stderr, recursion_limit: int, handlers: dict) -> None:
    if cwd is not None:
        with suppress(OSError):  # gone since: bertconv's own paths say so when used
            os.chdir(cwd)
    sys.stdout, sys.stderr = stdout, stderr
    sys.setrecursionlimit(recursion_limit)
    if threading.current_thread() is threading.main_thread():  # where handlers may be set
        for name, handler in handlers.items():
            if handler is not None and signal.getsignal(getattr(signal, name)) is not handler:
                signal.signal(getattr(signal, name), handler)


def raised_by_model(error: BaseException) -> bool:
    """Was `error` raised in the user's code (not in bertconv's, torch's or Python's)?"""
    return bool(_where(error))


def _where(error: BaseException) -> str:
    """` (at FILE:LINE, in FUNCTION)`: the last frame of the traceback outside torch, the
    standard library and bertconv, which is where the user's code was."""
    library = (f"{Path('bertconv')}/", "site-packages", "/lib/python3", "<frozen")
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if not any(part in f.filename for part in library)]
    return f" (at {own[-1].filename}:{own[-1].lineno}, in {own[-1].name})" if own else ""
