"""The adapter's body for messages with parts, per dialect, checked exactly."""

from __future__ import annotations

import base64

from dormant.models.base import ModelRequest
from dormant.models.openai import OpenAIChatModel
from dormant.parts.render import resolve
from dormant.records import Message, Part

IMG = Part(
    kind="image",
    ref="sha256:" + "1" * 64,
    media_type="image/png",
    size=3,
    width=640,
    height=480,
    name="a.png",
)
DOC = Part(
    kind="file", ref="sha256:" + "2" * 64, media_type="application/pdf", size=4, name="i.pdf", text="No 7"
)
CSV = Part(kind="file", ref="sha256:" + "3" * 64, media_type="text/plain", size=4, name="t.csv", text="a,b")
BYTES = {IMG.ref: b"png", DOC.ref: b"%PDF"}


async def fetch(ref: str) -> bytes:
    return BYTES[ref]


def request() -> ModelRequest:
    return ModelRequest(
        thread_id="t",
        system="",
        messages=(Message(seq=1, role="user", content="look", parts=(IMG, DOC, CSV)),),
    )


async def test_the_openai_dialect_sends_image_url_and_file_parts_with_the_bytes() -> None:
    model = OpenAIChatModel(model="gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="x", dialect="openai")
    body = model.request_body(request())
    assert body["messages"][0]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": IMG.ref, "detail": "auto"},
    }
    await resolve(body["messages"], {IMG.ref: "image/png", DOC.ref: "application/pdf"}, fetch)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
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
                {"type": "text", "text": "[file: t.csv, text/plain, 4 bytes]\na,b"},
            ],
        }
    ]


def test_a_text_only_dialect_gets_placeholders_and_strict_templates_merge_lists() -> None:
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", dialect="generic")
    assert model.request_body(request())["messages"][0]["content"] == (
        "look\n\n[image: a.png, 640\N{MULTIPLICATION SIGN}480, no text]\n\n"
        "[file: i.pdf, application/pdf, 4 bytes]\nNo 7\n\n[file: t.csv, text/plain, 4 bytes]\na,b"
    )
    from dormant.models.wire import Dialect

    strict = Dialect(name="s", strict_alternation=True, vision=True, image_detail="low")
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", dialect=strict)
    two = ModelRequest(
        thread_id="t",
        system="",
        messages=(
            Message(seq=1, role="user", content="first"),
            Message(seq=2, role="user", content="", parts=(IMG,)),
        ),
    )
    assert model.request_body(two)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "first"},
                {"type": "image_url", "image_url": {"url": IMG.ref, "detail": "low"}},
            ],
        }
    ]
