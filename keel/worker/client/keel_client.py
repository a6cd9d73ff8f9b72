"""The Python API for clients: ``KeelClient``, the one class to use.

``KeelClient`` is its parts, by inheritance; each operation is defined once, in its part:

- ``SessionCaller`` (``keel.worker.client.calls``): the state every part shares (the client,
  the task queue, the store) and how a call to a session is made, Temporal's errors as Keel's;
  ``exists``, ``status``, ``check_open``, ``check_worker``, ``task_failure``.
- ``SessionReader`` (``keel.worker.client.reading``): state, turns, events, the model's text,
  listings; writes nothing.
- ``SessionWriter`` (``keel.worker.client.writing``): prompts, ``start``, ``wait_turn``,
  ``run``, ``steer``, ``cancel``, ``close``.
- ``SessionReplays`` (``keel.worker.client.replays``): ``export_case``, ``replay``, ``fork``.
- ``SessionDecider`` (``keel.worker.client.deciding``): ``decide``, ``respond``, ``policy``,
  ``revoke``.
- ``ClientTools`` (``keel.worker.client.client_tools``): ``serve_tools``, ``client_calls``,
  ``tool_result``.

The errors it raises are defined in ``keel.worker.client.errors``.
"""

from __future__ import annotations

from keel.worker.client.client_tools import ClientTools
from keel.worker.client.deciding import SessionDecider
from keel.worker.client.replays import SessionReplays


class KeelClient(SessionReplays, SessionDecider, ClientTools):
    """Talks to ``AgentSession`` workflows on one task queue.

    It is made with ``SessionCaller``'s arguments (a client made by ``connect``, the task
    queue, the store, ...). Its methods come from its parts (see this module); it declares
    none of its own.

    Example:
        >>> keel = KeelClient(await connect("127.0.0.1:7233", "default"), "keel")
        >>> ack = await keel.prompt("s1", "hello", config=SessionConfig(model="scripted:x.json"))
        >>> record = await keel.wait_turn("s1", ack.turn_id)
    """
