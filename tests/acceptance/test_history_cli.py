"""``dormant show`` paging (--before / --after and the footer hints) and ``dormant export`` (JSONL)."""

from __future__ import annotations

import re
import shlex
import tracemalloc
from pathlib import Path

import msgspec
import pytest

from dormant import Agent, Runtime
from dormant.cli.history import atomic_file, export_history, read_window
from dormant.models import echo_model
from dormant.records import Message, NewInput
from dormant.store.base import Store
from tests.helpers import all_messages

from .runner import Cli, assert_usage_error


async def fill(url: str, thread_id: str, inputs: int) -> list[Message]:
    """Give ``thread_id`` ``inputs`` user messages (and the echo replies, one per slice of
    up to 32 inputs); its whole history, read back page by page."""
    async with Runtime(url, [Agent(name="assistant", model=echo_model())]) as rt:
        for start in range(0, inputs, 500):
            await rt.admit(
                [
                    NewInput(
                        thread_id=thread_id,
                        kind="user",
                        dedup_key=f"k{i}",
                        content=f"message {i}",
                        agent="assistant",
                    )
                    for i in range(start, min(inputs, start + 500))
                ]
            )
        await rt.run_until_idle()
        return await all_messages(rt.store, thread_id)


def seqs(output: str) -> list[int]:
    """The seq numbers of the messages ``dormant show`` printed, in printed order."""
    return [int(s) for s in re.findall(r"^#(\d+) ", output, re.MULTILINE)]


def hint(output: str, which: str) -> list[str] | None:
    """The arguments (after ``dormant``) of the ``older:`` or ``newer:`` footer line, if any."""
    match = re.search(rf"^{which}: (.+)$", output, re.MULTILINE)
    if match is None:
        return None
    argv = shlex.split(match.group(1))
    assert argv[:2] == ["dormant", "show"], argv
    return argv[1:]


def exported(text: str) -> list[Message]:
    """The messages of ``dormant export`` output, checking each line's thread id on the way."""
    lines = text.splitlines()
    assert all(msgspec.json.decode(line)["thread_id"] for line in lines)
    return [msgspec.json.decode(line, type=Message) for line in lines]


# -- help -------------------------------------------------------------------------------------


def test_help_lists_export_and_the_paging_flags(cli: Cli) -> None:
    assert re.search(r"^\W*export\s+Write a thread's whole history", cli("--help", store=False).stdout, re.M)
    show = cli("show", "--help", store=False).stdout
    for text in ("--before", "--after", "--full", "DORMANT_BEFORE", "DORMANT_AFTER", "DORMANT_FULL"):
        assert text in show
    export = cli("export", "--help", store=False).stdout
    for text in (
        "--out",
        "--after",
        "--quiet",
        "DORMANT_EXPORT_OUT",
        "DORMANT_EXPORT_AFTER",
        "DORMANT_QUIET",
    ):
        assert text in export


# -- dormant show -----------------------------------------------------------------------------


async def test_show_defaults_to_the_newest_page(cli: Cli) -> None:
    history = await fill(cli.store, "h", 20)
    n = len(history)
    shown = cli.ok("show", "h", "--limit", "5")
    assert seqs(shown) == list(range(n - 4, n + 1))  # oldest first within the page
    older = ["show", "h", "--before", str(n - 4), "--store", cli.store, "--limit", "5"]
    assert hint(shown, "older") == older  # runnable as printed: it names the store
    assert hint(shown, "newer") is None
    everything = cli.ok("show", "h")  # fits one default page: no footer
    assert seqs(everything) == list(range(1, n + 1))
    assert hint(everything, "older") is None and hint(everything, "newer") is None


async def test_paging_back_then_forward_shows_every_message_once(cli: Cli) -> None:
    thread = "walk me"  # the hints quote it
    history = await fill(cli.store, thread, 16)
    expected = [m.seq for m in history]
    assert len(expected) == 17

    pages: list[list[int]] = []
    shown = cli.ok("show", thread, "--limit", "5")
    args: list[str] | None
    while True:
        pages.append(seqs(shown))
        args = hint(shown, "older")
        if args is None:
            break
        ran = cli(*args, store=False)  # the hint as printed, --store included
        assert ran.returncode == 0, ran.stderr
        shown = ran.stdout
    assert [len(p) for p in pages] == [5, 5, 5, 2]
    assert [s for page in reversed(pages) for s in page] == expected

    # the oldest page's newer hint leads forward through the same pages, in order
    first = cli.ok("show", thread, "--before", str(pages[-1][-1] + 1), "--limit", "5")
    forward: list[int] = []
    args = hint(first, "newer")
    forward += seqs(first)
    while args is not None:
        shown = cli.ok(*args)
        forward += seqs(shown)
        args = hint(shown, "newer")
    assert forward == expected


async def test_before_and_after_bounds(cli: Cli) -> None:
    n = len(await fill(cli.store, "b", 10))  # 11 messages

    start = cli.ok("show", "b", "--after", "0", "--limit", "4")
    assert seqs(start) == [1, 2, 3, 4]
    assert hint(start, "older") is None
    assert hint(start, "newer") == ["show", "b", "--after", "4", "--store", cli.store, "--limit", "4"]

    tail = cli.ok("show", "b", "--after", str(n - 2), "--limit", "4")
    assert seqs(tail) == [n - 1, n]
    assert hint(tail, "newer") is None
    assert hint(tail, "older") == ["show", "b", "--before", str(n - 1), "--store", cli.store, "--limit", "4"]

    head = cli.ok("show", "b", "--before", "3", "--limit", "4")
    assert seqs(head) == [1, 2]
    assert hint(head, "older") is None
    assert hint(head, "newer") == ["show", "b", "--after", "2", "--store", cli.store, "--limit", "4"]

    nothing_older = cli.ok("show", "b", "--before", "1")
    assert seqs(nothing_older) == [] and "(no messages in this range)" in nothing_older
    assert hint(nothing_older, "older") is None
    assert hint(nothing_older, "newer") == ["show", "b", "--after", "0", "--store", cli.store]

    nothing_newer = cli.ok("show", "b", "--after", str(n))
    assert seqs(nothing_newer) == [] and hint(nothing_newer, "newer") is None
    assert hint(nothing_newer, "older") == ["show", "b", "--before", str(n + 1), "--store", cli.store]


def test_before_and_after_exclude_each_other(cli: Cli) -> None:
    cli.ok("send", "x", "hi")
    assert_usage_error(cli("show", "x", "--before", "5", "--after", "1"), "--before", "--after")
    assert_usage_error(cli("show", "x", "--after", "1", env={"DORMANT_BEFORE": "5"}), "--before")


def test_show_and_export_of_an_unknown_thread(cli: Cli, tmp_path: Path) -> None:
    cli.ok("init")
    assert_usage_error(cli("show", "nobody"), "nobody")
    assert_usage_error(cli("show", "nobody", "--before", "3"), "nobody")
    assert_usage_error(cli("export", "nobody"), "nobody")
    assert_usage_error(cli("export", "nobody", "--out", str(tmp_path / "x.jsonl")), "nobody")
    assert not (tmp_path / "x.jsonl").exists()
    assert not list(tmp_path.glob(".x.jsonl.*"))


def test_show_cuts_long_texts_unless_full(cli: Cli) -> None:
    text = "x" * 5000
    cli.ok("send", "long", text)
    cli.ok("run", "--until-idle")
    cut = cli.ok("show", "long")
    assert text not in cut and "[1,000 more characters]" in cut
    full = cli.ok("show", "long", "--full")
    assert text in full and "more characters" not in full
    assert "[4,990 more characters]" in cli.ok("show", "long", "--max-chars", "10")


# -- dormant export ---------------------------------------------------------------------------


async def test_export_is_the_whole_history(cli: Cli) -> None:
    history = await fill(cli.store, "big", 3000)
    assert len(history) > 3000
    result = cli("export", "big")
    assert result.returncode == 0, result.stderr
    assert exported(result.stdout) == history
    size = len(result.stdout.encode())
    assert (
        result.stderr.strip()
        == f"exported {len(history):,} messages ({size:,} bytes) of thread big to stdout"
    )
    assert cli("export", "big", "--quiet").stderr == ""


async def test_export_after_resumes(cli: Cli) -> None:
    history = await fill(cli.store, "r", 1200)
    tail = cli.ok("export", "r", "--after", "1000")
    assert exported(tail) == history[1000:]
    assert cli.ok("export", "r", "--after", str(len(history))) == ""


async def test_export_out_writes_a_whole_file(cli: Cli, tmp_path: Path) -> None:
    history = await fill(cli.store, "f", 700)
    target = tmp_path / "f.jsonl"
    result = cli("export", "f", "--out", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert str(target) in result.stderr
    assert exported(target.read_text()) == history
    assert target.read_text() == cli.ok("export", "f", "--quiet")
    assert cli.ok("export", "f", "--out", "-", "--quiet") == target.read_text()
    assert sorted(p.name for p in tmp_path.iterdir() if "jsonl" in p.name) == ["f.jsonl"]  # no temp left
    assert_usage_error(cli("export", "f", "--out", str(tmp_path / "no-such-dir" / "f.jsonl")), "no-such-dir")
    assert_usage_error(cli("export", "f", "--out", str(tmp_path)), "directory")


def test_atomic_file_leaves_the_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_file(target) as file:
        file.write(b"half a")
        raise RuntimeError("boom")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
    with atomic_file(target) as file:
        file.write(b"new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


# -- in process -------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_read_window_walks_both_ways(url: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/w.db" if url == "sqlite" else url
    async with Runtime(url, [Agent(name="assistant", model=echo_model())]) as rt:
        for i in range(7):
            await rt.send("w", f"m{i}")
            await rt.run_until_idle()  # one reply per input: 14 messages
        store: Store = rt.store
        window = await read_window(store, "w", limit=4)
        back = list(window.items)
        while window.older_before is not None:
            window = await read_window(store, "w", limit=4, before=window.older_before)
            back = list(window.items) + back
        assert [m.seq for m in back] == list(range(1, 15))
        forward = list(window.items)
        while window.newer_after is not None:
            window = await read_window(store, "w", limit=4, after=window.newer_after)
            forward += window.items
        assert forward == back


async def export_peak(store: Store, thread_id: str) -> int:
    """Peak Python memory (bytes) of exporting ``thread_id`` to a sink that keeps nothing."""
    written = 0

    def sink(line: bytearray) -> None:
        nonlocal written
        written += len(line)

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        done = await export_history(store, thread_id, sink)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert done.bytes == written > 0
    return peak


async def test_export_memory_does_not_grow_with_the_thread(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    small = len(await fill(url, "small", 2000))
    large = len(await fill(url, "large", 8000))
    assert large > 3.9 * small
    async with Runtime(url, [Agent(name="assistant", model=echo_model())]) as rt:
        await export_peak(rt.store, "small")  # warm caches and statement compilation
        small_peak = await export_peak(rt.store, "small")
        large_peak = await export_peak(rt.store, "large")
    assert large_peak < 1.5 * small_peak, (small_peak, large_peak)
