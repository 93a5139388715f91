"""The pure prompt-budget rule (:mod:`dormant.view.budget`): what is taken off the window,
when the tokenizer is needed, and each adapter's chat framing."""

from __future__ import annotations

from typing import NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dormant.agent import Agent
from dormant.config import Settings
from dormant.errors import UsageError
from dormant.models.base import OPENAI_CHAT, ChatOverhead, ModelReply, ModelRequest
from dormant.models.openai import SUMMARY_PREFIX, OpenAIChatModel
from dormant.models.scripted import ScriptedModel
from dormant.models.wire import CONTINUED
from dormant.tokens import count_text
from dormant.tools.spec import tool
from dormant.view import budget

SYSTEM = "You fix failing tests."
SCHEMAS = ({"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}},)


def _no_tokenizer(*args: object, **kwargs: object) -> NoReturn:
    raise AssertionError("the tokenizer was used")


def test_the_prompt_budget_is_the_window_less_the_output_less_the_margin() -> None:
    assert budget.prompt_tokens(8192, 1024, 0.02) == int(7168 * 0.98) == 7024
    assert budget.prompt_tokens(8192, 1024, 0.0) == 7168


@given(st.text(max_size=300))
def test_utf8_bytes_bound_the_tokens_of_any_text(text: str) -> None:
    assert count_text(text) <= budget.utf8_len(text)
    assert budget.utf8_len(text) == len(text.encode("utf-8", "surrogatepass"))


def test_when_the_byte_cap_proves_the_fit_nothing_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(budget, "count_text", _no_tokenizer)
    limits = budget.view_limits(
        window=128_000, max_output=4096, system=SYSTEM, schemas=SCHEMAS, max_bytes=16 * 1024
    )
    assert not limits.counts_tokens
    fixed = 3 + 1 + len(SYSTEM) + len(budget.schemas_text(SCHEMAS)) + 3 + OPENAI_CHAT.summary
    assert limits.max_tokens == int(123_904 * 0.98) - fixed


def test_a_small_constant_part_is_bounded_by_its_bytes_even_when_views_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(budget, "count_text", _no_tokenizer)
    limits = budget.view_limits(window=128_000, max_output=4096, system=SYSTEM, schemas=SCHEMAS)
    assert limits.counts_tokens, "256 KiB of text can pass 120k tokens"
    bound = 3 + 1 + len(SYSTEM) + len(budget.schemas_text(SCHEMAS)) + 3 + OPENAI_CHAT.summary
    assert bound <= budget.prompt_tokens(128_000, 4096, 0.02) // budget.EXACT_FIXED_SHARE
    assert limits.max_tokens == int(123_904 * 0.98) - bound


def test_a_large_constant_part_is_counted_when_views_count() -> None:
    system = "Follow the house rules below, every one of them, in every reply. " * 100  # 6.6 KB
    limits = budget.view_limits(window=128_000, max_output=4096, system=system, schemas=SCHEMAS)
    assert limits.counts_tokens
    exact = 3 + 1 + count_text(system) + count_text(budget.schemas_text(SCHEMAS)) + 3 + OPENAI_CHAT.summary
    assert limits.max_tokens == int(123_904 * 0.98) - exact
    # not so under limits whose byte cap proves every view fits: the bound is enough there
    capped = budget.view_limits(
        window=128_000, max_output=4096, system=system, schemas=SCHEMAS, max_bytes=16 * 1024
    )
    assert not capped.counts_tokens and capped.max_tokens < limits.max_tokens


def test_a_view_token_cap_caps_what_the_window_leaves() -> None:
    limits = budget.view_limits(window=128_000, max_output=4096, system=SYSTEM, max_tokens=5_000)
    assert limits.max_tokens == 5_000


def test_a_format_that_frames_messages_dearer_reserves_the_difference_for_each_message() -> None:
    args = {"window": 32_000, "max_output": 1000, "system": SYSTEM, "max_messages": 50}
    cheap = budget.view_limits(**args, overhead=OPENAI_CHAT)  # type: ignore[arg-type]
    dear = budget.view_limits(**args, overhead=ChatOverhead(message=5, reply=3, summary=OPENAI_CHAT.summary))  # type: ignore[arg-type]
    system_framing = 2  # the system message is framed dearer too
    assert cheap.max_tokens - dear.max_tokens == 2 * 50 + system_framing


def test_a_window_too_small_for_history_is_refused_naming_the_agent() -> None:
    @tool
    def big(x: str) -> str:
        """A tool with a long description."""
        return x

    model = ScriptedModel(lambda r: ModelReply(text=""), context_window=1024, max_output_tokens=700)
    agent = Agent(name="tiny", model=model, system_prompt="s " * 20, tools=[big])
    with pytest.raises(UsageError, match=r"agent 'tiny': the model's window of 1024 tokens leaves -?\d+"):
        budget.limits_for(agent, Settings.build())


def test_limits_for_reads_the_model_and_the_settings() -> None:
    model = ScriptedModel(lambda r: ModelReply(text=""), context_window=16_000, max_output_tokens=1000)
    agent = Agent(name="a", model=model, system_prompt=SYSTEM, builtins=False)
    settings = Settings.build(view_messages=10, view_bytes=2048, prompt_margin=0.1)
    limits = budget.limits_for(agent, settings)
    assert (limits.max_messages, limits.max_bytes, limits.encoding) == (10, 2048, "o200k_base")
    assert limits.max_tokens == int(15_000 * 0.9) - (3 + 1 + len(SYSTEM) + 3 + OPENAI_CHAT.summary)


def test_the_adapters_declare_their_chat_framing() -> None:
    assert OpenAIChatModel.chat_overhead == OPENAI_CHAT
    assert ScriptedModel.chat_overhead == OPENAI_CHAT
    # the summary's framing reserve bounds what the OpenAI adapter puts before a summary
    assert OPENAI_CHAT.summary >= budget.utf8_len(SUMMARY_PREFIX)
    body = OpenAIChatModel(model="gpt-4o", base_url="http://127.0.0.1:9/v1").request_body(
        ModelRequest(thread_id="t", system="", messages=(), summary="S")
    )
    assert body["messages"] == [{"role": "system", "content": SUMMARY_PREFIX + "S"}]


def test_the_margin_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.build().prompt_margin == 0.02
    monkeypatch.setenv("DORMANT_PROMPT_MARGIN", "0.05")
    assert Settings.from_env().prompt_margin == 0.05
    with pytest.raises(UsageError, match="prompt_margin"):
        Settings.build(prompt_margin=0.9)


def test_the_summary_reserve_covers_what_the_adapter_adds_around_the_summary() -> None:
    # the summary goes inside the one system message after "\n\n" and the prefix; a strict
    # template may get one user message put first (framing + role + text); bytes bound tokens
    inside = len(("\n\n" + SUMMARY_PREFIX).encode())
    first_user = OPENAI_CHAT.message + len(b"user") + len(CONTINUED.encode())
    assert inside + first_user <= OPENAI_CHAT.summary
