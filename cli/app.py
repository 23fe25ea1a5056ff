"""The `quotaflow` command line on click: each command group's declared flags become click commands (I/O shell).

Each command group module declares its flags once, with argparse's `add_argument` calls
(`register(...)` in cli/*.py), and keeps its handler taking an `argparse.Namespace`. This
module turns that declaration tree into click groups and commands, so parsing, per-command
help, "did you mean" for mistyped commands and options, shell completion and environment
defaults are click's. Keeping the declarations in argparse's vocabulary lets every command
group add flags without knowing about click (docs/cli.md, "The CLI library").
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable
from typing import Any

import click

ENV_PREFIX = "QUOTAFLOW"

# Run on the parsed arguments before any handler (e.g. to make client settings the default).
PREPARE: list[Callable[[argparse.Namespace], object]] = []


class _Group(click.Group):
    """A group that suggests the closest command for a typo."""

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.5)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            raise click.UsageError(f"no such command {name!r}{hint}", ctx)
        return super().resolve_command(ctx, args)


class _ArgparseType(click.ParamType):  # type: ignore[type-arg,unused-ignore]  # generic from click 8.4
    """An argparse `type=` callable as a click type: its ArgumentTypeError is the message."""

    def __init__(self, convert: Callable[[str], Any]) -> None:
        self._convert = convert
        word = getattr(convert, "__name__", "")
        self.name = "integer" if "int" in word else "number" if "float" in word else "value"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return self._convert(value)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            self.fail(str(exc) or f"{value!r} is not valid", param, ctx)


def _click_type(action: argparse.Action) -> Any:
    if action.choices is not None:
        return click.Choice([str(c) for c in action.choices])
    if action.type is None or action.type is str:
        return click.STRING
    if action.type is int:
        return click.INT
    if action.type is float:
        return click.FLOAT
    return _ArgparseType(action.type)  # type: ignore[arg-type]


def _help(action: argparse.Action) -> str | None:
    if action.help is None or action.help == argparse.SUPPRESS:
        return None
    return action.help.replace("%(default)s", str(action.default)).replace("%%", "%")


def _param(action: argparse.Action) -> click.Parameter | None:
    """One argparse action as a click parameter (None for --help, which click adds itself)."""
    if isinstance(action, argparse._HelpAction):
        return None
    if not action.option_strings:
        nargs = -1 if action.nargs in ("*", "+") else 1
        required = action.nargs not in ("?", "*")
        extra: dict[str, Any] = {} if required else {"default": action.default}
        # An explicit default, even None, would make a required argument optional.
        return click.Argument(
            [action.dest],
            type=_click_type(action),
            nargs=nargs,
            required=required,
            metavar=action.metavar or action.dest.upper(),
            **extra,
        )
    names = list(action.option_strings)
    common: dict[str, Any] = {"help": _help(action), "expose_value": True}
    if isinstance(action, argparse.BooleanOptionalAction):
        positive = [n for n in names if not n.startswith("--no-")]
        negative = [n for n in names if n.startswith("--no-")]
        return click.Option(
            [f"{positive[0]}/{negative[0]}", action.dest],
            default=action.default,
            **common,
        )
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        return click.Option(
            [*names, action.dest],
            is_flag=True,
            flag_value=isinstance(action, argparse._StoreTrueAction),
            default=action.default,
            **common,
        )
    if isinstance(action, argparse._AppendAction):
        return click.Option(
            [*names, action.dest],
            multiple=True,
            type=_click_type(action),
            metavar=action.metavar,
            **common,
        )
    if isinstance(action, argparse._StoreAction):
        extra = {"required": True} if action.required else {"default": action.default}
        return click.Option(
            [*names, action.dest],
            type=_click_type(action),
            **extra,
            metavar=action.metavar,
            show_default=action.default not in (None, "", False),
            **common,
        )
    raise TypeError(f"cli.app cannot express argparse action {type(action).__name__}")


def _namespace(parser: argparse.ArgumentParser, params: dict[str, Any]) -> argparse.Namespace:
    values: dict[str, Any] = dict(parser._defaults)
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        value = params.get(action.dest, action.default)
        if isinstance(action, argparse._AppendAction):
            value = list(value) if value else (action.default or [])
        elif action.nargs in ("*", "+") and isinstance(value, tuple):
            value = list(value)
        values[action.dest] = value
    return argparse.Namespace(**values)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    out: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out[choice.dest] = choice.help or ""
    return out


def to_click(
    parser: argparse.ArgumentParser, name: str, help_text: str | None = None
) -> click.Command:
    """The parser and its subcommands as a click group or command, the handler called on a Namespace."""
    children = _subparsers(parser)
    description = help_text or parser.description
    if children:
        helps = _helps(parser)
        group = _Group(name, help=description, no_args_is_help=True)
        for child_name, child in children.items():
            group.add_command(to_click(child, child_name, helps.get(child_name)))
        return group
    params = [p for p in (_param(a) for a in parser._actions) if p is not None]

    def callback(**kwargs: Any) -> int:
        args = _namespace(parser, kwargs)
        for prepare in PREPARE:
            prepare(args)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)

    return click.Command(name, params=params, callback=callback, help=description)


def build(parser: argparse.ArgumentParser) -> click.Command:
    return to_click(parser, "quotaflow")


def run(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """Parses argv with click and runs the handler; usage errors become one line (exit 2)."""
    command = build(parser)
    try:
        result = command.main(
            args=argv,
            prog_name="quotaflow",
            standalone_mode=False,
            auto_envvar_prefix=ENV_PREFIX,
            max_content_width=100,
        )
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "", err=False)
        return 0
    except click.UsageError as exc:
        from cli.common import EXIT_USAGE, CliError

        where = exc.ctx.command_path if exc.ctx is not None else "quotaflow"
        message = " ".join(exc.format_message().split())
        raise CliError(f"{where}: {message} (see {where} --help)", EXIT_USAGE) from None
    except click.exceptions.Abort:
        raise KeyboardInterrupt from None
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    if result is None:  # --help, or completion
        return 0
    return int(result)
