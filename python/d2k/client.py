"""Synchronous client of protocol v1 over a ZeroMQ DEALER socket.

Retries are safe: a request that got no reply in time is resent with the SAME id, and the server
answers a repeated id from its reply cache (or once the first copy finishes) instead of running
the action again. Errors that the server reports before doing anything (busy, capacity) are
retried with a fresh id after a short back-off. Everything else raises a typed
:class:`d2k.D2KError`.

A Client is not thread-safe: use one per thread, or :class:`d2k.AsyncClient` for many episodes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import zmq

from . import actions as A
from .errors import ClientTimeout, D2KError, ProtocolError, UnknownSession, error_from_reply
from .wire import (DEFAULT_LIMITS, DEFAULT_TIMEOUTS, PRECHECK_BYTES, IdCounter,
                   check_reply, check_request_limits, curve_keys, decode_reply, default_endpoint,
                   encode_request, frame_of, is_auto_retry, is_same_id_retry, make_curve_client)


@dataclass
class StepResult:
    """One step's reply: the gymnasium 5-tuple plus helpers to read ``observation.last``."""

    observation: dict[str, Any]
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]

    @property
    def last(self) -> dict[str, Any]:
        return self.observation.get("last") or {}

    @property
    def ok(self) -> bool:
        """Whether the action itself succeeded (False for a bad path, a compile error...)."""
        return bool(self.last.get("ok"))

    @property
    def error(self) -> D2KError | None:
        """The outcome-level failure as a typed error (None on success or compile errors)."""
        from .errors import error_from_outcome
        return error_from_outcome(str(self.last.get("action")), self.last.get("error"))

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    def astuple(self) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self.observation, self.reward, self.terminated, self.truncated, self.info


def step_result(reply: Mapping[str, Any]) -> StepResult:
    return StepResult(observation=dict(reply.get("observation") or {}),
                      reward=float(reply.get("reward", 0.0)),
                      terminated=bool(reply.get("terminated", False)),
                      truncated=bool(reply.get("truncated", False)),
                      info=dict(reply.get("info") or {}))


def reset_fields(task: str, layer: int, seed: int | None, options: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {"task": task, "layer": int(layer)}
    if seed is not None:
        fields["seed"] = int(seed)
    opts = {k: v for k, v in options.items() if v is not None}
    if opts:
        fields["options"] = opts
    return fields


@dataclass
class _Pending:
    op: str
    fields: dict[str, Any]
    request_id: int
    frame: bytes
    deadline: float
    next_send: float
    interval: float
    sends: int = 0
    auto_retries: int = 0
    reply: dict[str, Any] | None = None
    error: D2KError | None = None


@dataclass
class RetryPolicy:
    """How the client waits and retries.

    resend_after: first resend of an unanswered request (same id), in seconds; doubles each
        time up to max_resend_interval. The server answers a duplicate of a request in flight
        once it finishes, so resends never run anything twice.
    auto_retries: how many times busy/capacity errors are retried with a fresh id.
    backoff: first wait before such a retry, doubled each time up to max_backoff.
    timeouts: client-side deadline per op (seconds), see wire.DEFAULT_TIMEOUTS.
    """

    resend_after: float = 2.0
    max_resend_interval: float = 30.0
    auto_retries: int = 8
    backoff: float = 0.2
    max_backoff: float = 5.0

    def backoff_delay(self, attempt: int) -> float:
        return min(self.backoff * (2 ** attempt), self.max_backoff)
    timeouts: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TIMEOUTS))


class Client:
    """A connection to one ``d2k serve``.

    >>> with d2k.Client("tcp://127.0.0.1:5555") as c:
    ...     with c.reset("vector_add", layer=0) as s:
    ...         r = s.compile()
    """

    def __init__(self, endpoint: str | None = None, *, timeout: float | None = None,
                 policy: RetryPolicy | None = None, context: zmq.Context | None = None,
                 server_key: str | None = None, client_key: str | None = None) -> None:
        """``server_key``: the server's .pub file (or key), ``client_key``: this client's .key
        file, for a server with CURVE (`d2k keys`); default $D2K_SERVER_KEY / $D2K_CLIENT_KEY."""
        self.endpoint = endpoint or default_endpoint()
        self.policy = policy or RetryPolicy()
        self.timeout = timeout  # overrides every per-op default when set
        keys = curve_keys(server_key, client_key)
        self._own_context = context is None
        self._context = context or zmq.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        make_curve_client(self._socket, keys)
        self._socket.connect(self.endpoint)
        self._ids = IdCounter()
        self._closed = False
        self._limits: dict[str, Any] | None = None  # hello.limits, asked for on first need

    # -- plumbing -------------------------------------------------------------------------
    def limits(self) -> dict[str, Any]:
        """The server's request limits (hello.limits; the protocol's defaults if it has none)."""
        if self._limits is None:
            reply = self.request("hello", client="d2k-python")
            self._limits = dict(DEFAULT_LIMITS, **(reply.get("limits") or {}))
        return self._limits

    def _over_limits(self, p: "_Pending") -> D2KError | None:
        """The TooLarge error of a request the server would refuse, checked before sending."""
        if len(p.frame) <= PRECHECK_BYTES or p.op == "hello":
            return None
        try:
            check_request_limits(p.op, p.fields, len(p.frame), self.limits())
        except D2KError as err:
            return err
        return None

    def _deadline_for(self, op: str, timeout: float | None) -> float:
        if timeout is None:
            timeout = self.timeout if self.timeout is not None else self.policy.timeouts.get(op, 60.0)
        return time.monotonic() + timeout

    def _new_pending(self, op: str, fields: dict[str, Any], deadline: float, retries: int = 0) -> _Pending:
        rid = self._ids()
        return _Pending(op=op, fields=fields, request_id=rid, frame=encode_request(rid, op, fields),
                        deadline=deadline, next_send=0.0, interval=self.policy.resend_after,
                        auto_retries=retries)

    def request_many(self, requests: Iterable[tuple[str, Mapping[str, Any]]], *,
                     timeout: float | None = None) -> list[dict[str, Any] | D2KError]:
        """Sends all requests at once (pipelined on one socket) and waits for every reply.

        Returns, in order, each ok reply or the typed error (never raises for one request's
        error, so one failed episode does not hide the others' replies).
        """
        if self._closed:
            raise D2KError("client is closed", code="client")
        pending = [self._new_pending(op, dict(fields), self._deadline_for(op, timeout))
                   for op, fields in requests]
        by_id = {p.request_id: p for p in pending}
        waiting = set(by_id)
        for p in pending:  # too large for the server: refused here at once, never sent
            p.error = self._over_limits(p)
            if p.error is not None:
                waiting.discard(p.request_id)
        while waiting:
            now = time.monotonic()
            # In the caller's order (a set has none): a pipelined step must reach the server after
            # the one before it, or the server sees them the other way round.
            for rid in [q.request_id for q in pending if q.request_id in waiting]:
                p = by_id[rid]
                if now >= p.deadline and p.error is not None:  # the last storage_unavailable
                    waiting.discard(rid)
                elif now >= p.deadline:
                    p.error = ClientTimeout(
                        f"no reply to {p.op} (id {rid}) from {self.endpoint} after {p.sends} sends")
                    waiting.discard(rid)
                elif now >= p.next_send:
                    self._socket.send(p.frame)
                    p.sends += 1
                    p.next_send = now + p.interval
                    p.interval = min(p.interval * 2, self.policy.max_resend_interval)
            if not waiting:
                break
            wake = min(min(by_id[r].next_send, by_id[r].deadline) for r in waiting)
            wait_ms = max(0, int((wake - time.monotonic()) * 1000) + 1)
            if not self._socket.poll(wait_ms, zmq.POLLIN):
                continue
            while self._socket.poll(0, zmq.POLLIN):
                reply = decode_reply(frame_of(self._socket.recv_multipart()))
                rid = reply.get("id")
                if rid is None and len(waiting) == 1:
                    rid = next(iter(waiting))  # an error about a request whose id was unreadable
                if rid not in waiting:
                    continue  # a duplicate answer to a resend, or a stale reply
                p = by_id[rid]
                if is_same_id_retry(reply) and p.auto_retries < 1000:
                    # Held by the server until it can log it: the same frame again, later.
                    p.error = error_from_reply(reply)
                    p.next_send = time.monotonic() + self.policy.backoff_delay(min(p.auto_retries, 6))
                    p.auto_retries += 1
                    continue
                try:
                    p.reply = check_reply(reply)
                    waiting.discard(rid)
                except D2KError as err:
                    waiting.discard(rid)
                    if is_auto_retry(err) and p.auto_retries < self.policy.auto_retries:
                        # Nothing ran: ask again under a fresh id after a back-off.
                        retry = self._new_pending(p.op, p.fields, p.deadline, p.auto_retries + 1)
                        retry.next_send = time.monotonic() + self.policy.backoff_delay(p.auto_retries)
                        pending[pending.index(p)] = retry
                        by_id[retry.request_id] = retry
                        waiting.add(retry.request_id)
                    else:
                        p.error = err
        return [p.reply if p.reply is not None else p.error for p in pending]  # type: ignore[misc]

    def request(self, op: str, *, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """One request; returns the ok reply or raises its typed error."""
        (result,) = self.request_many([(op, fields)], timeout=timeout)
        if isinstance(result, D2KError):
            raise result
        return result

    # -- ops --------------------------------------------------------------------------------
    def hello(self, client: str = "d2k-python") -> dict[str, Any]:
        return self.request("hello", client=client)

    def list_tasks(self) -> list[dict[str, Any]]:
        return list(self.request("list_tasks").get("tasks", []))

    def stats(self) -> dict[str, Any]:
        return self.request("stats")

    def reset(self, task: str, layer: int = 0, seed: int | None = None, *,
              max_steps: int | None = None, max_compiles: int | None = None,
              max_evaluations: int | None = None, wall_seconds: float | None = None,
              label: str | None = None) -> "Session":
        """Opens an episode; the returned Session closes it when used as a context manager."""
        options = {"max_steps": max_steps, "max_compiles": max_compiles,
                   "max_evaluations": max_evaluations, "wall_seconds": wall_seconds, "label": label}
        reply = self.request("reset", **reset_fields(task, layer, seed, options))
        return Session(self, str(reply["session"]), reply.get("observation") or {},
                       reply.get("info") or {})

    def step(self, session: str, action: Any) -> StepResult:
        return step_result(self.request("step", session=session, action=A.normalize_action(action)))

    def observe(self, session: str) -> dict[str, Any]:
        return self.request("observe", session=session)

    def close_session(self, session: str) -> dict[str, Any]:
        return self.request("close", session=session)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._socket.close(linger=0)
        if self._own_context:
            self._context.term()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort: sockets hold file descriptors
        try:
            self.close()
        except Exception:
            pass


class Session:
    """One open episode. Use as a context manager to close it on the server at the end."""

    def __init__(self, client: Client, session_id: str, observation: dict[str, Any],
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

    def step(self, action: Any) -> StepResult:
        result = self.client.step(self.id, action)
        self.observation, self.info = result.observation, result.info
        return result

    def write_file(self, path: str, content: str) -> StepResult:
        return self.step(A.write_file(path, content))

    def edit(self, path: str, old: str, new: str) -> StepResult:
        return self.step(A.edit(path, old, new))

    def patch(self, diff: str) -> StepResult:
        return self.step(A.patch(diff))

    def compile(self) -> StepResult:
        return self.step(A.compile())

    def evaluate(self) -> StepResult:
        return self.step(A.evaluate())

    def submit(self) -> StepResult:
        return self.step(A.submit())

    def observe(self) -> dict[str, Any]:
        reply = self.client.observe(self.id)
        self.observation = reply.get("observation") or {}
        self.info = reply.get("info") or {}
        return self.observation

    def close(self) -> dict[str, Any] | None:
        """Closes the episode; a no-op when already closed (or reaped by the server)."""
        if self.closed:
            return None
        self.closed = True
        try:
            reply = self.client.close_session(self.id)
        except UnknownSession:
            return None
        self.end_reason = reply.get("end_reason")
        return reply

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.close()
        except D2KError:
            if exc[0] is None:
                raise


__all__ = ["Client", "Session", "StepResult", "RetryPolicy", "ProtocolError"]
