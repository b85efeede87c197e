"""Embeddings for the store's `texto` field.

Production: an OpenAI-compatible endpoint through langchain-openai. The embedded demo
has no network, so it uses an offline deterministic embedding (hashed words), which
the UI names as such: its similarity only reflects shared words, not meaning.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from typing import Any

from langchain_core.embeddings import Embeddings

from core.config import Settings

_WORD = re.compile(r"\w+", re.UNICODE)


def _normalize(text: str) -> list[str]:
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return _WORD.findall(text)


class OfflineHashEmbeddings(Embeddings):
    """Deterministic bag-of-words vectors: each word hashed into one of `dims` buckets, L2-normalised."""

    def __init__(self, dims: int):
        self.dims = dims

    def _embed(self, text: str) -> list[float]:
        vec = [0.0] * self.dims
        for word in _normalize(text):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dims
            vec[bucket] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vec)) or 1.0
        return [v / norm for v in vec]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)


def make_embeddings(settings: Settings, *, timeout_s: float | None = None) -> Embeddings:
    """The configured embeddings. `timeout_s`: a deadline per request and no retries (a page waiting on a person),
    instead of the client's defaults (the agents')."""
    if settings.offline_embeddings:
        return OfflineHashEmbeddings(settings.embeddings_dims)
    from langchain_openai import OpenAIEmbeddings
    from pydantic import SecretStr

    deadline: dict[str, Any] = {"timeout": timeout_s, "max_retries": 0} if timeout_s is not None else {}
    return OpenAIEmbeddings(
        base_url=settings.embeddings_base_url,
        model=settings.embeddings_model,
        api_key=SecretStr(settings.embeddings_api_key or "unused"),
        dimensions=settings.embeddings_dims,
        # The endpoint may not be OpenAI: do not tokenise with tiktoken's OpenAI vocabularies.
        check_embedding_ctx_length=False,
        **deadline,
    )
