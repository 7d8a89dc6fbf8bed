"""The baseline agents (agents/) against a real server. The LLM agent talks to a local stand-in
HTTP server (http.server in a thread) that answers like the chat-completions API with tool
calls; no real model is contacted."""
from __future__ import annotations

import io
import json
import threading
from contextlib import redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import REPO, tasks_dir


def run_agent(module, argv):
    out = io.StringIO()
    with redirect_stdout(out):
        code = module.main(argv)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    return code, [json.loads(ln) for ln in lines]


def common(server, task_id, *extra):
    return ["--endpoint", server.endpoint, "--task", task_id, "--json", *extra]


def test_expert_replayer(server, task_id):
    from agents import expert
    code, results = run_agent(expert, common(server, task_id, "--layer", "2",
                                             "--tasks-dir", str(tasks_dir())))
    assert code == 0 and len(results) == 1
    r = results[0]
    assert r["agent"] == "expert" and r["layer"] == 2 and r["compiled"] is True
    if server.has_gpu:
        assert r["end"] == "submitted" and r["score"] is not None and r["score"] > 0.7
    else:
        assert r["gpu"] is False and "compiled only" in r["note"]


def test_baseline_agent(server, task_id):
    from agents import baseline
    code, results = run_agent(baseline, common(server, task_id, "--episodes", "2",
                                               "--tasks-dir", str(tasks_dir())))
    assert code == 0 and [r["episode"] for r in results] == [0, 1]
    assert all(r["compiled"] is True for r in results)


def test_random_edit_agent_hits_failures(server, task_id):
    from agents import random_edit
    code, results = run_agent(random_edit, common(server, task_id, "--actions", "10", "--seed", "3"))
    assert code == 0
    r = results[0]
    assert r["steps"] >= 1 and r["errors"], "random edits should produce some failures"
    # Same seed, same actions: the same failures.
    _, again = run_agent(random_edit, common(server, task_id, "--actions", "10", "--seed", "3"))
    assert again[0]["errors"] == r["errors"] and again[0]["steps"] == r["steps"]


class ChatStandIn(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions with a scripted sequence of tool calls."""

    script: list[dict] = []
    requests: list[dict] = []
    headers_seen: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        type(self).headers_seen.append(dict(self.headers))
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        turn = len(type(self).requests) - 1
        message = type(self).script[min(turn, len(type(self).script) - 1)]
        payload = json.dumps({"id": f"c{turn}", "object": "chat.completion",
                              "choices": [{"index": 0, "message": message,
                                           "finish_reason": "tool_calls"}],
                              "usage": {"prompt_tokens": 100, "completion_tokens": 20,
                                        "total_tokens": 120}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):  # keep test output clean
        pass


def tool_call(i, name, **args):
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


@pytest.fixture()
def chat_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ChatStandIn)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    ChatStandIn.requests, ChatStandIn.headers_seen = [], []
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_llm_agent_with_stand_in_chat_api(server, task_id, chat_server):
    from agents import llm
    baseline = (tasks_dir() / task_id / "baseline.cu")
    source = baseline.read_text() if baseline.is_file() else "// no baseline\n"
    ChatStandIn.script = [
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call(0, "write_file", path="kernel.cu", content=source)]},
        {"role": "assistant", "content": "now compile", "tool_calls": [tool_call(1, "compile")]},
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call(2, "edit", path="kernel.cu", old="text that is absent", new="x"),
            tool_call(3, "write_file", path="../../etc/x.cu", content="x")]},
        {"role": "assistant", "content": "thinking without tools"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call(4, "submit")]},
    ]
    code, results = run_agent(llm, common(server, task_id, "--layer", "1",
                                          "--base-url", chat_server, "--model", "stand-in",
                                          "--api-key", "sk-test", "--max-turns", "5"))
    assert code == 0
    r = results[0]
    assert r["compiled"] is True
    assert r["errors"].get("invalid_action") == 1 and r["errors"].get("path_violation") == 1
    reqs = ChatStandIn.requests
    assert len(reqs) == 5
    assert {t["function"]["name"] for t in reqs[0]["tools"]} == {
        "write_file", "edit", "patch", "compile", "evaluate", "submit"}
    assert reqs[0]["model"] == "stand-in" and reqs[0]["messages"][0]["role"] == "system"
    assert "Guidance L1" in reqs[0]["messages"][0]["content"]
    assert ChatStandIn.headers_seen[0]["Authorization"] == "Bearer sk-test"
    tool_msgs = [m for m in reqs[2]["messages"] if m["role"] == "tool"]
    assert tool_msgs[-1]["tool_call_id"] == "call_1" and "compile ok=True" in tool_msgs[-1]["content"]
    assert reqs[4]["messages"][-1]["role"] == "user", "a reply without tools gets a nudge"
    if server.has_gpu:
        assert r["end"] == "submitted"
    else:
        assert r["errors"].get("refused:no_gpu") == 1 and r["steps"] == 4


def test_llm_agent_token_budget(server, task_id, chat_server):
    from agents import llm
    ChatStandIn.script = [{"role": "assistant", "content": None,
                           "tool_calls": [tool_call(0, "compile")]}]
    code, results = run_agent(llm, common(server, task_id, "--base-url", chat_server,
                                          "--max-tokens", "240", "--max-turns", "10"))
    assert code == 0 and len(ChatStandIn.requests) == 2  # 120 tokens a turn
    assert "token budget" in results[0]["note"] and results[0]["steps"] == 2


def test_agents_cli_help():
    import subprocess
    import sys
    for name in ("expert", "baseline", "random_edit", "llm"):
        out = subprocess.run([sys.executable, "-m", f"agents.{name}", "--help"], cwd=REPO,
                             capture_output=True, text=True, timeout=20)
        assert out.returncode == 0 and "--endpoint" in out.stdout


def test_agents_help_keeps_the_whole_description():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "agents.llm", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=20)
    text = " ".join(out.stdout.split())
    assert "the task, guidance and each step's outcome rendered as messages, with token and step budgets." in text


def test_llm_agent_with_an_unreachable_chat_api_says_so_in_one_line(server, task_id):
    import subprocess
    import sys
    from conftest import free_port
    closed = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    out = subprocess.run([sys.executable, "-m", "agents.llm", "--endpoint", server.endpoint,
                          "--task", task_id, "--base-url", closed, "--max-turns", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert f"cannot reach the chat API {closed}/chat/completions" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
