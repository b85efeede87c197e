"""A deployment served by Aegra (issue 53): the real `aegra-api` server (tests/aegra_server.py) on a database of the
embedded PostgreSQL, driven by the real LangGraph SDK (`langgraph_sdk.get_sync_client`) through the conversations
below, one server process killed mid-run and a second one started on the same database, then our migrations applied
as a user of the dashboard would.

Customers C9 and C10 (look-alike ids on purpose). What each thread is (`AegraDeployment.threads`):
- c9_retail: our retail agent (core/agents/retail.py, scripted model), a pickup preference saved; the thread is
  created with `metadata={"cliente_id": "C9"}`;
- c9_articulo: the article's agent, a contact preference saved (`hilo` back-link in the document);
- c9_revision: the retail agent with a person approving the save: interrupted, then resumed (two runs);
- c9_fallido: a run that fails (a context without `tienda`): the run row holds the customer's words, and the thread
  has no checkpoint at all (its server row and its checkpoints disagree);
- c10_articulo: C10's preference; c10_cancelado: a slow run cancelled through the SDK;
- c10_colgado: a slow run whose server process was SIGKILLed: its row says `running` for ever.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from aegra_server import AegraServer, install_uuid_ossp, start_aegra
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

C9 = {"cliente_id": "C9", "tienda": "T001"}
C10 = {"cliente_id": "C10", "tienda": "T002"}
# the customers' words the erasure must remove from every table, Aegra's included
C9_WORDS = ("Prefiero recoger el pedido en la tienda T002", "correo ana.c9@ejemplo.es", "teléfono 600111222", "4471")
C10_WORDS = ("Quiero recogida: T003", "espera 30", "espera 600")


def message(text: str) -> dict:
    return {"messages": [{"role": "user", "content": text}]}


@dataclass
class AegraDeployment:
    dsn: str
    server: AegraServer
    workdir: Path
    port: int
    threads: dict[str, str] = field(default_factory=dict)
    runs: dict[str, list[str]] = field(default_factory=dict)

    def client(self) -> SyncLangGraphClient:
        return get_sync_client(url=self.server.url)

    def threads_of(self, customer: str) -> list[str]:
        prefix = f"{customer.lower()}_"
        return sorted(t for label, t in self.threads.items() if label.startswith(prefix))

    def restart(self) -> None:
        self.server.stop()
        self.server = start_aegra(self.dsn, self.workdir, self.port)


def _wait_status(client: SyncLangGraphClient, thread_id: str, run_id: str, status: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while (current := client.runs.get(thread_id, run_id)["status"]) != status:
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} still {current}, not {status}")
        time.sleep(0.1)


def _run(deployment: AegraDeployment, label: str, graph: str, text: str, context: dict, **kw) -> dict:
    client = deployment.client()
    thread_id = deployment.threads[label]
    result = client.runs.wait(thread_id, graph, input=message(text), context=context, **kw)
    deployment.runs.setdefault(label, []).extend(
        r["run_id"] for r in client.runs.list(thread_id) if r["run_id"] not in deployment.runs.get(label, [])
    )
    return result


def deploy(dsn: str, workdir: Path, port: int) -> AegraDeployment:
    """Aegra on the empty database of `dsn`, the conversations above driven through the SDK; a second server runs
    when this returns (the first was killed mid-run). The caller stops it."""
    install_uuid_ossp(dsn)
    server = start_aegra(dsn, workdir, port)
    deployment = AegraDeployment(dsn, server, workdir, port)
    try:
        _converse(deployment)
        deployment.server.kill()
        deployment.server = start_aegra(dsn, workdir, port)
    except BaseException:
        deployment.server.stop()
        raise
    return deployment


def _converse(deployment: AegraDeployment) -> None:
    client = deployment.client()
    labels = ("c9_retail", "c9_articulo", "c9_revision", "c9_fallido", "c10_articulo", "c10_cancelado", "c10_colgado")
    for label in labels:
        metadata = {"cliente_id": "C9"} if label in ("c9_retail", "c9_fallido") else None
        deployment.threads[label] = client.threads.create(metadata=metadata)["thread_id"]
    _run(deployment, "c9_retail", "retail", C9_WORDS[0], C9)
    _run(deployment, "c9_articulo", "articulo", f"Quiero contacto: {C9_WORDS[1]}", C9)
    _run(deployment, "c9_revision", "retail_revision", f"Por favor contactadme siempre por {C9_WORDS[2]}", C9)
    approve = {"resume": {"decisions": [{"type": "approve"}]}}
    thread = deployment.threads["c9_revision"]
    client.runs.wait(thread, "retail_revision", command=approve, context=C9)
    deployment.runs["c9_revision"] = [r["run_id"] for r in client.runs.list(thread)]
    _run(deployment, "c9_fallido", "articulo", f"Hola, mi pedido {C9_WORDS[3]} no llega", {"cliente_id": "C9"})
    _run(deployment, "c10_articulo", "articulo", C10_WORDS[0], C10)
    for label, text in (("c10_cancelado", C10_WORDS[1]), ("c10_colgado", C10_WORDS[2])):
        thread = deployment.threads[label]
        run = client.runs.create(thread, "articulo", input=message(f"Una consulta, {text}"), context=C10)
        deployment.runs[label] = [run["run_id"]]
        _wait_status(client, thread, run["run_id"], "running")
    client.runs.cancel(deployment.threads["c10_cancelado"], deployment.runs["c10_cancelado"][0])
    _wait_status(client, deployment.threads["c10_cancelado"], deployment.runs["c10_cancelado"][0], "interrupted")
