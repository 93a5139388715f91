"""A small, deliberately faulty MCP server over stdio, for the supervision tests.

    python -m tests.integration.mcp_faulty [STATE_DIR]

It speaks just enough of the protocol (the legacy ``initialize`` handshake, ``tools/list``
with paging, ``tools/call``) and misbehaves on demand, one tool per fault:

- ``ok``: answers ``{"text": ...}``; ``fail``: a JSON-RPC error; ``is_error``: ``isError``;
- ``hang``: never answers; ``exit``: exits mid-call; ``flood``: floods stdout with one
  endless line; ``garbage``: answers with a line that is not JSON; ``huge``: a 50 MB result;
- ``slow``: sends a progress notification every 0.2 s for ``seconds``, then answers;
  each call is appended to STATE_DIR/calls.log first (with its dormant call id).

Its tools carry no ``idempotentHint``. Tools are listed two per page (``nextCursor``).
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = ["ok", "fail", "is_error", "hang", "exit", "flood", "garbage", "huge", "slow"]
STATE = sys.argv[1] if len(sys.argv) > 1 else None


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def schema(name: str) -> dict[str, object]:
    props: dict[str, object] = {"text": {"type": "string"}} if name == "ok" else {}
    if name == "slow":
        props = {"seconds": {"type": "number"}}
    return {
        "name": name,
        "description": f"the {name} fault",
        "inputSchema": {"type": "object", "properties": props},
    }


def call(rid: object, params: dict[str, object]) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    assert isinstance(args, dict)
    meta = params.get("_meta") or {}
    assert isinstance(meta, dict)
    if STATE:
        with open(os.path.join(STATE, "calls.log"), "a") as log:
            log.write(f"{name} {meta.get('dormant/callId')}\n")
    if name == "ok":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {"content": [{"type": "text", "text": f"ok: {args.get('text')}"}]},
            }
        )
    elif name == "fail":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": "the disk is on fire"}})
    elif name == "is_error":
        content = [{"type": "text", "text": "no such ticket"}]
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": content, "isError": True}})
    elif name == "hang":
        time.sleep(3600)
    elif name == "exit":
        sys.stderr.write("fatal: the server fell over\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "flood":
        chunk = "x" * 65536
        while True:
            sys.stdout.write(chunk)
    elif name == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
    elif name == "huge":
        text = "y" * (50 * 1024 * 1024)
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}})
    elif name == "slow":
        token = meta.get("progressToken")
        seconds = float(args.get("seconds", 1.0))
        steps = int(seconds / 0.2)
        for step in range(steps):
            time.sleep(0.2)
            if token is not None:
                params = {"progressToken": token, "progress": step + 1, "total": steps}
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": "slow done"}]}})


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if rid is None:
            continue  # a notification
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "faulty", "version": "1"},
            }
            send({"jsonrpc": "2.0", "id": rid, "result": result})
        elif method == "tools/list":
            start = int((message.get("params") or {}).get("cursor") or 0)
            page: dict[str, object] = {"tools": [schema(n) for n in TOOLS[start : start + 2]]}
            if start + 2 < len(TOOLS):
                page["nextCursor"] = str(start + 2)
            send({"jsonrpc": "2.0", "id": rid, "result": page})
        elif method == "tools/call":
            call(rid, message["params"])
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": rid, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
