"""Structured JSON logs: one object a line, with the ids bound to the task that wrote it."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from dormant.cli.main import setup_logging
from dormant.logs import MAX_FIELD_CHARS, JsonFormatter, bind, bound, chain


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("dormant.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_each_task_logs_its_own_ids(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured

    async def slice_of(thread: str) -> None:
        bind(thread_id=thread, slice_id=f"lease-{thread}")
        await asyncio.sleep(0.01)
        logger.warning("slice_failed", extra={"error": "boom"})

    async def call() -> None:
        bind(thread_id="t3", call_id="call_9")
        logger.info("tool_done")

    await asyncio.gather(slice_of("t1"), slice_of("t2"), asyncio.create_task(call()))
    assert bound() == {}  # nothing leaks into the caller's context
    records = sorted(lines(stream), key=lambda r: str(r["thread_id"]))
    assert [(r["event"], r["thread_id"], r.get("slice_id"), r.get("call_id")) for r in records] == [
        ("slice_failed", "t1", "lease-t1", None),
        ("slice_failed", "t2", "lease-t2", None),
        ("tool_done", "t3", None, "call_9"),
    ]
    first = records[0]
    assert first["level"] == "warning" and first["logger"] == "dormant.test_logs"
    assert first["error"] == "boom"
    assert str(first["ts"]).endswith("Z")


def test_explicit_extras_win_and_long_values_are_cut(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    bind(thread_id="bound")
    try:
        logger.info("x", extra={"thread_id": "explicit", "blob": "y" * (MAX_FIELD_CHARS * 2), "n": 3})
        try:
            raise ValueError("bad")
        except ValueError:
            logger.exception("failed")
    finally:
        bind(thread_id=None)
    first, second = lines(stream)
    assert first["thread_id"] == "explicit" and first["n"] == 3
    assert len(str(first["blob"])) == MAX_FIELD_CHARS + 1
    assert "ValueError: bad" in str(second["exception"])


def test_setup_logging_picks_the_format(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger("dormant")
    saved = (root.handlers[:], root.level, root.propagate)
    try:
        setup_logging("info", "json")
        logging.getLogger("dormant.runtime").info("slice_done", extra={"thread_id": "t"})
        record = json.loads(capsys.readouterr().err.strip())
        assert (record["event"], record["thread_id"]) == ("slice_done", "t")
        setup_logging("info", "text")
        logging.getLogger("dormant.runtime").info("slice_done", extra={"thread_id": "t"})
        assert "slice_done thread_id='t'" in capsys.readouterr().err
    finally:
        root.handlers[:], root.level, root.propagate = saved[0], saved[1], saved[2]


def test_log_lines_go_to_the_current_stderr_so_a_spinner_can_print_them_above_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io
    import logging
    import sys

    setup_logging("warning")
    swapped = io.StringIO()  # what rich's live display puts in place of sys.stderr
    monkeypatch.setattr(sys, "stderr", swapped)
    logging.getLogger("dormant.runtime").warning("model_reply_cut thread=t: the reply hit the output cap")
    assert "model_reply_cut" in swapped.getvalue()


def test_an_error_chain_names_the_driver_error_under_a_translated_one() -> None:
    def raised() -> BaseException:
        try:
            try:
                raise OSError("server closed the connection")
            except OSError as low:
                raise ValueError("lost the connection") from low
        except ValueError as exc:
            return exc

    exc = raised()
    assert chain(exc) == "ValueError: lost the connection <- OSError: server closed the connection"
    assert chain(exc, depth=1) == "ValueError: lost the connection"
    loop = RuntimeError("a")
    loop.__cause__ = loop  # a cycle ends the chain instead of looping
    assert chain(loop) == "RuntimeError: a"
