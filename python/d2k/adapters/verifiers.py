"""A ``verifiers`` environment for d2k (``pip install 'd2k[verifiers]'``, verifiers >= 0.4, ``verifiers.v1``).

Multi-turn, the engine plays the user (the pattern of verifiers' own OpenEnv taskset): the
environment opens a d2k episode, sends the task as the first user turn, and each reply of the
model becomes one d2k action; the outcome (compile diagnostics, evaluation, reward) is the next
user turn; ``submit``, the episode's end or ``max_turns`` ends the exchange. The reward recorded
on the trace is d2k's, summed over the episode (``d2k_reward``).

A reply is an action in any of these forms (what an LLM writes):
  * a JSON object: ``{"type": "edit", "path": "kernel.cu", "old": "...", "new": "..."}``
    (fenced in ```json ... ``` too);
  * a tool call: ``{"name": "compile", "arguments": {...}}``, the same inside
    ``<tool_call>...</tool_call>``, or the model's native tool calls (``AssistantMessage.tool_calls``),
    whose function name is the action type and whose arguments are its fields.
A reply that is none of these, or an action d2k refuses without taking a step, costs -0.1 (as in
``KernelEnv``) and the next turn says what was wrong.

Use: the taskset id is the top-level module ``d2k_verifiers`` (verifiers looks tasksets up by
module name), e.g. ``vf eval d2k_verifiers --taskset.endpoint tcp://HOST:5555 --taskset.tasks
'["softmax"]' --taskset.layers '[2]'``; ``D2KTaskset`` and ``D2KEnv`` are the classes it exports.
The endpoint may be a server, a cluster router or a ``ray:`` address.

:class:`Conversation` is the loop itself, without verifiers (the test drives it and ``D2KEnv.run``).
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterator

from .. import actions as A
from ..aio import AsyncClient, AsyncSession
from ..errors import D2KError, InvalidAction, NoGpu, TooLarge

INVALID_REWARD = -0.1
REFUSED = (InvalidAction, TooLarge, NoGpu)

ACTION_HELP = (
    "Reply with exactly one action as JSON, for example "
    '{"type": "write_file", "path": "kernel.cu", "content": "..."}, '
    '{"type": "edit", "path": "kernel.cu", "old": "...", "new": "..."}, '
    '{"type": "patch", "diff": "..."}, {"type": "compile"}, {"type": "evaluate"} or {"type": "submit"} '
    '(or as a tool call {"name": "compile", "arguments": {}}).'
)


def parse_action(reply: str, tool_calls: list[Any] | None = None) -> dict[str, Any]:
    """The d2k action a model's reply asks for; raises InvalidAction saying why not."""
    if tool_calls:
        call = tool_calls[0]
        name = getattr(call, "name", None) or (call.get("name") if isinstance(call, dict) else None)
        args = getattr(call, "arguments", None) if not isinstance(call, dict) else call.get("arguments")
        return _from_call(name, args)
    text = reply.strip()
    match = re.search(r"<tool_call>(.*?)</tool_call>", text, re.S)
    if match:
        text = match.group(1).strip()
    fence = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.S)
    if fence:
        text = fence.group(1)
    elif not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start >= 0 and end > start:
            text = text[start:end + 1]
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidAction(f"the reply is not a JSON action ({exc.msg}). {ACTION_HELP}") from None
    if not isinstance(value, dict):
        raise InvalidAction(f"the action must be a JSON object. {ACTION_HELP}")
    if "type" not in value and "name" in value:
        return _from_call(value.get("name"), value.get("arguments", value.get("parameters")))
    return A.normalize_action(value)


def _from_call(name: Any, args: Any) -> dict[str, Any]:
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise InvalidAction(f"tool call arguments are not JSON ({exc.msg}). {ACTION_HELP}") from None
    if not isinstance(name, str) or not isinstance(args, (dict, type(None))):
        raise InvalidAction(f"a tool call needs a name and an arguments object. {ACTION_HELP}")
    return A.normalize_action(dict(args or {}, type=name))


def first_prompt(observation: dict[str, Any]) -> str:
    task = observation.get("task") or {}
    parts = [f"# Task {task.get('id', '')}: {task.get('title', '')}", str(task.get("statement", ""))]
    if task.get("signature"):
        parts.append(f"Signature: {task['signature']}")
    for text in observation.get("guidance") or []:
        parts.append(f"Guidance: {text}")
    files = observation.get("files") or {}
    for path, content in files.items():
        parts.append(f"--- {path} ---\n{content}")
    budget = observation.get("budget") or {}
    if budget:
        parts.append(f"Budget: {json.dumps(budget, sort_keys=True)}")
    parts.append(ACTION_HELP)
    return "\n\n".join(parts)


def outcome_text(observation: dict[str, Any], reward: float, done: bool) -> str:
    last = observation.get("last") or {}
    lines = [f"Step {observation.get('step', '?')}: {last.get('action')} "
             f"{'ok' if last.get('ok') else 'failed'}, reward {reward:+.3f}."]
    if last.get("error"):
        err = last["error"]
        lines.append(f"Error {err.get('code')}: {err.get('message')}")
    compile_result = last.get("compile")
    if isinstance(compile_result, dict):
        for d in (compile_result.get("diagnostics") or [])[:20]:
            lines.append(f"{d.get('file')}:{d.get('line')}:{d.get('column')}: {d.get('severity')}: {d.get('message')}")
        if not compile_result.get("diagnostics") and compile_result.get("log"):
            lines.append(str(compile_result["log"])[-2000:])
    evaluation = last.get("evaluation")
    if isinstance(evaluation, dict):
        lines.append("Evaluation: " + json.dumps(evaluation, sort_keys=True)[:4000])
    if done:
        lines.append(f"The episode ended ({observation.get('end_reason')}).")
    return "\n".join(lines)


class Conversation:
    """One d2k episode as a conversation: ``start()`` gives the first user turn, ``act(reply)``
    runs the reply's action and gives the next one (None once the episode is over)."""

    def __init__(self, client: AsyncClient, task: str, layer: int = 0, seed: int | None = None,
                 options: dict[str, Any] | None = None) -> None:
        self.client, self.task, self.layer, self.seed = client, task, int(layer), seed
        self.options = {k: v for k, v in (options or {}).items() if v is not None}
        self.session: AsyncSession | None = None
        self.observation: dict[str, Any] = {}
        self.total_reward = 0.0
        self.rewards: list[float] = []
        self.done = False
        self.end_reason: str | None = None

    async def start(self) -> str:
        self.session = await self.client.reset(self.task, self.layer, self.seed, **self.options)
        self.observation = self.session.observation
        return first_prompt(self.observation)

    async def act(self, reply: str, tool_calls: list[Any] | None = None) -> str | None:
        assert self.session is not None, "start() first"
        try:
            action = parse_action(reply, tool_calls)
        except InvalidAction as err:  # not an action at all: no d2k step, the usual penalty
            self._record(INVALID_REWARD)
            return f"Not an action: {err.message}"
        try:
            result = await self.session.step(action)
        except REFUSED as err:  # refused by d2k before running: no step taken
            no_gpu = isinstance(err, NoGpu)
            self._record(0.0 if no_gpu else INVALID_REWARD)
            if no_gpu and action.get("type") == "submit":
                self.done, self.end_reason = True, "no_gpu"  # a submit can never succeed here
                return None
            return f"Refused ({err.code}), no step taken: {err.message}\n{ACTION_HELP}"
        self.observation = result.observation
        self._record(result.reward)
        if result.done:
            self.done = True
            self.end_reason = result.info.get("end_reason") or result.observation.get("end_reason")
            return None
        return outcome_text(result.observation, result.reward, False)

    def _record(self, reward: float) -> None:
        self.rewards.append(float(reward))
        self.total_reward += float(reward)

    async def close(self) -> None:
        if self.session is not None:
            try:
                await self.session.close()
            except D2KError:
                pass


# -- the verifiers side (verifiers.v1) ------------------------------------------------------------
import verifiers.v1 as vf  # noqa: E402  (the module is only imported where verifiers is installed)
from verifiers.v1.types import AssistantMessage  # noqa: E402


class D2KData(vf.TaskData):
    endpoint: str | None = None
    task_id: str = "vector_add"
    layer: int = 0
    seed: int | None = None
    options: dict[str, Any] = {}


class D2KTasksetConfig(vf.TasksetConfig):
    endpoint: str | None = None
    """d2k server, cluster router or ray: address (default $D2K_ENDPOINT)."""
    tasks: list[str] = ["vector_add"]
    layers: list[int] = [0]
    seeds: list[int] = [0]
    max_steps: int | None = None
    """d2k's step budget per episode (default: the server's)."""


class D2KTask(vf.Task[D2KData]):
    pass


class D2KTaskset(vf.Taskset[D2KTask, D2KTasksetConfig]):
    """One task per (task, layer, seed)."""

    def load(self) -> Iterator[D2KTask]:
        c = self.config
        for task in c.tasks:
            for layer in c.layers:
                for seed in c.seeds:
                    yield D2KTask(D2KData(name=f"{task}-L{layer}-s{seed}", prompt=None, endpoint=c.endpoint,
                                          task_id=task, layer=layer, seed=seed,
                                          options={"max_steps": c.max_steps}), c.task)


class D2KEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class D2KEnv(vf.Env[D2KEnvConfig]):
    async def run(self, task, agents):
        await run_episode(task, agents.player)


async def run_episode(task: Any, player: Any) -> float:
    """The multi-turn loop of one task with one agent (``D2KEnv.run``'s body)."""
    data = task.data
    async with AsyncClient(data.endpoint) as client:
        talk = Conversation(client, data.task_id, data.layer, data.seed, data.options)
        try:
            prompt = await talk.start()
            async with player.interaction(task) as interaction:
                segment = await interaction.turn(prompt)
                while not segment.terminated:
                    last = next((m for m in reversed(segment.messages)
                                 if isinstance(m, AssistantMessage)), None)
                    calls = getattr(last, "tool_calls", None) if last is not None else None
                    reply = segment.last_reply
                    if not reply and not calls:
                        interaction.trace.stop("empty_action")
                        break
                    feedback = await talk.act(reply, calls)
                    if feedback is None:
                        break
                    segment = await interaction.turn(feedback)
                interaction.trace.record_reward("d2k_reward", talk.total_reward)
        finally:
            await talk.close()
    return talk.total_reward


__all__ = ["D2KEnv", "D2KTaskset"]
