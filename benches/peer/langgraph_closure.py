"""The LangGraph peer of kleene's `persist_every_step_3_fixes` bench.

The same 3-fix closure as `benches/closure.rs`: the root task and two fixes fail
post-validation, the third fix passes; every phase is a graph node with a trivial body
(governance approves, pre-validation is clean, execution does nothing), and LangGraph's
`InMemorySaver` checkpoints the state after every step. Prints the median and the spread
of the per-closure time.

    python3 -m pip install langgraph==1.2.24
    python3 benches/peer/langgraph_closure.py [RUNS]
"""

import statistics
import sys
import time
import uuid
from typing import TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    task: str
    depth: int
    failures: list
    verdicts: list
    audit: list


def govern(s: State) -> dict:
    return {"audit": s["audit"] + [("governed", s["task"], "approve")]}


def pre_validate(s: State) -> dict:
    return {"audit": s["audit"] + [("pre_validated", s["task"], [])]}


def execute(s: State) -> dict:
    return {"audit": s["audit"] + [("executed", s["task"], "")]}


def post_validate(s: State) -> dict:
    # The root and the first two fixes fail with a distinct blocker; the third fix passes.
    verdict = [] if s["depth"] >= 3 else [("tests", "blocker", f"test t{s['depth']} ... FAILED")]
    return {
        "verdicts": s["verdicts"] + [verdict],
        "audit": s["audit"] + [("post_validated", s["task"], verdict)],
    }


def spawn_fix(s: State) -> dict:
    depth = s["depth"] + 1
    failures = s["failures"] + [(s["depth"], v) for v in s["verdicts"][-1]]
    task = f"x_fix_{depth}"
    return {
        "task": task,
        "depth": depth,
        "failures": failures,
        "audit": s["audit"] + [("subtask_spawned", task, depth)],
    }


def move_next(s: State) -> dict:
    return {"audit": s["audit"] + [("moved_next", s["task"], "complete")]}


def after_post(s: State) -> str:
    return "move_next" if not s["verdicts"][-1] else "spawn_fix"


def build():
    g = StateGraph(State)
    for name, node in [
        ("govern", govern),
        ("pre_validate", pre_validate),
        ("execute", execute),
        ("post_validate", post_validate),
        ("spawn_fix", spawn_fix),
        ("move_next", move_next),
    ]:
        g.add_node(name, node)
    g.add_edge(START, "govern")
    g.add_edge("govern", "pre_validate")
    g.add_edge("pre_validate", "execute")
    g.add_edge("execute", "post_validate")
    g.add_conditional_edges("post_validate", after_post, ["spawn_fix", "move_next"])
    g.add_edge("spawn_fix", "govern")
    g.add_edge("move_next", END)
    return g.compile(checkpointer=InMemorySaver())


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    graph = build()
    start = {"task": "x", "depth": 0, "failures": [], "verdicts": [], "audit": []}
    times = []
    for i in range(runs + 20):
        config = {"configurable": {"thread_id": str(uuid.uuid4())}, "recursion_limit": 100}
        t = time.perf_counter()
        out = graph.invoke(start, config)
        elapsed = time.perf_counter() - t
        assert out["depth"] == 3 and not out["verdicts"][-1]
        if i >= 20:  # warm-up
            times.append(elapsed)
    steps = len(list(graph.get_state_history(config)))
    times.sort()
    q = lambda p: times[int(p * (len(times) - 1))] * 1e3
    print(
        f"langgraph: {steps} checkpoints per closure, median {statistics.median(times) * 1e3:.2f} ms, "
        f"p10 {q(0.1):.2f} ms, p90 {q(0.9):.2f} ms over {runs} runs"
    )


if __name__ == "__main__":
    main()
