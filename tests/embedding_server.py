"""An OpenAI-compatible embeddings endpoint (`POST /v1/embeddings`) on a real local HTTP server, computing the
offline hash embedding with `dims` dimensions: what `EMBEDDINGS_BASE_URL` points at in the tests (the machine
has no network). With other dims than the store's, it is a model that did not write the store."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

from core.memory.embeddings import OfflineHashEmbeddings


@contextmanager
def embeddings_endpoint(dims: int) -> Iterator[str]:
    """Serve the endpoint while the block runs; yields its base URL (`http://127.0.0.1:PORT/v1`)."""
    model = OfflineHashEmbeddings(dims)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = []
            for i, vector in enumerate(model.embed_documents([str(t) for t in texts])):
                if body.get("encoding_format") == "base64":  # the openai client's default
                    vector = base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
                data.append({"object": "embedding", "index": i, "embedding": vector})
            out = json.dumps(
                {
                    "object": "list",
                    "data": data,
                    "model": body.get("model", "hash"),
                    "usage": {"prompt_tokens": 1, "total_tokens": 1},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
