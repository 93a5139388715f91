"""The peers harness's own checks: which threads it reads back, what counts as done."""

from __future__ import annotations

from dormant.bench.peers import BODY, expected_problems, sample
from dormant.bench.scale import TOOL_RESULT, user_text


def done(tid: str, turns: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for t in range(turns):
        out += [("user", user_text(t, tid)), ("assistant", BODY), ("tool", TOOL_RESULT), ("assistant", BODY)]
    return out


def test_sample_spreads_and_bounds() -> None:
    assert sample(5, 10) == [0, 1, 2, 3, 4]
    picked = sample(1_000_000, 1_000)
    assert len(picked) == 1_000 and picked[0] == 0 and picked[-1] >= 998_000


def test_expected_problems() -> None:
    assert expected_problems("agent-3", 2, done("agent-3", 2)) == []
    assert expected_problems("agent-3", 2, done("agent-3", 1)) == ["agent-3: 4 messages, not 8"]
    wrong_thread = done("agent-4", 2)  # another thread's user texts
    assert expected_problems("agent-3", 2, wrong_thread) == [
        "agent-3: turn 0 differs",
        "agent-3: turn 1 differs",
    ]
    no_tool = done("agent-3", 2)
    no_tool[6] = ("tool", "")
    assert expected_problems("agent-3", 2, no_tool) == ["agent-3: turn 1 differs"]
