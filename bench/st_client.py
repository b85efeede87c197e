"""A minimal client of Streamlit's websocket protocol (what the browser's frontend speaks): open a session,
run the app's script, switch pages, and read what the server sends back.

    async with StreamlitSession("http://127.0.0.1:8501") as session:
        run = await session.run()                 # the default page
        run = await session.run(page="sweeps")    # another page, by its URL path

A run ends at the server's `script_finished`; `Run` keeps the elements' text (markdown, headings, metrics,
exceptions) so a caller can check what the page said, and how long the server took. No browser: no
JavaScript, no rendering, no components; the server's work per page is the same as for a browser."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from dataclasses import dataclass, field

import websockets
from streamlit.proto.Alert_pb2 import Alert
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg


@dataclass
class Run:
    seconds: float = 0.0
    texts: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # st.error boxes (e.g. a read that failed)
    status: str = ""  # ScriptFinishedStatus name, e.g. FINISHED_SUCCESSFULLY
    auto_reruns: dict[str, float] = field(default_factory=dict)  # fragment id -> seconds (st.fragment run_every)

    def says(self, text: str) -> bool:
        return any(text in t for t in self.texts)


def _element_text(element) -> str | None:
    kind = element.WhichOneof("type")
    if kind is None:
        return None
    proto = getattr(element, kind)
    for attr in ("body", "label", "text"):
        value = getattr(proto, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


class StreamlitSession:
    def __init__(self, base_url: str, *, headers: dict[str, str] | None = None, timeout: float = 120):
        parts = urllib.parse.urlsplit(base_url)
        self.ws_url = urllib.parse.urlunsplit(
            (
                "ws" if parts.scheme == "http" else "wss",
                parts.netloc,
                parts.path.rstrip("/") + "/_stcore/stream",
                "",
                "",
            )
        )
        self.headers = headers or {}
        self.timeout = timeout
        self.pages: dict[str, str] = {}  # url path -> page script hash, from the server's navigation message
        self.page_hash = ""
        self._ws = None

    async def __aenter__(self) -> StreamlitSession:
        self._ws = await websockets.connect(
            self.ws_url,
            subprotocols=["streamlit"],
            additional_headers=self.headers,
            max_size=None,
            open_timeout=self.timeout,
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self._ws.close()

    async def run(self, page: str | None = None, query_string: str = "", fragment_id: str = "") -> Run:
        """Run the script for `page` (a URL path such as "sweeps"; None: the current or default page) and
        collect its output until the run finishes. `fragment_id`: rerun only that fragment of the current page,
        as the browser does every `run_every` seconds (the ids are in the page's `Run.auto_reruns`)."""
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = query_string
        if fragment_id:
            state.fragment_id = fragment_id
            state.is_auto_rerun = True
            state.page_script_hash = self.page_hash
        elif page is not None:
            state.page_name = page
            if page in self.pages:
                state.page_script_hash = self.pages[page]
        elif self.page_hash:
            state.page_script_hash = self.page_hash
        started = time.perf_counter()
        await self._ws.send(msg.SerializeToString())
        result = Run()
        deadline = started + self.timeout
        while True:
            raw = await asyncio.wait_for(self._ws.recv(), timeout=max(0.1, deadline - time.perf_counter()))
            fwd = ForwardMsg()
            fwd.ParseFromString(raw)
            kind = fwd.WhichOneof("type")
            if kind == "navigation":
                self.pages = {p.url_pathname: p.page_script_hash for p in fwd.navigation.app_pages}
                self.page_hash = fwd.navigation.page_script_hash
            elif kind == "auto_rerun":
                result.auto_reruns[fwd.auto_rerun.fragment_id] = fwd.auto_rerun.interval
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                element = fwd.delta.new_element
                if element.WhichOneof("type") == "exception":
                    result.exceptions.append(f"{element.exception.type}: {element.exception.message}")
                elif element.WhichOneof("type") == "alert" and element.alert.format == Alert.ERROR:
                    result.errors.append(element.alert.body)
                text = _element_text(element)
                if text:
                    result.texts.append(text)
            elif kind == "script_finished":
                result.status = ForwardMsg.ScriptFinishedStatus.Name(fwd.script_finished)
                # a finished run that was interrupted by a rerun goes on with the rerun
                if result.status != "FINISHED_EARLY_FOR_RERUN":
                    result.seconds = time.perf_counter() - started
                    return result
