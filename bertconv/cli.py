"""The `bertconv` command. Heavy imports (torch, transformers) happen inside the commands, so that
`bertconv --help` stays instant. Errors become one message on stderr and an exit code, here only."""

import functools
import gc
import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from .errors import BertconvError, Interrupted, NotBertError, OutputError, UsageError, listed

INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug in bertconv, never the user's doing
# glibc's mallopt parameter: blocks from this size on are mapped, and unmapped when freed
M_MMAP_THRESHOLD = -3

app = typer.Typer(
    add_completion=False,
    rich_markup_mode="markdown",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Bring official pretrained BERT weights into from-scratch BERT code, and prove that they "
    "compute the same thing. Exit codes: 0 ok, 1 verify found a difference, 2 usage, 3 not found, "
    "4 bad checkpoint, 5 Hub unreachable or download broken, 6 missing extra, 7 output not "
    "writable, 8 gated repository (log in), 70 a bug in bertconv, 130/143 interrupted. "
    "Your own BERT: `infer` writes a table for it, `verify --model` proves it.",
)


def _layout_name(name: str | None) -> str | None:
    from .tables import canonical  # torch-free, tomllib only

    return canonical(name)


LayoutOption = Annotated[
    str,
    typer.Option(
        "--to",
        callback=_layout_name,
        help="Layout to write: a shipped one (`bertconv layouts` lists them) or a table file "
        "(./mybert.toml; `bertconv infer` writes one for your model).",
    ),
]
Source = Annotated[
    str, typer.Argument(help="Checkpoint directory (or a weights file in one), or a Hub model id.")
]
Out = Annotated[
    Path | None,
    typer.Option(help="Output directory [default: ./NAME-LAYOUT]. Files in it are replaced whole."),
]
Revision = Annotated[
    str | None, typer.Option(help="Branch, tag or commit on the Hub [default: main].")
]


def _from_layout(otherwise: str):
    """--from, whose default is what bertconv recorded, else `otherwise`."""
    return Annotated[
        str | None,
        typer.Option(
            "--from",
            callback=_layout_name,
            help="Layout SOURCE is in, a shipped one or a table file [default: what bertconv "
            f"recorded in it (written in a table of yours: its copy beside it), else {otherwise}].",
        ),
    ]


FromLayout = _from_layout("transformers'")
HeadsOption = Annotated[
    bool | None,
    typer.Option(
        "--heads/--no-heads",
        help="Keep every group of the source (fail where the layout has no place for one), or "
        "none but the pooler [default: every group the layout has a place for].",
    ),
]
Groups = Annotated[
    str | None,
    typer.Option(
        help="Keep exactly these groups, comma-separated: the pooler and heads by name "
        "(`bertconv inspect` shows a checkpoint's; a wrong name is answered with them all).",
    ),
]


def say(message: str) -> None:
    typer.echo(printable(message), err=True)


def show(text: str, **kwargs) -> None:
    """Results on stdout, as say() does messages: strangers' strings never drive the terminal."""
    typer.echo(printable(text), **kwargs)


def printable(text: str) -> str:
    """`text` with every character a terminal would act on (escape sequences, carriage
    returns, bidirectional overrides) written as its escape; line breaks are kept, for bertconv's
    own messages have several lines (names from files never hold one: they are refused)."""
    return "".join(c if c.isprintable() or c == "\n" else ascii(c)[1:-1] for c in text)


def command(function):
    """A command of the app whose Ctrl-C (or SIGTERM) reaches main() as a bertconv error: typer
    would turn it into a bare exit 130 before main() could say what became of the output."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except KeyboardInterrupt as e:
            number = e.args[0] if e.args and isinstance(e.args[0], int) else signal.SIGINT
            what = "terminated (SIGTERM)" if number == signal.SIGTERM else "interrupted (Ctrl-C)"
            raise Interrupted(
                f"{what}; files being written were removed, the output directory is as it was",
                number,
            ) from None

    return app.command()(run)


@command
def layouts() -> None:
    """List the layouts, the parameter-naming schemes bertconv converts between."""
    from .tables import describe_layouts

    rows = describe_layouts()
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        show(f"{name:{width}s} {description}")


@command
def convert(
    source: Source,
    to: LayoutOption = "bertconv",
    out: Out = None,
    revision: Revision = None,
    from_layout: FromLayout = None,
    heads: HeadsOption = None,
    groups: Groups = None,
) -> None:
    """Convert a checkpoint into another layout's names.

    Writes OUT/model.safetensors, OUT/config.json and the tokenizer files.

    SOURCE is a local directory (config.json with model.safetensors, sharded safetensors, or
    pytorch_model.bin, read with weights_only=True; or a TensorFlow checkpoint), a weights file
    in one (bert.pt: config.json is read beside it), or a Hub model id, fetched with
    huggingface_hub. The source and its revision are recorded in the safetensors metadata.
    Nothing is half-written: files are written aside and renamed into place.

    Any of transformers' BERT classes converts: the pooler and each head are named groups
    (`bertconv inspect` lists a checkpoint's); those the layout has no place for are left out,
    and said to be."""
    from .api import convert_checkpoint, resolve

    selection = _checked_options(to, source, heads, groups)
    src = resolve(source, revision, say)
    out = out or _default_out(src.name, to)
    _report(convert_checkpoint(src, out, to, from_layout, selection), to, out)
    typer.echo(out)


@command
def fetch(
    model_id: Annotated[str, typer.Argument(help="Hub model id, e.g. bert-base-uncased.")],
    revision: Revision = None,
    to: LayoutOption = "bertconv",
    out: Out = None,
    heads: HeadsOption = None,
    groups: Groups = None,
) -> None:
    """Download a checkpoint from the Hugging Face Hub and convert it.

    Only config.json, the tokenizer files and one form of the weights are downloaded
    (model.safetensors, else its shards, else pytorch_model.bin read with weights_only=True),
    into huggingface_hub's cache, and each is checked against the ETag the Hub sent (sha256).
    A second fetch of the same commit into the same OUT does nothing and says so. Where the
    Hub cannot be reached, a cached copy is used, and said to be. HF_ENDPOINT, HF_TOKEN, HF_HOME
    and HF_HUB_OFFLINE are honoured."""
    from .api import fetch as fetch_model
    from .hub import is_repo_id

    if not is_repo_id(model_id):
        raise UsageError(
            f"{model_id!r} is not a Hub model id (org/name); for a directory use `convert`"
        )
    selection = _checked_options(to, model_id, heads, groups)
    out = out or _default_out(model_id, to)
    remote, result = fetch_model(model_id, out, to, revision, selection, say)
    if result is None:
        say(
            f"{out} already holds {model_id} at {remote.commit} in the {to!r} layout: nothing to do"
        )
    else:
        if not remote.offline:  # a cached copy: said once, as it was used (api.fetch_source)
            say(f"fetched {model_id} at commit {remote.commit}")
        _report(result, to, out)
    typer.echo(out)


def _checked_options(to: str, source: str, heads: bool | None, groups: str | None):
    """The groups to write (--heads/--no-heads or --groups), with --to's table read now, so that
    a wrong --to fails before anything is read or fetched: one that is not there, or one that
    bertconv recognises but never converts into."""
    from .convert import Selection, check_convertible
    from .tables import describe, every_layout, is_table_file

    if not is_table_file(to) and to not in every_layout():
        raise UsageError(f"--to {to!r}: no such layout; one of {', '.join(every_layout())}")
    describe(to)
    check_convertible(None, to, source)
    if groups is None:
        return Selection.of(heads)
    if heads is not None:
        raise UsageError("--groups names the groups to keep; leave out --heads/--no-heads")
    return Selection.of([g.strip() for g in groups.split(",") if g.strip()])


def _default_out(name: str, to: str) -> Path:
    return Path(f"{Path(name).name}-{Path(to).stem}")


def _report(converted, to: str, out: Path) -> None:
    result = converted.conversion
    for group, why in result.dropped.items():
        say(f"left out the {group} group: {why}")
    if result.slots:
        say(f"skipped {result.slots} optimizer slots (adam_m, adam_v): training state, no weight")
    if result.skipped:
        say(f"skipped {listed(result.skipped)}: not weights (buffers, a step count)")
    if names := converted.nonfinite:
        say(
            f"warning: {len(names)} tensors of the source hold NaN or Inf, copied as they are: "
            + listed(names)
        )
    groups = ", ".join(sorted(result.groups)) or "the encoder alone"
    say(
        f"wrote {len(result.state_dict)} tensors in the {to!r} layout to {out} "
        f"({result.model_class}: {groups})"
    )


@command
def inspect(
    source: Source,
    revision: Revision = None,
    from_layout: _from_layout("the layout whose names place the most of its tensors") = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
) -> None:
    """Describe a checkpoint without converting it.

    The layout it is in (recorded by bertconv, or the one whose names place most of its
    tensors), the model class and groups its tensors make, its config, parameter count and
    dtypes, and any tensor no table accounts for, with why it would not convert."""
    from dataclasses import asdict

    from .api import inspect as describe

    found = describe(source, revision, from_layout)
    show(json.dumps(asdict(found), indent=2) if as_json else format_inspection(found))


# How inspect shows each config field, in order (the labels only for a classifier's groups).
CONFIG_SHOWN = (
    ("num_hidden_layers", "{} layers"), ("hidden_size", "hidden {}"),
    ("num_attention_heads", "{} heads"), ("intermediate_size", "intermediate {}"),
    ("vocab_size", "vocab {}"), ("max_position_embeddings", "{} positions"),
    ("type_vocab_size", "{} token types"), ("hidden_act", "{}"), ("num_labels", "{} labels"),
    ("position_embedding_type", "{} position embeddings"),
)  # fmt: skip


def _config_line(found) -> str:
    """The config's fields; where they were read off the weights' shapes, those the shapes do
    not show are named, not guessed."""
    c = found.config
    labels = {"classifier", "token_classifier"} & set(found.groups)
    relative = c["position_embedding_type"] not in ("absolute", None)
    shown = {"num_labels": bool(labels), "position_embedding_type": relative}
    fields = [(k, form) for k, form in CONFIG_SHOWN if shown.get(k, True)]
    line = ", ".join(form.format(c[k]) for k, form in fields if c[k] is not None)
    if found.config_from == "config.json":
        return line
    unknown = [k for k, _ in fields if c[k] is None]
    note = f"; they do not show {', '.join(unknown)}" if unknown else ""
    return f"{line} (read off {found.config_from}{note})"


def format_inspection(found) -> str:
    lines = [
        found.source,
        f"  type        {found.model_type}",
        f"  layout      {found.layout} ({found.layout_found})",
        f"  class       {found.model_class or '-'} (groups: {', '.join(found.groups) or 'none'})",
        f"  config      {_config_line(found)}",
        f"  parameters  {found.parameters:,} in {found.tensors} tensors, "
        f"{found.bytes / 1e6:.1f} MB ({', '.join(f'{d}: {n}' for d, n in found.dtypes.items())})",
        f"  unplaced    {listed(found.unplaced) or 'none'}",
    ]
    if found.problems:
        lines.append("  would not convert:")
        lines += [f"    {line}" for line in found.problems.splitlines()]
    return "\n".join(lines)


@command
def infer(
    model: Annotated[
        str,
        typer.Argument(
            help="Your BERT: PKG.MODULE:NAME or path/to/file.py:NAME, a class called with the "
            "config or a function returning an nn.Module."
        ),
    ],
    config: Annotated[
        Path | None,
        typer.Option(
            help="A config.json to build it with [default: a small one whose sizes all differ]."
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write the table there [default: print it].")
    ] = None,
) -> None:
    """Write a mapping table for your own BERT.

    Builds your model on a small config whose sizes all differ and traces one forward at the
    level of torch functions: how it uses each parameter (one projection's weight and bias, used
    as F.linear or x @ W; a LayerNorm's gamma and beta, by nn.LayerNorm or by hand; an embedding
    table; query, key and value fused) and in which order says what each is, whatever its name.
    Heads too (masked LM with a tied decoder, NSP, classifier, QA). The assignment is checked by
    running your model with random weights against bertconv's BERT of the same class, part by
    part, alternatives tried where a part differs; the table written is one with which every
    output agrees within 1e-5. A model no table makes compute BERT (a pre-LayerNorm block, a
    pooler without tanh, a missing part) is refused, saying where the closest diverges (exit 1);
    your code raising or exiting is reported with where (exit 2). Then: `bertconv convert CKPT
    --to TABLE` and `bertconv verify CKPT --model MODEL --layout TABLE`."""
    from .files import read_json_object
    from .yours.infer import infer as run_infer

    if out is not None:
        _check_table_out(out, [model.rpartition(":")[0], config])
    found = run_infer(model, read_json_object(config) if config else None, _dense_of(config))
    if found.text is None:
        raise NotBertError(f"{model}: {found.reason}")
    checked = ", ".join(f"{k} {v:.1e}" for k, v in found.checked.items())
    say(f"inferred a table for {model} from {found.trials} candidate(s); max abs: {checked}")
    for note in found.notes:
        say(f"note: {note}")
    if out is None:
        show(found.text, nl=False)
        return
    _write_table(out, found.text)
    say(f"wrote {out}")
    typer.echo(out)


def _dense_of(config: Path | None):
    """The Dense layer of the sentence-transformers directory --config lies in, if any."""
    from .sentence import read_pipeline

    pipeline = read_pipeline(Path(config).parent) if config else None
    return pipeline.dense if pipeline is not None else None


def _check_table_out(out: Path, reads: list) -> None:
    """infer writes a table, and replaces nothing but a table: never a file it reads (the model's
    code, the config), never anything else (`--out mybert.py` for `mybert.toml`)."""
    from .files import is_present
    from .tables import raw

    for read in reads:
        if read and Path(read).is_file() and out.exists() and os.path.samefile(out, read):
            raise UsageError(f"--out {out}: is {read}, which infer reads; choose another --out")
    if not is_present(out):
        return
    if not out.is_file():
        raise UsageError(f"--out {out}: is not a file; give the path of the table to write")
    try:
        raw(str(out))  # against the official names its [holding] says (ModernBERT's, ...)
    except BertconvError:
        raise UsageError(
            f"--out {out}: exists and is not a mapping table; infer replaces only a table. "
            "Choose another --out (a .toml file)"
        ) from None


def _write_table(out: Path, text: str) -> None:
    """Written aside, then renamed into place: never half a table."""
    from contextlib import suppress

    from .files import partial

    tmp = partial(out)
    try:
        tmp.write_text(text)
        os.replace(tmp, out)
    except OSError as e:
        with suppress(OSError):  # a read-only file system refuses even that
            tmp.unlink(missing_ok=True)
        raise OutputError(f"{out}: cannot write the table ({e.strerror or e})") from None


@command
def verify(
    source: Annotated[
        str,
        typer.Argument(
            help="Checkpoint directory, official or converted (or a weights file in one), or a "
            "Hub model id."
        ),
    ],
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    dtype: Annotated[str, typer.Option(help="float32, bfloat16 or float16.")] = "float32",
    revision: Revision = None,
    from_layout: FromLayout = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Your own BERT instead of bertconv's: PKG.MODULE:NAME or path/to/file.py:NAME, "
            "a class called with the config, or a function returning an nn.Module "
            "[default: bertconv's model]."
        ),
    ] = None,
    layout: Annotated[
        str | None,
        typer.Option(
            help="With --model: the table of its names (a shipped layout or a .toml file) "
            "[default: the shipped layout whose names are exactly the model's]."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Prove parity with transformers, layer by layer.

    Runs bertconv's model and transformers' (the class the checkpoint's groups make) on the same
    weights and inputs, and compares every layer's hidden states (real tokens only), the pooler,
    and every head's outputs, each row named after its group. With --model, your own class
    instead, with no change to your code: its forward called by parameter name (or by
    elimination; a model without a mask gets padding of its pad id), the checkpoint converted
    into its names once and loaded strictly, every hidden state read from a trace of its torch
    calls where it computes it, the pooler as it computes it (no tanh added).

    Inputs: text through the checkpoint's own tokenizer (padded, both token types), a batch of
    random ids, and random ids of every position the checkpoint has (where it alone differs in
    float32, compared in float64 by both models: float32's own rounding over so many positions
    nears the tolerance); each short shape twice, padded otherwise. Tolerance: in float32, max abs
    difference <= 1e-5 (TF32 off); in bfloat16 and float16, our error against
    transformers-in-float32 at most twice transformers' own error in that dtype. Exits 0 within
    tolerance, 1 otherwise. Needs the `verify` extra (transformers)."""
    from .verify import verify as run_verify

    if layout is not None and model is None:
        raise UsageError("--layout names the table of --model's names; give --model too")
    report = run_verify(source, device, dtype, revision, from_layout, model, layout)
    show(json.dumps(_strict(report.to_dict()), indent=2) if as_json else format_report(report))
    raise typer.Exit(0 if report.passed else 1)


def _freed_is_returned() -> None:
    """For the command's process, that runs models one after another (verify, infer): glibc's
    malloc hands a freed tensor's memory back to the system, not only to this process's next
    allocation. By default it raises its threshold for doing so to the largest block freed, so
    that what one model frees stays held, scattered, while the next grows beside it (verify
    --model's peak varied from 700 to 850 MB on MiniLM; with a fixed threshold, 700 every
    time, no slower). A C library without mallopt (not glibc) is left as it is. The command's
    own setting, made in `main`: bertconv as a library, or `run` in a process of the caller's
    (which may allocate more often than it would free), never changes it."""
    import ctypes

    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, 256 << 10)  # bytes; fixed, so no longer raised


def _strict(value):
    """JSON that every parser reads: a NaN or an infinity (a model's output) as null, and
    `nonfinite_values` true beside it, since JSON has no such numbers."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return None
    if isinstance(value, dict):
        out = {k: _strict(v) for k, v in value.items()}
        if any(v is None and value[k] is not None for k, v in out.items()):
            out["nonfinite_values"] = True
        return out
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


def _float64(report) -> str:
    if not report.in_float64:
        return ""
    return (
        f" ({', '.join(report.in_float64)} in float64: in float32 it alone differed beyond the "
        "tolerance, where float32's own rounding over so many positions nears it; in float32 "
        "too, below)"
    )


def format_report(report) -> str:
    low = report.dtype != "float32"
    w = max([12, *(len(row.name) for row in report.rows)])  # the rows' names in one column
    head = f"{'':{w}s} {'max abs':>10s} {'mean abs':>10s} {'limit':>10s}"
    head += f" {'their error':>13s}" if low else ""
    lines = [
        f"parity of {report.source} ({report.model_class}) on {report.device}, {report.dtype}; "
        f"inputs: {', '.join(report.inputs)}, each short shape twice, padded otherwise; "
        f"sequences of up to {report.longest_sequence} tokens{_float64(report)}",
        head + "  ok",
    ]
    for row in report.rows:
        line = f"{row.name:{w}s} {row.max_abs:10.2e} {row.mean_abs:10.2e} {row.limit:10.2e}"
        line += f" {row.reference_max_abs:13.2e}" if low else ""
        lines.append(line + ("  ok" if row.passed else "  FAIL"))
    if (full := report.float32_full) is not None:  # said as a sentence: it is no row
        where = "within" if full.passed else "FAILS, outside"
        lines.append(
            f"in float32 too, the batch of every position: max abs {full.max_abs:.2e}, {where} "
            f"{full.limit:.0e}"
        )
    lines += [f"note: {note}" for note in report.notes]
    if report.nonfinite:
        lines.append(f"weights holding NaN or Inf ({len(report.nonfinite)}):")
        lines += [f"  {name}" for name in report.nonfinite]
    if report.diagnosis is not None:
        lines.append(report.diagnosis.message())
    failed = "weights hold NaN or Inf" if report.nonfinite else "outside tolerance"
    lines.append("PASSED" if report.passed else f"FAILED: {failed}")
    return "\n".join(lines)


def _terminate(number: int, frame) -> None:
    raise KeyboardInterrupt(number)  # so that SIGTERM cleans up as Ctrl-C does


def run(args: list[str] | None = None) -> int:
    """Run one command line (sys.argv's by default) and return its exit code. A BertconvError
    becomes its message on stderr; so does a bug, in one line, never a traceback."""
    try:
        app(args=args, prog_name="bertconv")
    except SystemExit as e:  # typer's way of ending, with the code
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except BertconvError as e:
        say(f"bertconv: error: {e.on_the_command_line()}")
        return e.exit_code
    except KeyboardInterrupt:
        say("bertconv: interrupted (Ctrl-C)")
        return 130
    except Exception as e:
        if os.environ.get("BERTCONV_DEBUG"):
            raise
        say(
            f"bertconv: internal error: {type(e).__name__}: {e}. This is a bug in bertconv: "
            "please report it, with the traceback BERTCONV_DEBUG=1 prints"
        )
        return INTERNAL_ERROR
    return 0


def main() -> None:
    """The `bertconv` command."""
    # What is imported by now (typer, mostly) lives until exit: out of the collector's sight,
    # it is not walked at each collection nor at exit, which saves ~8 ms a command.
    gc.freeze()
    signal.signal(signal.SIGTERM, _terminate)
    if set(sys.argv[1:2]) & {"verify", "infer"}:
        _freed_is_returned()
    sys.exit(run())
