"""Threads for the thread search and token-usage tests, written by real langgraph graphs:

- `write_stock(dsn)`: a stock `create_agent` built from the memory article (tests/foreign_agents.py: its tools and
  dynamic prompt), stock `PostgresSaver`/`PostgresStore`, nothing from `core/`, on a database not yet migrated.
  Threads: finished with usage metadata (a priced model), finished without usage metadata, one with a model
  nobody priced, one paused by LangChain's HumanInTheLoopMiddleware (langgraph `interrupt()`), one whose model
  raised, and FILLER plain ones; runs tagged as the Agent Server tags them (`graph_id`, `user_id`).
- `write_ours(db)`: our retail agent (core.agents.retail, ScriptedChatModel emitting usage metadata): one finished,
  one paused on an interrupt, one resumed after its interrupt (idle again), one whose model raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from foreign_agents import ContextoCliente, ModeloGuion, llamada, preferencias, prompt_cliente, recordar_preferencia
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.base import TTLConfig
from langgraph.store.postgres import PostgresStore
from langgraph.types import Command
from psycopg_pool import ConnectionPool

PRICED_MODEL = "gpt-4o-mini"
UNPRICED_MODEL = "modelo-sin-precio"
STOCK_GRAPH = "cliente-stock"
FILLER = 27


class ModeloRoto(ModeloGuion):
    """A model whose provider fails: the node raises, langgraph writes `__error__` and re-raises."""

    def _generate(self, *args, **kwargs):  # noqa: ANN002, ANN003
        raise RuntimeError("proveedor caído (503)")


def _usage(msg: AIMessage, model: str, inp: int, out: int, cached: int) -> AIMessage:
    msg.usage_metadata = {
        "input_tokens": inp,
        "output_tokens": out,
        "total_tokens": inp + out,
        "input_token_details": {"cache_read": cached},
    }
    msg.response_metadata = {"model_name": model}
    return msg


@dataclass
class Written:
    threads: dict[str, str] = field(default_factory=dict)  # thread id -> expected status
    agents: dict[str, object] = field(default_factory=dict)  # thread id -> its compiled graph (for get_state)


def _agent(model, saver, store, hitl: bool = False):
    middleware = [prompt_cliente] + ([HumanInTheLoopMiddleware({"recordar_preferencia": True})] if hitl else [])
    return create_agent(
        model,
        tools=[recordar_preferencia, preferencias],
        middleware=middleware,
        context_schema=ContextoCliente,
        checkpointer=saver,
        store=store,
    )


def stock_runs() -> list[tuple[str, str, list[AIMessage], bool, bool]]:
    """(thread id, expected status, model responses, broken model, human in the loop)."""
    runs = [
        (
            "conv-usage",
            "idle",
            [
                _usage(llamada("recordar_preferencia", 1, tipo="contacto", valor="SMS"), PRICED_MODEL, 1200, 40, 1000),
                _usage(AIMessage(content="Anotado."), PRICED_MODEL, 1300, 10, 1200),
            ],
            False,
            False,
        ),
        ("conv-sin-uso", "idle", [AIMessage(content="¿En qué más puedo ayudarte?")], False, False),
        ("conv-sin-precio", "idle", [_usage(AIMessage(content="Hola."), UNPRICED_MODEL, 500, 20, 0)], False, False),
        (
            "conv-hitl",
            "interrupted",
            [_usage(llamada("recordar_preferencia", 2, tipo="horario", valor="tardes"), PRICED_MODEL, 900, 30, 0)],
            False,
            True,
        ),
        ("conv-roto", "error", [], True, False),
    ]
    runs += [(f"conv-relleno-{i:02d}", "idle", [AIMessage(content="Vale.")], False, False) for i in range(FILLER)]
    return runs


def write_stock(dsn: str) -> Written:
    out = Written()
    with ConnectionPool(
        dsn, min_size=1, max_size=4, open=True, kwargs={"autocommit": True, "prepare_threshold": 0}
    ) as pool:
        store = PostgresStore(pool, ttl=TTLConfig(default_ttl=60 * 24 * 365, refresh_on_read=True))
        store.setup()
        saver = PostgresSaver(pool)
        saver.setup()
        for n, (thread, status, responses, broken, hitl) in enumerate(stock_runs()):
            model = ModeloRoto(responses=[AIMessage(content="")]) if broken else ModeloGuion(responses=responses)
            agent = _agent(model, saver, store, hitl=hitl)
            config = {
                "configurable": {"thread_id": thread},
                "metadata": {"graph_id": STOCK_GRAPH, "user_id": f"U{n % 3}"},
            }
            try:
                agent.invoke(
                    {"messages": [HumanMessage("Contactadme por SMS, por las tardes.")]},
                    context=ContextoCliente("C9", "T001"),
                    config=config,
                )
            except RuntimeError:
                assert broken
            out.threads[thread] = status
    return out


def write_ours(db) -> Written:
    """Our retail agent on a migrated database (`db`: core.db.Database)."""
    from conftest import DIMS

    from core.agents.retail import ContextoCliente as Ctx
    from core.agents.retail import build_agent, run_turn
    from core.agents.scripted_model import ScriptedChatModel
    from core.memory.embeddings import OfflineHashEmbeddings
    from core.memory.store import build_store

    class Roto(ScriptedChatModel):
        def _generate(self, *args, **kwargs):  # noqa: ANN002, ANN003
            raise RuntimeError("proveedor caído (503)")

    out = Written()
    store = build_store(db.pool, OfflineHashEmbeddings(DIMS), DIMS)
    saver = PostgresSaver(db.pool)
    plain = build_agent("atencion-cliente", ScriptedChatModel(), store=store, checkpointer=saver)
    hitl = build_agent(
        "atencion-cliente",
        ScriptedChatModel(),
        store=store,
        checkpointer=saver,
        middleware=[HumanInTheLoopMiddleware({"proponer_entrega": True})],
    )
    broken = build_agent("atencion-cliente", Roto(), store=store, checkpointer=saver)
    run_turn(plain, Ctx("C1"), "cliente-C1-1", "Prefiero recoger mis pedidos en la tienda Diagonal.")
    out.threads["cliente-C1-1"] = "idle"
    run_turn(hitl, Ctx("C2"), "cliente-C2-1", "Quiero recoger un pedido, ¿qué me propones?")
    out.threads["cliente-C2-1"] = "interrupted"
    run_turn(hitl, Ctx("C4"), "cliente-C4-1", "Quiero recoger un pedido, ¿qué me propones?")
    hitl.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}),
        context=Ctx("C4"),
        config={
            "configurable": {"thread_id": "cliente-C4-1"},
            "metadata": {"cliente_id": "C4", "agente": "atencion-cliente"},
        },
    )
    out.threads["cliente-C4-1"] = "idle"
    try:
        run_turn(broken, Ctx("C3"), "cliente-C3-1", "Hola, quería saber el estado de mi pedido.")
    except RuntimeError:
        pass
    out.threads["cliente-C3-1"] = "error"
    out.agents = {"plain": plain, "hitl": hitl}
    return out
