"""Semantic search of the memory with the agents' own embeddings, read-only, in SQL.

The query is embedded with the configured model (`core.memory.embeddings.make_embeddings`: the endpoint the
agents use, or the demo's offline hash embedding), then `store_vectors` is ranked with pgvector's cosine distance
operator (`<=>`, the one the store's HNSW index is built for) in a READ ONLY transaction. Never `store.search`:
it refreshes the TTL of what it returns (`refresh_on_read`), and looking must not extend retention. Expired
documents (not yet swept) are left out, as the agents' own reads leave them out (`omit_expired`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from langchain_core.embeddings import Embeddings

from core.config import Settings
from core.db import Database
from core.memory.customer_stores import ROOT, Scope
from core.memory.embeddings import make_embeddings
from core.memory.reads import scope_prefixes
from core.memory.store import ROOTS, InvalidIdentifier

MAX_QUERY_LENGTH = 1000
MAX_K = 50
ENDPOINT_TIMEOUT_S = 10.0

SELECT_DIMS = """
SELECT a.atttypmod AS dims FROM pg_attribute a
WHERE a.attrelid = to_regclass('store_vectors') AND a.attname = 'embedding' AND NOT a.attisdropped"""
# HNSW (the store's default index) filters after the scan: with pgvector >= 0.8 the scan goes on until k rows pass
# the filters (iterative_scan), and ef_search is at least 2k; an older pgvector ignores the first setting.
SET_SCAN = """
SELECT set_config('hnsw.ef_search', greatest(40, 2 * %(k)s)::text, true),
       CASE WHEN (SELECT extversion FROM pg_extension WHERE extname = 'vector') >= '0.8'
            THEN set_config('hnsw.iterative_scan', 'strict_order', true) END"""
# One row per document (a document indexes one field, `texto`; the best field counts if a store indexes several).
SELECT_NEAREST = r"""
SELECT v.prefix, v.key, split_part(v.prefix, '.', 2) AS holder,
       coalesce(s.value ->> 'tipo', CASE WHEN s.key LIKE 'pref-%%' THEN substr(s.key, 6) END) AS tipo,
       coalesce(s.value ->> 'valor', s.value ->> 'texto', s.value::text) AS valor,
       s.value ->> 'texto' AS texto, s.expires_at, v.distance
FROM (
    SELECT DISTINCT ON (prefix, key) prefix, key, distance FROM (
        SELECT sv.prefix, sv.key, sv.embedding <=> %(q)s::vector AS distance
        FROM store_vectors sv JOIN store st ON st.prefix = sv.prefix AND st.key = sv.key
        WHERE (sv.prefix = %(root)s OR sv.prefix LIKE %(pattern)s ESCAPE '\')
          AND (st.expires_at IS NULL OR st.expires_at > now())
        ORDER BY sv.embedding <=> %(q)s::vector
        LIMIT %(scan)s) nearest
    ORDER BY prefix, key, distance) v
JOIN store s ON s.prefix = v.prefix AND s.key = v.key
WHERE v.distance <= %(max_distance)s
ORDER BY v.distance, v.prefix, v.key
LIMIT %(k)s"""
# A store manager's search (issue 39): exact nearest neighbours among the vectors of the customers of their stores
# (each namespace's vectors by store_vectors' primary key), never the whole index then a filter: an HNSW scan filtered
# to one store in a hundred would stop before finding k of them.
SELECT_SCOPED_NEAREST = r"""
WITH nearest AS MATERIALIZED (
    SELECT DISTINCT ON (sv.prefix, sv.key) sv.prefix, sv.key, sv.embedding <=> %(q)s::vector AS distance
    FROM unnest(%(prefixes)s::text[]) AS p(prefix) JOIN store_vectors sv ON sv.prefix = p.prefix
    ORDER BY sv.prefix, sv.key, sv.embedding <=> %(q)s::vector)
SELECT v.prefix, v.key, split_part(v.prefix, '.', 2) AS holder,
       coalesce(s.value ->> 'tipo', CASE WHEN v.key LIKE 'pref-%%' THEN substr(v.key, 6) END) AS tipo,
       coalesce(s.value ->> 'valor', s.value ->> 'texto', s.value::text) AS valor,
       s.value ->> 'texto' AS texto, s.expires_at, v.distance
FROM (SELECT * FROM nearest WHERE distance <= %(max_distance)s ORDER BY distance, prefix, key) v
-- each candidate's document by the store's primary key, nearest first until k are found (LIMIT 1, at most one anyway,
-- keeps the planner from turning this into a hash join that reads all of `store`: 0.39 s at 1M documents)
CROSS JOIN LATERAL (
    SELECT st.value, st.expires_at FROM store st
    WHERE st.prefix = v.prefix AND st.key = v.key AND (st.expires_at IS NULL OR st.expires_at > now()) LIMIT 1) s
ORDER BY v.distance, v.prefix, v.key
LIMIT %(k)s"""
COLUMNS = ["prefix", "key", "holder", "tipo", "valor", "texto", "expires_at", "similarity"]


class SearchInputError(InvalidIdentifier):
    """The query, the root or k cannot be searched (nothing was embedded nor read)."""


class EmbeddingUnavailable(RuntimeError):
    """The embeddings endpoint did not answer, or answered something that is not a vector of the store's dims."""


@dataclass(frozen=True)
class SearchRequest:
    query: str
    root: str
    k: int


def validate(query: object, root: object, k: object) -> SearchRequest:
    """The request as searched, or SearchInputError saying what is wrong (empty, NUL, too long, unknown root,
    k outside 1..MAX_K)."""
    if not isinstance(query, str) or not query.strip():
        raise SearchInputError("type what to look for, e.g. «¿qué clientes prefieren WhatsApp?»")
    if "\x00" in query:
        raise SearchInputError("the query contains a NUL character")
    if len(query) > MAX_QUERY_LENGTH:
        raise SearchInputError(f"the query is {len(query)} characters long (at most {MAX_QUERY_LENGTH})")
    if root not in ROOTS:
        raise SearchInputError(f"unknown namespace root {root!r}; known: {', '.join(ROOTS)}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise SearchInputError(f"top k must be a whole number from 1 to {MAX_K}, got {k!r}")
    return SearchRequest(query.strip(), root, k)


def embed_query(embeddings: Embeddings, text: str, dims: int) -> list[float]:
    """The query's vector, or EmbeddingUnavailable (endpoint down, an error answer, wrong dims, not numbers)."""
    try:
        vector = embeddings.embed_query(text)
    except Exception as exc:  # any client error (connection, HTTP status, bad JSON) means the same to the user
        raise EmbeddingUnavailable(f"the embeddings endpoint failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(vector, (list, tuple)) or not all(isinstance(v, (int, float)) for v in vector):
        raise EmbeddingUnavailable("the embeddings endpoint answered something that is not a vector")
    if len(vector) != dims:
        raise EmbeddingUnavailable(
            f"the embeddings endpoint gave {len(vector)} dimensions but store_vectors.embedding "
            f"has {dims}: it is not the model that wrote this store"
        )
    if not all(math.isfinite(v) for v in vector):
        raise EmbeddingUnavailable("the embeddings endpoint gave a vector with NaN or infinite values")
    return [float(v) for v in vector]


def search(
    db: Database, settings: Settings, query: object, root: object, k: object, scope: Scope | None = None
) -> pd.DataFrame:
    """The `k` documents under `root` nearest to `query` by meaning, nearest first, with `similarity` = 1 - cosine
    distance (1 same direction, 0 nothing in common, negative opposite), only those at least
    `settings.semantic_min_similarity` similar (a document that shares nothing with the query is no result: issue 54);
    with a `scope`, among the documents of the scope's customers only (`root` must be `clientes`). Read-only: no TTL
    moves. Raises SearchInputError for bad input, EmbeddingUnavailable when the query cannot be embedded as the
    store's vectors were; nothing is read then."""
    request = validate(query, root, k)
    if scope is not None and request.root != ROOT:
        raise SearchInputError(f"a store manager searches the customers of their stores: the root must be {ROOT!r}")
    with db.connection(read_only=True) as conn, conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        row = conn.execute(SELECT_DIMS).fetchone()
        if row is None:
            return pd.DataFrame(columns=COLUMNS)  # no vector index in this store: nothing is searchable
        dims = row["dims"]
    vector = embed_query(make_embeddings(settings, timeout_s=ENDPOINT_TIMEOUT_S), request.query, dims)
    params = {
        "q": "[" + ",".join(repr(v) for v in vector) + "]",
        "root": request.root,
        "pattern": request.root + ".%",
        "k": request.k,
        "scan": request.k * 4,
        # similarity = 1 - distance, so "at least this similar" is "at most this far" (the index's own measure)
        "max_distance": 1.0 - settings.semantic_min_similarity,
    }
    # a manager's: the scope's namespaces first, from where they are kept (issue 52), then their vectors here
    prefixes = None if scope is None else [r["prefix"] for r in scope_prefixes(db, scope)]
    with db.connection(read_only=True) as conn, conn.transaction():
        conn.execute("SET TRANSACTION READ ONLY")
        if prefixes is None:
            conn.execute(SET_SCAN, params)
            rows = conn.execute(SELECT_NEAREST, params).fetchall()
        else:
            rows = conn.execute(SELECT_SCOPED_NEAREST, {**params, "prefixes": prefixes}).fetchall()
    frame = pd.DataFrame(rows, columns=[*COLUMNS[:-1], "distance"])
    frame["similarity"] = (1.0 - frame["distance"].astype(float)).round(3)
    return frame[COLUMNS]


__all__ = [
    "EmbeddingUnavailable",
    "MAX_K",
    "MAX_QUERY_LENGTH",
    "SearchInputError",
    "SearchRequest",
    "embed_query",
    "search",
    "validate",
]
