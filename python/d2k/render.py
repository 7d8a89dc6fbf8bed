"""Text rendering of an episode's state for ``KernelEnv.render()`` (render modes "ansi", "human").

What a person wants to see after a step: where the episode is, what the last action did, the
compiler's diagnostics, the evaluation per workload, the reward and its breakdown, and the diff
of the workspace since the episode started.
"""
from __future__ import annotations

import difflib
from typing import Any, Mapping

MAX_DIFF_LINES = 200
MAX_LOG_CHARS = 2000


def _fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def workspace_diff(before: Mapping[str, str], after: Mapping[str, str],
                   max_lines: int = MAX_DIFF_LINES) -> list[str]:
    """Unified diff of two workspaces (path → content), file by file; [] when equal."""
    lines: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        lines += difflib.unified_diff(
            (old or "").splitlines(), (new or "").splitlines(),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null", lineterm="")
    if len(lines) > max_lines:
        hidden = len(lines) - max_lines
        lines = lines[:max_lines] + [f"... ({hidden} more diff lines)"]
    return lines


def compile_lines(comp: Mapping[str, Any]) -> list[str]:
    head = "compile " + ("ok" if comp.get("ok") else "FAILED")
    extras = []
    if comp.get("cached"):
        extras.append("cached")
    if comp.get("timed_out"):
        extras.append("timed out")
    if comp.get("exit_status") not in (None, 0):
        extras.append(f"exit status {comp.get('exit_status')}")
    lines = [head + (f" ({', '.join(extras)})" if extras else "")]
    diagnostics = comp.get("diagnostics") or []
    for d in diagnostics:
        where = ":".join(str(d.get(k)) for k in ("file", "line", "column") if d.get(k) not in (None, ""))
        lines.append(f"  {where}: {d.get('severity', 'error')}: {d.get('message', '')}")
    if not comp.get("ok") and not diagnostics and comp.get("log"):
        log = str(comp["log"])
        if len(log) > MAX_LOG_CHARS:
            log = "..." + log[-MAX_LOG_CHARS:]
        lines += ["  " + line for line in log.splitlines()]
    return lines


def evaluation_lines(ev: Mapping[str, Any]) -> list[str]:
    lines = [f"evaluation {ev.get('status')}" + (f": {ev['message']}" if ev.get("message") else "")]
    for w in ev.get("workloads") or []:
        timing = w.get("timing") or {}
        median = timing.get("median_s")
        t = f"  {median * 1e6:.1f} us" if isinstance(median, (int, float)) else ""
        vis = "" if w.get("visible", True) else " (hidden)"
        lines.append(f"  {w.get('name')}{vis}: {'correct' if w.get('correct') else 'WRONG'}{t}")
    for pid, prop in sorted((ev.get("properties") or {}).items()):
        lines.append(f"  property {pid}: {'met' if prop.get('met') else 'not met'}"
                     + (f" ({prop['detail']})" if prop.get("detail") else ""))
    return lines


def reward_lines(reward: float | None, info: Mapping[str, Any] | None) -> list[str]:
    if reward is None:
        return []
    lines = [f"reward {_fmt(float(reward))}"]
    breakdown = (info or {}).get("reward")
    if isinstance(breakdown, Mapping):
        keys = ("preset", "status", "correct", "score", "speedup_vs_baseline", "fraction_of_expert",
                "t_agent_us", "t_expert_us", "t_baseline_us")
        parts = [f"{k}={_fmt(breakdown[k])}" for k in keys if breakdown.get(k) is not None]
        if parts:
            lines.append("  " + " ".join(parts))
        terms = breakdown.get("terms")
        if isinstance(terms, Mapping) and terms:
            lines.append("  terms: " + " ".join(f"{k}={_fmt(v)}" for k, v in sorted(terms.items())))
    return lines


def render_text(*, task: str, layer: int, session: str | None, observation: Mapping[str, Any],
                initial_files: Mapping[str, str], reward: float | None = None,
                info: Mapping[str, Any] | None = None) -> str:
    obs = observation or {}
    budget = obs.get("budget") or {}
    lines = [f"d2k {task} L{layer}  session {session}  step {obs.get('step', 0)}"
             + (f"  done ({obs.get('end_reason')})" if obs.get("done") else "")]
    if budget:
        lines.append("budget: " + " ".join(
            f"{name} {budget.get(used)}/{budget.get(cap)}"
            for name, used, cap in (("steps", "steps_used", "max_steps"),
                                    ("compiles", "compiles_used", "max_compiles"),
                                    ("evaluations", "evaluations_used", "max_evaluations"))
            if used in budget))
    last = obs.get("last") or {}
    if last:
        line = f"last: {last.get('action')} " + ("ok" if last.get("ok") else "failed")
        error = last.get("error")
        if isinstance(error, Mapping):
            line += f": {error.get('code')}: {error.get('message')}"
        lines.append(line)
        if isinstance(last.get("compile"), Mapping):
            lines += compile_lines(last["compile"])
        if isinstance(last.get("evaluation"), Mapping):
            lines += evaluation_lines(last["evaluation"])
    else:
        lines.append("last: (no step yet)")
    lines += reward_lines(reward, info)
    diff = workspace_diff(initial_files, obs.get("files") or {})
    lines.append("diff since reset:" + ("" if diff else " (none)"))
    lines += diff
    return "\n".join(lines) + "\n"
