"""LLM agent for any OpenAI-compatible chat-completions API: one tool per action type, the task,
guidance and each step's outcome rendered as messages, with token and step budgets.

Endpoint, model and key come from flags or the environment (D2K_LLM_BASE_URL or
OPENAI_BASE_URL; D2K_LLM_MODEL; D2K_LLM_API_KEY or OPENAI_API_KEY)."""
from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

import d2k

from .common import AgentError, EpisodeResult, base_parser, describe, exit_on_errors, run_episodes

MAX_LOG_CHARS = 4000
MAX_FILE_CHARS = 24000

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "write_file", "description": "Create or replace a workspace file.",
        "parameters": {"type": "object", "required": ["path", "content"], "properties": {
            "path": {"type": "string", "description": "relative path, e.g. kernel.cu"},
            "content": {"type": "string", "description": "the whole new file"}}}}},
    {"type": "function", "function": {
        "name": "edit", "description": "Replace one exact occurrence of `old` with `new` in a file.",
        "parameters": {"type": "object", "required": ["path", "old", "new"], "properties": {
            "path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "patch", "description": "Apply a unified diff (---/+++/@@ hunks) to workspace files.",
        "parameters": {"type": "object", "required": ["diff"], "properties": {
            "diff": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "compile", "description": "Compile the task's main file with nvcc in the sandbox.",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "evaluate",
        "description": "Compile, check correctness and time the kernel on the visible workloads (GPU).",
        "parameters": {"type": "object", "properties": {}}}},
    {"type": "function", "function": {
        "name": "submit",
        "description": "Final answer: evaluate on visible and hidden workloads. Ends the episode.",
        "parameters": {"type": "object", "properties": {}}}},
]


def system_prompt(obs: dict[str, Any]) -> str:
    task = obs.get("task") or {}
    parts = [
        "You write fast, correct CUDA kernels. Work only through the tools; every tool call is "
        "one step of a limited budget. Write the whole .cu file (kernels plus the host launcher "
        "with the exact C ABI below), compile, fix errors, evaluate, then submit.",
        f"# Task {task.get('id')}: {task.get('title')}\n{task.get('statement', '')}",
        f"Entry point (C ABI):\n{task.get('signature', '')}",
        f"Main file: {task.get('main_file', 'kernel.cu')}",
        "Visible workloads: " + json.dumps(task.get("workloads", [])),
    ]
    for g in obs.get("guidance") or []:
        parts.append(f"# Guidance L{g.get('layer')}: {g.get('title')}\n{g.get('text')}")
    return "\n\n".join(parts)


def render_files(obs: dict[str, Any]) -> str:
    out = []
    for path, content in sorted((obs.get("files") or {}).items()):
        body = content if len(content) <= MAX_FILE_CHARS else content[:MAX_FILE_CHARS] + "\n…[cut]"
        out.append(f"--- {path}\n{body}")
    return "\n".join(out)


def render_outcome(r: d2k.StepResult) -> str:
    last = r.last
    lines = [f"action {last.get('action')}: {'ok' if last.get('ok') else 'FAILED'}; "
             f"reward {r.reward:+.3f}; step {r.observation.get('step')}"]
    if last.get("error"):
        lines.append(f"error {last['error'].get('code')}: {last['error'].get('message')}")
    comp = last.get("compile")
    if comp:
        lines.append(f"compile ok={comp.get('ok')} exit={comp.get('exit_status')}")
        for d in (comp.get("diagnostics") or [])[:20]:
            lines.append(f"{d.get('file')}:{d.get('line')}:{d.get('column')}: "
                         f"{d.get('severity')}: {d.get('message')}")
        if not comp.get("ok") and comp.get("log"):
            lines.append(comp["log"][-MAX_LOG_CHARS:])
    if last.get("evaluation") is not None:
        lines.append("evaluation: " + json.dumps(last["evaluation"])[:MAX_LOG_CHARS])
    budget = r.observation.get("budget") or {}
    lines.append("budget: " + json.dumps({k: v for k, v in budget.items() if "seconds" not in k}))
    if r.done:
        lines.append(f"episode ended: {r.observation.get('end_reason')}")
    return "\n".join(lines)


class ChatAPI:
    """POST {base_url}/chat/completions with urllib (no SDK needed)."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout: float,
                 temperature: float | None) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key, self.timeout, self.temperature = model, api_key, timeout, temperature

    def complete(self, messages: list[dict[str, Any]], max_tokens: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "tools": TOOLS,
                                "tool_choice": "auto"}
        if max_tokens:
            body["max_tokens"] = max_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            raise AgentError(f"the chat API {self.url} answered {exc.code}: {detail}") from None
        except urllib.error.URLError as exc:  # refused, unknown host, TLS failure
            raise AgentError(f"cannot reach the chat API {self.url}: {exc.reason} "
                             "(set --base-url or D2K_LLM_BASE_URL)") from None
        except (OSError, TimeoutError) as exc:  # reset connection, read timeout
            raise AgentError(f"the chat API {self.url} failed: {exc}") from None
        except json.JSONDecodeError as exc:
            raise AgentError(f"the chat API {self.url} answered something that is not JSON: {exc}") from None


def tool_action(name: str, arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        raise d2k.InvalidAction(f"arguments of {name} are not a JSON object")
    return {"type": name, **args}


def play_llm(session: d2k.Session, res: EpisodeResult, api: ChatAPI, max_tokens: int,
             max_turns: int, max_completion_tokens: int | None) -> None:
    obs = session.observation
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system_prompt(obs)},
        {"role": "user", "content": "Workspace files:\n" + render_files(obs)},
    ]
    used_tokens = 0
    for _ in range(max_turns):
        if session.done:
            return
        if used_tokens >= max_tokens:
            res.note = f"token budget {max_tokens} used up"
            return
        reply = api.complete(messages, max_completion_tokens)
        used_tokens += int((reply.get("usage") or {}).get("total_tokens", 0))
        message = (reply.get("choices") or [{}])[0].get("message") or {}
        calls = message.get("tool_calls") or []
        messages.append({"role": "assistant", "content": message.get("content"),
                         **({"tool_calls": calls} if calls else {})})
        if not calls:
            messages.append({"role": "user", "content": "Use one of the tools (write_file, edit, "
                             "patch, compile, evaluate, submit)."})
            continue
        for call in calls:
            fn = call.get("function") or {}
            if session.done:
                text = "episode already ended"
            else:
                try:
                    r = session.step(tool_action(str(fn.get("name")), fn.get("arguments", "{}")))
                    res.take(r)
                    text = render_outcome(r)
                    if r.last.get("action") in ("write_file", "edit", "patch") and r.last.get("ok"):
                        text += "\nFiles now:\n" + render_files(r.observation)
                except (d2k.InvalidAction, d2k.TooLarge, d2k.NoGpu, d2k.EpisodeEnded) as err:
                    res.count_error(f"refused:{err.code}")
                    text = f"refused ({err.code}): {err.message}; no step used"
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": text})
    res.note = res.note or f"turn budget {max_turns} used up"


def main(argv: list[str] | None = None) -> int:
    p = base_parser("llm", describe(__doc__))
    p.add_argument("--base-url", default=os.environ.get("D2K_LLM_BASE_URL")
                   or os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
                   help="chat API base URL (…/v1); env D2K_LLM_BASE_URL or OPENAI_BASE_URL")
    p.add_argument("--model", default=os.environ.get("D2K_LLM_MODEL", "gpt-4o-mini"),
                   help="model name; env D2K_LLM_MODEL")
    p.add_argument("--api-key", default=os.environ.get("D2K_LLM_API_KEY")
                   or os.environ.get("OPENAI_API_KEY"),
                   help="API key; env D2K_LLM_API_KEY or OPENAI_API_KEY")
    p.add_argument("--max-tokens", type=int, default=200_000,
                   help="total tokens (usage.total_tokens) per episode (default %(default)s)")
    p.add_argument("--max-turns", type=int, default=30, help="chat turns per episode")
    p.add_argument("--max-completion-tokens", type=int, default=None,
                   help="max_tokens sent with each request")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--http-timeout", type=float, default=300.0, help="seconds per chat request")
    args = p.parse_args(argv)
    api = ChatAPI(args.base_url, args.model, args.api_key, args.http_timeout, args.temperature)

    def play(session: d2k.Session, res: EpisodeResult, gpu: bool) -> None:
        play_llm(session, res, api, args.max_tokens, args.max_turns, args.max_completion_tokens)

    def body() -> int:
        run_episodes(args, "llm", play)
        return 0

    return exit_on_errors("agents.llm", body)


if __name__ == "__main__":
    sys.exit(main())
