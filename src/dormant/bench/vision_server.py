"""A loopback Chat Completions server that takes ``image_url`` parts, in a process of its own.

``python -m dormant.bench.vision_server`` listens on 127.0.0.1 (a free port, printed
as ``port N`` on stdout) and answers every ``POST .../chat/completions`` with one
short streamed reply (``seen N images``, then ``[DONE]``), HTTP/1.1 keep-alive. It
does not decode the JSON (its CPU is not the benchmark's): it counts, in the raw
body, the ``image_url`` parts whose URL is a data URI and the bytes received, so
the benchmark can show the image bytes really went on the wire. ``GET /stats``
answers ``{"requests": .., "images": .., "bytes": .., "largest": ..}``.
"""

from __future__ import annotations

import asyncio
import json

#: What a request body holds once per image sent as a data URI (msgspec writes no spaces).
DATA_URI_MARK = b'"url":"data:image/'


def count_images(body: bytes) -> int:
    """The ``image_url`` parts of a raw Chat Completions body whose URL is a data URI."""
    return body.count(DATA_URI_MARK)


def reply_chunks(images: int) -> bytes:
    """The SSE body of the answer: one text chunk, a finish chunk, ``[DONE]``."""

    def chunk(delta: dict[str, str], finish: str | None) -> bytes:
        body = {
            "id": "chatcmpl-vision",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "loopback-vision",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    return chunk({"content": f"seen {images} images"}, None) + chunk({}, "stop") + b"data: [DONE]\n\n"


class Counters:
    """What the server received."""

    def __init__(self) -> None:
        self.requests = 0
        self.images = 0
        self.bytes = 0
        self.largest = 0

    def as_json(self) -> bytes:
        return json.dumps(
            {"requests": self.requests, "images": self.images, "bytes": self.bytes, "largest": self.largest}
        ).encode()


def _response(body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counters: Counters) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            if method == "GET" and path.endswith("/stats"):
                writer.write(_response(counters.as_json(), "application/json"))
            elif method == "GET":  # /models: the adapter's probe
                writer.write(_response(b'{"object": "list", "data": []}', "application/json"))
            else:
                images = count_images(body)
                counters.requests += 1
                counters.images += images
                counters.bytes += len(body)
                counters.largest = max(counters.largest, len(body))
                writer.write(_response(reply_chunks(images), "text/event-stream"))
            await writer.drain()
    finally:
        writer.close()


async def serve() -> None:
    """Serve until killed; print the port first."""
    counters = Counters()
    server = await asyncio.start_server(
        lambda r, w: _handle(r, w, counters), "127.0.0.1", 0, limit=1024 * 1024
    )
    port = server.sockets[0].getsockname()[1]
    print(f"port {port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve())
