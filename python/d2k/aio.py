"""asyncio client (zmq.asyncio): many episodes at once, pipelined on one DEALER socket.

One reader task matches replies to waiting requests by id. Retry rules are those of the
synchronous client: unanswered requests are resent under the same id, busy/capacity errors are
retried under a fresh id after a back-off, everything else raises a typed D2KError.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Mapping

import zmq
import zmq.asyncio

from . import actions as A
from .cluster.address import resolve_endpoint
from .client import RetryPolicy, StepResult, reset_fields, step_result
from .errors import ClientTimeout, D2KError, UnknownSession
from .wire import (DEFAULT_LIMITS, PRECHECK_BYTES, IdCounter, check_reply,
                   check_request_limits, curve_keys, decode_reply, default_endpoint,
                   encode_request, frame_of, is_auto_retry, is_same_id_retry, make_curve_client)


class AsyncClient:
    """``async with d2k.AsyncClient(endpoint) as c: s = await c.reset("softmax", 2)``"""

    def __init__(self, endpoint: str | None = None, *, timeout: float | None = None,
                 policy: RetryPolicy | None = None, server_key: str | None = None,
                 client_key: str | None = None) -> None:
        # A cluster address (ray:auto, ...) becomes its router's endpoint: d2k.cluster.address.
        self.endpoint = resolve_endpoint(endpoint or default_endpoint()) or default_endpoint()
        self.policy = policy or RetryPolicy()
        self.timeout = timeout
        keys = curve_keys(server_key, client_key)  # CURVE, as d2k.Client
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        make_curve_client(self._socket, keys)
        self._socket.connect(self.endpoint)
        self._ids = IdCounter()
        self._waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._closed = False
        self._limits: dict[str, Any] | None = None  # hello.limits, asked for on first need

    async def limits(self) -> dict[str, Any]:
        """The server's request limits (hello.limits; the protocol's defaults if it has none)."""
        if self._limits is None:
            reply = await self.request("hello", client="d2k-python-async")
            self._limits = dict(DEFAULT_LIMITS, **(reply.get("limits") or {}))
        return self._limits

    async def _read_loop(self) -> None:
        while True:
            msg = await self._socket.recv_multipart()
            try:
                reply = decode_reply(frame_of(msg))
            except D2KError:
                continue  # not ours to answer; the waiting request will time out or be resent
            rid = reply.get("id")
            if rid is None and len(self._waiters) == 1:
                rid = next(iter(self._waiters))
            fut = self._waiters.get(rid)  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result(reply)

    def _ensure_reader(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    async def _exchange_once(self, op: str, fields: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        rid = self._ids()
        frame = encode_request(rid, op, fields)
        if len(frame) > PRECHECK_BYTES and op != "hello":  # refused here, never sent
            check_request_limits(op, fields, len(frame), await self.limits())
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters[rid] = fut
        interval = self.policy.resend_after
        sends = 0
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ClientTimeout(f"no reply to {op} (id {rid}) from {self.endpoint} "
                                        f"after {sends} sends")
                await self._socket.send(frame)  # same id every time: never runs twice
                sends += 1
                try:
                    reply = await asyncio.wait_for(asyncio.shield(fut), min(interval, remaining))
                    delay = self.policy.backoff_delay(min(sends, 6))
                    if is_same_id_retry(reply) and time.monotonic() + delay < deadline:
                        # Held by the server until it can log it: the same frame again, later.
                        fut = asyncio.get_running_loop().create_future()
                        self._waiters[rid] = fut
                        await asyncio.sleep(delay)
                        continue
                    return check_reply(reply)
                except asyncio.TimeoutError:
                    interval = min(interval * 2, self.policy.max_resend_interval)
        finally:
            self._waiters.pop(rid, None)

    async def request(self, op: str, *, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        if self._closed:
            raise D2KError("client is closed", code="client")
        self._ensure_reader()
        if timeout is None:
            timeout = self.timeout if self.timeout is not None else self.policy.timeouts.get(op, 60.0)
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            try:
                return await self._exchange_once(op, fields, deadline)
            except D2KError as err:
                if not is_auto_retry(err) or attempt >= self.policy.auto_retries:
                    raise
                await asyncio.sleep(self.policy.backoff_delay(attempt))
                attempt += 1

    async def hello(self, client: str = "d2k-python-async") -> dict[str, Any]:
        return await self.request("hello", client=client)

    async def list_tasks(self) -> list[dict[str, Any]]:
        return list((await self.request("list_tasks")).get("tasks", []))

    async def stats(self) -> dict[str, Any]:
        return await self.request("stats")

    async def reset(self, task: str, layer: int = 0, seed: int | None = None, *,
                    max_steps: int | None = None, max_compiles: int | None = None,
                    max_evaluations: int | None = None, wall_seconds: float | None = None,
                    label: str | None = None) -> "AsyncSession":
        options = {"max_steps": max_steps, "max_compiles": max_compiles,
                   "max_evaluations": max_evaluations, "wall_seconds": wall_seconds, "label": label}
        reply = await self.request("reset", **reset_fields(task, layer, seed, options))
        return AsyncSession(self, str(reply["session"]), reply.get("observation") or {},
                            reply.get("info") or {})

    async def step(self, session: str, action: Any) -> StepResult:
        reply = await self.request("step", session=session, action=A.normalize_action(action))
        return step_result(reply)

    async def observe(self, session: str) -> dict[str, Any]:
        return await self.request("observe", session=session)

    async def close_session(self, session: str) -> dict[str, Any]:
        return await self.request("close", session=session)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._socket.close(linger=0)
        self._context.term()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class AsyncSession:
    """One open episode of an AsyncClient; ``async with`` closes it."""

    def __init__(self, client: AsyncClient, session_id: str, observation: dict[str, Any],
                 info: dict[str, Any]) -> None:
        self.client = client
        self.id = session_id
        self.observation = observation
        self.info = info
        self.closed = False
        self.end_reason: str | None = None

    @property
    def done(self) -> bool:
        return bool(self.observation.get("done"))

    async def step(self, action: Any) -> StepResult:
        result = await self.client.step(self.id, action)
        self.observation, self.info = result.observation, result.info
        return result

    async def write_file(self, path: str, content: str) -> StepResult:
        return await self.step(A.write_file(path, content))

    async def edit(self, path: str, old: str, new: str) -> StepResult:
        return await self.step(A.edit(path, old, new))

    async def patch(self, diff: str) -> StepResult:
        return await self.step(A.patch(diff))

    async def compile(self) -> StepResult:
        return await self.step(A.compile())

    async def evaluate(self) -> StepResult:
        return await self.step(A.evaluate())

    async def submit(self) -> StepResult:
        return await self.step(A.submit())

    async def observe(self) -> dict[str, Any]:
        reply = await self.client.observe(self.id)
        self.observation = reply.get("observation") or {}
        self.info = reply.get("info") or {}
        return self.observation

    async def close(self) -> dict[str, Any] | None:
        if self.closed:
            return None
        self.closed = True
        try:
            reply = await self.client.close_session(self.id)
        except UnknownSession:
            return None
        self.end_reason = reply.get("end_reason")
        return reply

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.close()
        except D2KError:
            if exc[0] is None:
                raise
