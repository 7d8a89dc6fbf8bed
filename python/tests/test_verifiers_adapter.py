"""The verifiers environment (d2k.adapters.verifiers) against the test's real `d2k serve`.

Needs verifiers >= 0.4 (pip install './python[verifiers]'); skipped without it. verifiers pins an
`mcp` that openenv-core's `fastmcp` refuses: use a venv of its own for this test.

What runs for real: verifiers' plugin loader finding the taskset and env by id `d2k_verifiers`,
the taskset's tasks, and `D2KEnv.run`'s multi-turn loop against the server, with a scripted
player that answers through verifiers' own interaction types (Segment, AssistantMessage,
ToolCall): JSON replies, a native tool call, a reply that is not an action. Not exercised here:
a real model behind a verifiers harness (`vf eval` with an inference endpoint).
"""
from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

vf = pytest.importorskip("verifiers.v1", reason="needs verifiers>=0.4: pip install './python[verifiers]'")

from verifiers.v1.types import AssistantMessage, ToolCall  # noqa: E402

from d2k.adapters.verifiers import (Conversation, D2KEnv, D2KTaskset, parse_action,  # noqa: E402
                                    run_episode)

KERNEL = "__global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n"


class ScriptedTrace:
    def __init__(self) -> None:
        self.rewards: dict[str, float] = {}
        self.stopped: str | None = None

    def record_reward(self, name: str, value: float, weight: float = 1.0) -> None:
        self.rewards[name] = value

    def stop(self, condition: str, override: bool = False) -> None:
        self.stopped = condition


class ScriptedPlayer:
    """Plays the model: each turn answers the next scripted message, recording the prompts."""

    def __init__(self, replies: list[AssistantMessage]) -> None:
        self.replies = list(replies)
        self.prompts: list[str] = []
        self.trace = ScriptedTrace()

    @contextlib.asynccontextmanager
    async def interaction(self, task):
        self.task = task
        yield self

    async def turn(self, message: str):
        self.prompts.append(message)
        if not self.replies:
            return vf.Segment(messages=[], terminated=True)
        return vf.Segment(messages=[self.replies.pop(0)])


def test_parse_action_forms():
    assert parse_action('{"type": "compile"}') == {"type": "compile"}
    assert parse_action('Let me compile.\n```json\n{"type": "compile"}\n```') == {"type": "compile"}
    assert parse_action('<tool_call>{"name": "write_file", "arguments": {"path": "a.cu", "content": "x"}}</tool_call>') \
        == {"type": "write_file", "path": "a.cu", "content": "x"}
    call = ToolCall(id="c1", name="edit", arguments=json.dumps({"path": "a.cu", "old": "x", "new": "y"}))
    assert parse_action("", [call]) == {"type": "edit", "path": "a.cu", "old": "x", "new": "y"}
    import d2k
    with pytest.raises(d2k.InvalidAction):
        parse_action("I think the kernel is fine.")


def test_plugin_lookup_finds_taskset_and_env(server, task_id):
    from verifiers.v1.utils.loaders import environment_class, taskset_class

    assert environment_class("d2k_verifiers") is D2KEnv   # `vf eval d2k_verifiers` resolves to these
    assert taskset_class("d2k_verifiers") is D2KTaskset
    from verifiers.v1.utils.loaders import load_environment

    from d2k.adapters.verifiers import D2KEnvConfig

    # As `vf eval` builds it: the env config, its taskset config narrowed from the id.
    config = D2KEnvConfig(taskset={"id": "d2k_verifiers", "endpoint": server.endpoint, "tasks": [task_id],
                                   "layers": [0, 1], "seeds": [5]})
    env = load_environment(config)
    assert isinstance(env, D2KEnv)
    tasks = list(env.taskset)
    assert [(t.data.task_id, t.data.layer, t.data.seed) for t in tasks] == [(task_id, 0, 5), (task_id, 1, 5)]


def test_episode_with_scripted_player(server, task_id):
    from d2k.adapters.verifiers import D2KData, D2KTask

    data = D2KData(name="t", endpoint=server.endpoint, task_id=task_id, layer=1, seed=3,
                   options={"max_steps": 10})
    script = [
        AssistantMessage(content=json.dumps({"type": "write_file", "path": "scratch.cu", "content": KERNEL})),
        AssistantMessage(content="", tool_calls=[ToolCall(id="1", name="edit", arguments=json.dumps(
            {"path": "scratch.cu", "old": "+= 1.0f", "new": "+= 2.0f"}))]),
        AssistantMessage(content="hmm, not sure"),                                 # not an action: -0.1
        AssistantMessage(content='```json\n{"type": "edit", "path": "scratch.cu", "old": "absent", "new": "x"}\n```'),
        AssistantMessage(content='{"type": "compile"}'),
        AssistantMessage(content='{"type": "submit"}'),
    ]
    player = ScriptedPlayer(script)
    total = asyncio.run(run_episode(D2KTask(data), player))
    # The first turn is the task; each later one the previous action's outcome.
    assert task_id in player.prompts[0] and "Reply with exactly one action" in player.prompts[0]
    assert "write_file ok" in player.prompts[1] and "edit ok" in player.prompts[2]
    assert "Not an action" in player.prompts[3]
    assert "edit failed" in player.prompts[4]
    assert player.trace.rewards["d2k_reward"] == pytest.approx(total)
    assert total < 0  # -0.1 for the non-action and d2k's own penalty for the failed edit
    if not server.has_gpu:
        assert len(player.prompts) == 6  # submit on a compile-only server ends it, no more turns


def test_conversation_steps_the_real_session(server, task_id):
    import d2k

    async def go():
        async with d2k.AsyncClient(server.endpoint) as client:
            talk = Conversation(client, task_id, 0, seed=1)
            await talk.start()
            await talk.act('{"type": "write_file", "path": "b.cu", "content": "// b\\n"}')
            obs = await client.observe(talk.session.id)
            await talk.close()
            return obs

    obs = asyncio.run(go())
    assert obs["observation"]["files"]["b.cu"] == "// b\n" and obs["observation"]["step"] == 1
