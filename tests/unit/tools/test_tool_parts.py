"""Images and files a tool returns: what counts as such an output, what the model is sent
of a tool result with parts (per dialect, checked exactly), and the budget rule for them."""

from __future__ import annotations

import base64
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dormant.models.base import OPENAI_CHAT, ModelRequest
from dormant.models.openai import OpenAIChatModel
from dormant.parts import File, Image, Text
from dormant.parts.render import resolve
from dormant.records import Message, Part, ToolCall, ViewLimits
from dormant.tools.results import PartsOutput
from dormant.tools.spec import ToolContext, make_tool, result_output
from dormant.view.builder import extend_view, with_count
from tests.unit.parts.test_budget import SIZES, TEXT_ONLY, TEXTS, VISION, file, image, server_count, words

IMG = Part(kind="image", ref="sha256:" + "1" * 64, media_type="image/png", size=3, width=640, height=480)
DOC = Part(
    kind="file", ref="sha256:" + "2" * 64, media_type="application/pdf", size=4, name="i.pdf", text="No 7"
)
CALL = ToolCall(id="c1.2.0", name="chart", arguments="{}")
X = "\N{MULTIPLICATION SIGN}"


def test_an_image_a_file_or_a_list_holding_one_is_a_parts_output_and_anything_else_is_not() -> None:
    photo = Image(b"png", name="a.png")
    assert result_output(photo) == PartsOutput((photo,))
    invoice = File("/tmp/i.pdf")
    mixed = result_output(["see", photo, Text("and"), invoice, {"n": 1}])
    assert mixed == PartsOutput(("see", photo, Text("and"), invoice, '{"n":1}'))
    assert result_output(["a", "b"]) == '["a","b"]'  # a plain list stays JSON
    assert result_output((1, 2)) == "[1,2]"
    assert result_output(b"raw") == b"raw"


async def test_invoke_names_the_images_and_files_in_the_text(tmp_path: Path) -> None:
    def chart() -> list[object]:
        return ["the chart:", Image(b"png", name="c.png"), File(b"x")]

    spec = make_tool(chart)
    text = await spec.invoke({}, ToolContext(thread_id="t", call_id="c", agent="a"))
    assert text == "the chart:\n\n[image: c.png]\n\n[file: unnamed]"


def history(*parts: Part) -> ModelRequest:
    return ModelRequest(
        thread_id="t",
        system="",
        messages=(
            Message(seq=1, role="user", content="draw it"),
            Message(seq=2, role="assistant", content="", tool_calls=(CALL,)),
            Message(seq=3, role="tool", content="drawn", tool_call_id=CALL.id, name="chart", parts=parts),
            Message(seq=4, role="assistant", content="here it is"),
        ),
    )


async def fetch(ref: str) -> bytes:
    return {IMG.ref: b"png", DOC.ref: b"%PDF"}[ref]


async def test_a_vision_model_gets_the_tool_results_images_in_a_user_message_after_the_results() -> None:
    model = OpenAIChatModel(model="gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="x", dialect="openai")
    body = model.request_body(history(IMG, DOC))
    await resolve(body["messages"], {IMG.ref: "image/png", DOC.ref: "application/pdf"}, fetch)
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "chart", "arguments": "{}"}}
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            # the PDF goes as a file part: its text is in the file, not repeated here
            "content": (
                f"drawn\n\n[image: image, 640{X}480, no text]\n\n[file: i.pdf, application/pdf, 4 bytes]"
            ),
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "image_url",
                    "image_url": {
                        "url": "data:image/png;base64," + base64.b64encode(b"png").decode(),
                        "detail": "auto",
                    },
                },
                {
                    "type": "file",
                    "file": {
                        "filename": "i.pdf",
                        "file_data": "data:application/pdf;base64," + base64.b64encode(b"%PDF").decode(),
                    },
                },
            ],
        },
        {"role": "assistant", "content": "here it is"},
    ]


def test_a_text_only_model_gets_the_tool_results_placeholders_and_no_extra_message() -> None:
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", dialect="generic")
    messages = model.request_body(history(IMG, DOC))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2]["content"] == (
        f"drawn\n\n[image: image, 640{X}480, no text]\n\n[file: i.pdf, application/pdf, 4 bytes]\nNo 7"
    )


def test_the_images_of_several_results_of_one_reply_follow_the_last_result() -> None:
    second = ToolCall(id="c2.2.1", name="chart", arguments="{}")
    request = ModelRequest(
        thread_id="t",
        system="",
        messages=(
            Message(seq=1, role="user", content="two"),
            Message(seq=2, role="assistant", content="", tool_calls=(CALL, second)),
            Message(seq=3, role="tool", content="a", tool_call_id=CALL.id, name="chart", parts=(IMG,)),
            Message(seq=4, role="tool", content="b", tool_call_id=second.id, name="chart", parts=(IMG,)),
        ),
    )
    messages = VISION.request_body(request)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "user"]
    assert [item["type"] for item in messages[-1]["content"]] == ["image_url", "image_url"]


tool_turn = st.tuples(words, words, st.lists(st.one_of(image, file), max_size=3))


@settings(max_examples=60, deadline=None)
@given(st.lists(tool_turn, min_size=1, max_size=12), st.integers(500, 8000))
def test_no_request_with_tool_results_carrying_parts_is_over_the_budget(
    drawn: list[tuple[list[str], list[str], list[Part]]], budget: int
) -> None:
    messages: list[Message] = []
    seq = 0
    for n, (asked, answered, parts) in enumerate(drawn):
        for p in parts:
            SIZES[p.ref] = (p.width, p.height)
            TEXTS[p.ref] = p.text or ""
        call = ToolCall(id=f"call{n}.{seq + 2}.0", name="look", arguments="{}")
        for role, text, extra in (
            ("user", asked, {}),
            ("assistant", [], {"tool_calls": (call,)}),
            ("tool", answered, {"tool_call_id": call.id, "name": "look", "parts": tuple(parts)}),
        ):
            seq += 1
            message = Message(seq=seq, role=role, content=" ".join(text), **extra)  # type: ignore[arg-type]
            messages.append(with_count(message, "o200k_base"))
    limits = ViewLimits(max_tokens=budget, max_messages=64, max_bytes=10**7)
    request = ModelRequest(thread_id="t", system="", messages=extend_view((), messages, limits))
    for model in (VISION, TEXT_ONLY):
        assert server_count(model, request) <= budget + OPENAI_CHAT.reply
