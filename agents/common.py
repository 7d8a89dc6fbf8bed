"""What every agent shares: command-line options, task files on disk, the per-episode line."""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import d2k

REPO = Path(__file__).resolve().parents[1]


class AgentError(RuntimeError):
    """A failure outside the episode (an unreachable chat API, a missing file) that ends the
    agent with a one-line message instead of a traceback."""


def describe(doc: str | None) -> str:
    """An agent's --help description: the first paragraph of its module docstring, whole."""
    first = (doc or "").strip().split("\n\n")[0]
    return " ".join(first.split())


def exit_on_errors(prog: str, body: Callable[[], int]) -> int:
    """Runs an agent's body; an AgentError or a d2k error (server unreachable, refused) becomes
    one line on stderr and exit status 2."""
    try:
        return body()
    except (AgentError, d2k.D2KError) as err:
        print(f"{prog}: {err}", file=sys.stderr, flush=True)
        return 2


def base_parser(name: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m agents.{name}", description=description)
    p.add_argument("--endpoint", default=os.environ.get("D2K_ENDPOINT", d2k.DEFAULT_ENDPOINT),
                   help="server address (env D2K_ENDPOINT; default %(default)s)")
    p.add_argument("--task", default="vector_add", help="task id (default %(default)s)")
    p.add_argument("--layer", type=int, default=0, choices=range(4), help="guidance layer 0..3")
    p.add_argument("--episodes", type=int, default=1, help="episodes to run (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    p.add_argument("--max-steps", type=int, default=None, help="step budget per episode")
    p.add_argument("--timeout", type=float, default=None,
                   help="client deadline per request in seconds (default: per-op defaults)")
    p.add_argument("--json", action="store_true", help="print each result as a JSON line")
    return p


def add_tasks_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks-dir", type=Path,
                   default=Path(os.environ.get("D2K_TASKS_DIR", REPO / "tasks")),
                   help="task folders on disk (expert and baseline sources are read from here; "
                        "the protocol never serves them). Default: env D2K_TASKS_DIR or <repo>/tasks")


def task_folder(tasks_dir: Path, task_id: str) -> Path:
    """The folder of task_id: <tasks_dir>/<id>, or the folder whose task.json has that id."""
    direct = tasks_dir / task_id
    if (direct / "task.json").is_file():
        return direct
    if tasks_dir.is_dir():
        for sub in sorted(tasks_dir.iterdir()):
            manifest = sub / "task.json"
            try:
                if manifest.is_file() and json.loads(manifest.read_text()).get("id") == task_id:
                    return sub
            except (OSError, ValueError, AttributeError):
                continue
    raise SystemExit(f"error: no folder for task {task_id!r} under {tasks_dir}")


def expert_source(folder: Path, layer: int) -> str:
    """experts/L{k}.cu for layer k; layer 0's target is the full expert (L3)."""
    path = folder / "experts" / f"L{layer if layer > 0 else 3}.cu"
    if not path.is_file():
        raise SystemExit(f"error: expert source missing: {path}")
    return path.read_text()


@dataclass
class EpisodeResult:
    agent: str
    task: str
    layer: int
    episode: int
    steps: int = 0
    total_reward: float = 0.0
    last_reward: float = 0.0
    end_reason: str | None = None
    compiled: bool | None = None
    score: float | None = None
    gpu: bool = True
    note: str = ""
    errors: dict[str, int] = field(default_factory=dict)

    def count_error(self, code: str | None) -> None:
        if code:
            self.errors[code] = self.errors.get(code, 0) + 1

    def take(self, r: d2k.StepResult) -> None:
        self.steps = int(r.observation.get("step", self.steps + 1))
        self.total_reward += r.reward
        self.last_reward = r.reward
        self.end_reason = r.observation.get("end_reason") or r.info.get("end_reason")
        last = r.last
        if last.get("action") == "compile" or "compile" in last:
            self.compiled = bool((last.get("compile") or {}).get("ok"))
        if not last.get("ok", True):
            err = last.get("error") or {}
            self.count_error(err.get("code") or ("compile_error" if "compile" in last else "failed"))
        # The server puts the reward's breakdown (score = t_expert / t) in info.reward.
        breakdown = r.info.get("reward") if isinstance(r.info, dict) else None
        evaluation = last.get("evaluation")
        if isinstance(breakdown, dict) and isinstance(breakdown.get("score"), (int, float)):
            self.score = float(breakdown["score"])
        elif isinstance(evaluation, dict) and isinstance(evaluation.get("score"), (int, float)):
            self.score = float(evaluation["score"])

    def line(self, as_json: bool = False) -> str:
        fields: dict[str, Any] = {
            "agent": self.agent, "task": self.task, "layer": self.layer, "episode": self.episode,
            "steps": self.steps, "return": round(self.total_reward, 4),
            "last_reward": round(self.last_reward, 4), "end": self.end_reason,
            "compiled": self.compiled, "score": self.score, "gpu": self.gpu,
        }
        if self.errors:
            fields["errors"] = dict(sorted(self.errors.items()))
        if self.note:
            fields["note"] = self.note
        if as_json:
            return json.dumps(fields, sort_keys=True)
        parts = []
        for k, v in fields.items():
            if isinstance(v, dict):
                v = ",".join(f"{a}:{b}" for a, b in v.items())
            elif v is None:
                v = "n/a"
            elif isinstance(v, str) and " " in v:
                v = json.dumps(v)
            parts.append(f"{k}={v}")
        return "RESULT " + " ".join(parts)


def run_episodes(args: argparse.Namespace, agent: str,
                 play: Callable[[d2k.Session, EpisodeResult, bool], None],
                 out=None) -> list[EpisodeResult]:
    """Opens args.episodes episodes one after another and prints one line for each."""
    results = []
    with d2k.Client(args.endpoint, timeout=args.timeout) as client:
        gpu = bool(client.hello(f"agents.{agent}").get("gpus"))
        for ep in range(args.episodes):
            res = EpisodeResult(agent, args.task, args.layer, ep, gpu=gpu)
            with client.reset(args.task, args.layer, seed=args.seed + ep, max_steps=args.max_steps,
                              label=f"agents.{agent}") as session:
                play(session, res, gpu)
            res.end_reason = res.end_reason or session.end_reason
            print(res.line(args.json), file=out or sys.stdout, flush=True)
            results.append(res)
    return results


def submit_or_compile(session: d2k.Session, res: EpisodeResult, gpu: bool) -> None:
    """Submits on a GPU server; without a GPU, compiles only and says so."""
    if gpu:
        try:
            res.take(session.submit())
            return
        except d2k.NoGpu:  # the GPU went away between hello and now
            pass
    res.take(session.compile())
    res.note = "no GPU on the server: compiled only, not evaluated"
