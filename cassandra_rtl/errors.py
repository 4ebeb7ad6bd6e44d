"""Exception types shared by every part of the toolkit.

User errors (bad files, bad configs, missing tools) derive from ``UserError`` and are reported by the
CLI as one line; so are OS errors (missing/unreadable files, a full disk) and MemoryError. Anything else
is a bug and keeps its traceback.
"""


class UserError(Exception):
    """Base of all errors caused by input or environment, not by a bug."""


class ConfigError(UserError, ValueError):
    """An invalid codec / hardware / model configuration."""


class FormatError(UserError, ValueError):
    """A corrupt, truncated, wrong-version or otherwise malformed stream or container."""


class InputError(UserError, ValueError):
    """An unsupported input file, dtype or shape."""


class ToolMissingError(UserError, RuntimeError):
    """A required external tool (simulator, yosys, ...) is not installed; the message says how to install it."""


def is_user_error(exc: BaseException) -> bool:
    from .cli import CliError

    return isinstance(exc, (UserError, CliError, OSError, MemoryError))


def describe(exc: BaseException) -> str:
    """One line for the CLI: the message of a user error, 'FILE: reason' for an OS error."""
    if isinstance(exc, MemoryError):
        return f"not enough memory ({exc or 'the input is too large for this machine'})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__
