"""The retail customer agent (core/agents/retail.py) with its scripted model, as Aegra serves it: a compiled graph
without checkpointer or store (Aegra injects its own AsyncPostgresSaver and AsyncPostgresStore per run).

Loaded by Aegra from aegra.json (`dependencies` puts the repository's root on sys.path)."""

from langchain.agents.middleware import HumanInTheLoopMiddleware

from core.agents.retail import build_agent
from core.agents.scripted_model import ScriptedChatModel

graph = build_agent("atencion-cliente", ScriptedChatModel(), store=None)

# The same agent with a person approving each saved preference: LangChain's HumanInTheLoopMiddleware pauses the run
# with langgraph's interrupt(), which Aegra records as an interrupted run and thread; a run with
# `command={"resume": {"decisions": [{"type": "approve"}]}}` goes on.
graph_con_revision = build_agent(
    "atencion-cliente",
    ScriptedChatModel(),
    store=None,
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"recordar_preferencia": True})],
)
