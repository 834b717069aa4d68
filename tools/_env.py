"""What the commands a tool starts can see of the host's environment: :class:`ToolEnv` and
:func:`tool_env` (the rules are in :class:`ToolEnv`'s docstring).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping

from liteagent.eventlog._shown import shown
from liteagent.eventlog.errors import InvalidArgumentError

__all__ = [
    "PROVIDER_CREDENTIALS",
    "SECRET_NAME_PARTS",
    "SECRET_NAME_WORDS",
    "ToolEnv",
    "is_withheld",
    "tool_env",
]

#: The provider credential variables (every one of them is also caught by the name rules).
PROVIDER_CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "OPENAI_API_KEY",
)
#: A name containing one of these (upper-cased) anywhere is withheld.
SECRET_NAME_WORDS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "APIKEY",
    "PRIVATEKEY",
    "ACCESSKEY",
    "CONNECTION_STRING",
)
#: A name with one of these as a whole part (split at non-alphanumerics) is withheld.
SECRET_NAME_PARTS = frozenset(
    {"KEY", "KEYS", "PASS", "AUTH", "DSN", "PAT", "JWT", "COOKIE", "PRIVATE", "WEBHOOK"}
)
_PARTS = re.compile(r"[^A-Z0-9]+")
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s@:]*:[^/\s@]+@")
_VALUE_SETTING = re.compile(
    r"(?:^|[^A-Za-z0-9_])(?:password|passwd|pwd|token|access_token|api_key|apikey|secret|"
    r"accountkey|sharedaccesskey)\s*=",
    re.IGNORECASE,
)


def is_withheld(name: str, value: str = "") -> bool:
    """Whether the default rule (see :class:`ToolEnv`) withholds ``name`` with ``value``."""
    upper = name.upper()
    if any(word in upper for word in SECRET_NAME_WORDS):
        return True
    parts = [p for p in _PARTS.split(upper) if p]
    if SECRET_NAME_PARTS.intersection(parts) or (len(parts) > 1 and "PWD" in parts):
        return True
    return bool(_URL_PASSWORD.search(value) or _VALUE_SETTING.search(value))


class ToolEnv:
    """The environment policy of the commands a tool starts; build it with :func:`tool_env`.
    Immutable; :meth:`environment` computes a child's environment, :meth:`withheld` lists what
    it leaves out.

    The ``bash`` tool runs the model's commands; nobody reviews them before they run. Their
    environment is therefore built, not inherited: by default it is the host process's environment
    (read when the command starts) **less every variable that looks like a credential**. A variable
    is withheld when any of these holds (names compared upper-cased, so ``my_api_key`` counts):

    - its name contains ``TOKEN``, ``SECRET``, ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``,
      ``CREDENTIAL``, ``APIKEY``, ``PRIVATEKEY``, ``ACCESSKEY`` or ``CONNECTION_STRING`` anywhere
      (``ANTHROPIC_AUTH_TOKEN``, ``GH_TOKEN``, ``GITHUB_TOKEN``, ``AWS_SESSION_TOKEN``,
      ``AZURE_CLIENT_SECRET``, ``PGPASSWORD``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...);
    - one of its parts (the name split at every character that is not a letter or digit) is
      ``KEY``, ``KEYS``, ``PASS``, ``AUTH``, ``DSN``, ``PAT``, ``JWT``, ``COOKIE``, ``PRIVATE`` or
      ``WEBHOOK``, or ``PWD`` in a name of more than one part (``ANTHROPIC_API_KEY``,
      ``MY_API_KEY_2``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``SENTRY_DSN``,
      ``MYSQL_PWD``, ``SSH_AUTH_SOCK``; but not ``PWD``, ``OLDPWD``, ``KEYMAP`` or
      ``GIT_AUTHOR_NAME``);
    - its value carries a password or a token whatever the name: a URL with a password in it
      (``DATABASE_URL=postgres://user:pw@host/db``, a proxy with credentials) or a
      ``password=``/``pwd=``/``token=``/``access_token=``/``api_key=``/``apikey=``/``secret=``/
      ``accountkey=``/``sharedaccesskey=`` setting (connection strings, URLs with a token query);
    - it matches one of the extra ``deny`` patterns given to :func:`tool_env` (shell-style, any
      case: ``"MYCORP_*"``), unless it is named in ``keep``.

    The rule errs on the side of withholding: ``TOKENIZERS_PARALLELISM`` or ``GPG_KEY`` are
    dropped too. What passes by default is everything else: ``PATH``, ``HOME``, ``LANG``, ``TERM``,
    ``VIRTUAL_ENV``, proxies without credentials... Name a withheld variable in ``keep`` to pass it
    anyway (``tool_env(keep=["SSH_AUTH_SOCK"])``).

    Two explicit modes replace the rule: ``allow`` (only these host variables pass, withheld or not:
    the caller named them) and ``replace`` (exactly this mapping, nothing from the host).

    This is about what the commands are *given*; it is not a sandbox. A command can still read any
    file the host user can (``~/.netrc``, ``~/.aws/credentials``, ``/proc/<parent>/environ`` of a
    process of the same user), so a credential that must stay secret from the model belongs outside
    its user account, not only outside its environment.
    """

    __slots__ = ("_allow", "_deny", "_keep", "_replace")

    def __init__(
        self,
        *,
        allow: Iterable[str] | None = None,
        replace: Mapping[str, str] | None = None,
        keep: Iterable[str] = (),
        deny: Iterable[str] = (),
    ) -> None:
        if allow is not None and replace is not None:
            raise InvalidArgumentError("give allow or replace, not both")
        self._allow = None if allow is None else _names(allow, "allow")
        self._replace = None if replace is None else _mapping(replace)
        self._keep = _names(keep, "keep")
        self._deny = _names(deny, "deny", patterns=True)
        if (self._keep or self._deny) and (allow is not None or replace is not None):
            raise InvalidArgumentError(
                "keep and deny refine the default rule; they cannot be combined with allow or "
                "replace"
            )

    @property
    def mode(self) -> str:
        """``"default"``, ``"allow"`` or ``"replace"``."""
        if self._replace is not None:
            return "replace"
        return "default" if self._allow is None else "allow"

    def environment(self, host: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a command gets, computed from ``host`` (default: ``os.environ`` now)."""
        if self._replace is not None:
            return dict(self._replace)
        source = _host_environment() if host is None else host
        if self._allow is not None:
            return {k: v for k, v in source.items() if k in self._allow}
        return {k: v for k, v in source.items() if not self._withholds(k, v)}

    def withheld(self, host: Mapping[str, str] | None = None) -> list[str]:
        """The names of ``host`` (default ``os.environ``) a command does not get, sorted."""
        source = _host_environment() if host is None else host
        given = self.environment(source)
        return sorted(k for k in source if k not in given)

    def _withholds(self, name: str, value: str) -> bool:
        if name in self._keep:
            return False
        upper = name.upper()
        if any(fnmatch.fnmatchcase(upper, p.upper()) for p in self._deny):
            return True
        return is_withheld(name, value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolEnv):
            return NotImplemented
        return (self._allow, self._replace, self._keep, self._deny) == (
            other._allow,
            other._replace,
            other._keep,
            other._deny,
        )

    def __hash__(self) -> int:
        replace = None if self._replace is None else frozenset(self._replace.items())
        return hash((self._allow, replace, self._keep, self._deny))

    def __repr__(self) -> str:
        if self._replace is not None:
            return f"ToolEnv(replace=<{len(self._replace)} variables>)"
        if self._allow is not None:
            return f"ToolEnv(allow={sorted(self._allow)!r})"
        return f"ToolEnv(keep={sorted(self._keep)!r}, deny={sorted(self._deny)!r})"


def tool_env(
    *,
    allow: Iterable[str] | None = None,
    replace: Mapping[str, str] | None = None,
    keep: Iterable[str] = (),
    deny: Iterable[str] = (),
) -> ToolEnv:
    """The environment policy for the commands the model runs (rules: :class:`ToolEnv`).

    - ``tool_env()``: the host's environment less the credential-like variables (the default);
      ``keep`` names variables to pass anyway, ``deny`` adds shell-style name patterns.
    - ``tool_env(allow=[...])``: only these host variables, by exact name (even withheld ones).
    - ``tool_env(replace={...})``: exactly this environment, nothing from the host.

    Raises :class:`~liteagent.eventlog.errors.InvalidArgumentError` for ``allow`` with ``replace``,
    ``keep``/``deny`` with either, a name that is not a non-empty string without ``=`` or NUL
    (a bare string instead of a list of names is refused too), or a value that is not a string
    a process environment can hold.
    """
    return ToolEnv(allow=allow, replace=replace, keep=keep, deny=deny)


def _host_environment() -> dict[str, str]:
    """A copy of ``os.environ`` (copying again if another thread changed it meanwhile)."""
    for _ in range(10):
        try:
            return dict(os.environ)
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    return dict(os.environ)


def _names(values: Iterable[str], what: str, *, patterns: bool = False) -> frozenset[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise InvalidArgumentError(
            f"{what} must be a list of variable names, got {type(values).__name__}"
        )
    out = set()
    for name in values:
        _check_text(name, f"a name in {what}", name_like=not patterns)
        out.add(name)
    return frozenset(out)


def _mapping(replace: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(replace, Mapping):
        raise InvalidArgumentError(
            f"replace must be a mapping of names to values, got {type(replace).__name__}"
        )
    out = {}
    for name, value in replace.items():
        _check_text(name, "a name in replace", name_like=True)
        _check_text(value, f"the value of {name!r} in replace", name_like=False, empty_ok=True)
        out[name] = value
    return out


def _check_text(value: object, what: str, *, name_like: bool, empty_ok: bool = False) -> None:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a string, got {type(value).__name__}")
    if not value and not empty_ok:
        raise InvalidArgumentError(f"{what} is empty")
    if "\x00" in value or (name_like and "=" in value):
        raise InvalidArgumentError(f"{what} ({shown(value)}) contains NUL or '='")
    try:
        os.fsencode(value)
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"{what} ({shown(value)}) cannot be encoded: {e.reason}") from e
