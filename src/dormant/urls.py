"""Store URLs fit to show: passwords never reach output, logs or error text.

:func:`redact` hides the password of one URL (``user:***@``, ``password=***`` in its
query or in a libpq ``key=value`` string). :func:`remember` notes the secrets of a URL
this process was given, and :func:`scrub` takes every noted secret out of any text
(an error message from a driver that quotes the URL, a log line), so text built
anywhere is made safe where it leaves the process.
"""

from __future__ import annotations

import re
import urllib.parse

#: Secrets :func:`remember` keeps at most (a process is given very few store URLs).
MAX_SECRETS = 16
#: Secrets shorter than this are not scrubbed from free text (they would mangle it);
#: :func:`redact` still hides them in the URL itself.
MIN_SCRUB_LEN = 4
_MASK = "***"
_SECRET_KEYS = ("password", "passwd", "pwd", "sslpassword")
_KEYWORD = re.compile(r"\b(" + "|".join(_SECRET_KEYS) + r")\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]*)", re.I)
_NETLOC = re.compile(r"(://[^/\s:@]*:)([^@\s/]+)(@)")
_secrets: list[str] = []


def secrets_of(url: str) -> list[str]:
    """The secrets written in ``url``: its password, and ``password=``-like parameters."""
    found: list[str] = []
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL (a libpq key=value string, a bad port): keywords only
        password = None
    if password:
        found.append(password)
        unquoted = urllib.parse.unquote(password)
        if unquoted != password:
            found.append(unquoted)
    for match in _KEYWORD.finditer(url):
        value = match.group(2).strip("'")
        if value:
            found.append(value)
            unquoted = urllib.parse.unquote(value)
            if unquoted != value:
                found.append(unquoted)
    return found


def redact(url: str) -> str:
    """``url`` without its password (nor ``password=`` parameters), fit for messages and logs."""
    text = _KEYWORD.sub(lambda m: f"{m.group(1)}={_MASK}", url)
    try:
        parts = urllib.parse.urlsplit(text)
        password = parts.password
    except ValueError:
        return text
    if not password:
        return text
    netloc = parts.netloc.replace(f":{password}@", f":{_MASK}@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def remember(url: str) -> None:
    """Note the secrets of ``url`` so :func:`scrub` removes them from any text later.

    Bounded: past :data:`MAX_SECRETS` the oldest secrets are forgotten.
    """
    for secret in secrets_of(url):
        if secret in _secrets:
            continue
        _secrets.append(secret)
        del _secrets[:-MAX_SECRETS]


def scrub(text: str) -> str:
    """``text`` with every remembered secret (and any URL password in it) masked."""
    for secret in _secrets:
        if len(secret) >= MIN_SCRUB_LEN and secret in text:
            text = text.replace(secret, _MASK)
    text = _NETLOC.sub(lambda m: f"{m.group(1)}{_MASK}{m.group(3)}", text)
    return _KEYWORD.sub(lambda m: f"{m.group(1)}={_MASK}", text)
