"""Makes ``data/b1_store.db.gz``: a store made by dormant before binding keys became keyed
hashes (schema 9, ``b1_`` keys: sha256 of the parts), with memories, their history and
threads bound to a subject. It was run once with that version's code::

    PYTHONPATH=<checkout of that version>/src python tests/migration/b1_store.py OUT.db
    gzip -9 -c OUT.db > tests/migration/data/b1_store.db.gz

and the file is kept; ``test_binding_migration.py`` opens a copy with the current code.
"""

from __future__ import annotations

import asyncio
import json
import sys
from itertools import count

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.config import Settings
from dormant.subject import SubjectOptions

IDENTITY = {"phone": "+1 555 0100", "device": "ios-1"}
OTHER = {"phone": "+1 555 0100", "device": "android-2"}
_ids = count()


def reply(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user" and last.content.startswith("remember "):
        key, text = last.content.removeprefix("remember ").split(": ", 1)
        args = {"text": text, "tags": {"key": key, "type": "profile"}}
        call = ToolCall(id=f"c{next(_ids)}", name="remember", arguments=json.dumps(args))
        return ModelReply(text="", tool_calls=(call,))
    return ModelReply(text="ok")


async def main(path: str) -> None:
    settings = Settings.model_validate({"retention_interval_s": 0})
    agent = Agent(name="a", model=ScriptedModel(reply), subject=SubjectOptions())
    async with Runtime(f"sqlite:///{path}", [agent], settings=settings) as rt:
        for thread, text, who in (
            ("a", "remember shipping_address: ships to 1 Main Street", IDENTITY),
            ("b", "remember shipping_address: ships to 2 Oak Avenue", IDENTITY),
            ("b", "remember language: speaks Portuguese", IDENTITY),
            ("c", "remember shipping_address: ships to 9 Elm Road", OTHER),
        ):
            await rt.send(thread, text, identity=who)
            await rt.run_until_idle(timeout=30)
        key = await rt.memory.bind(IDENTITY)
        await rt.memory.add(key, "complained about a late parcel", kind="event", tags={"type": "complaint"})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
