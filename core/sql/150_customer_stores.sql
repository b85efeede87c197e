-- Which store(s) each customer belongs to (issue 39; core/memory/customer_stores.py): a store manager sees the
-- customers of their own stores and nothing else, and every manager-facing read joins this table in SQL.
--
-- One row per (source, customer, store) a source named, with its source: 'query' (CUSTOMER_STORE_QUERY on the
-- application's own tables), 'metadata:<key>' (the store key in the customer's checkpoint metadata),
-- 'document:<key>' (the same key in the customer's own documents). `rank` is the source's place in that order; the
-- rows of the first source that names any store for a customer are that customer's stores (`effective`), the later
-- sources only fill in customers the earlier ones do not know. A customer named in several stores belongs to each.
--
-- Written by the sweep job and on demand (a full refresh per source), never by triggers: nothing is installed on the
-- agents' tables. A change follower (core/capture/) can feed a source's rows for the customers it saw change and
-- recompute `effective` for those customers only (core.memory.customer_stores.apply_source).
CREATE TABLE IF NOT EXISTS core_customer_stores (
    source      text        NOT NULL,
    cliente_id  text        NOT NULL,
    tienda      text        NOT NULL,
    rank        smallint    NOT NULL,
    effective   boolean     NOT NULL DEFAULT false,
    seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, cliente_id, tienda)
);
-- A manager's customers: by store, then customer (the suggestions' range scan on the id as typed).
CREATE INDEX IF NOT EXISTS core_customer_stores_tienda_idx
    ON core_customer_stores (tienda, cliente_id) WHERE effective;
-- Recomputing `effective` for some customers; the erasure's count and delete by customer.
CREATE INDEX IF NOT EXISTS core_customer_stores_cliente_idx ON core_customer_stores (cliente_id);

-- Each source's last refresh: when, how many customers and pairs it named, how long it took, and why it could not be
-- read (NULL: it was). While any source is in error no scoped manager sees any customer (the pages name the source
-- and its error): a mapping missing one of its sources could put a customer in the wrong store.
CREATE TABLE IF NOT EXISTS core_customer_store_sources (
    source        text        PRIMARY KEY,
    rank          smallint    NOT NULL,
    refreshed_at  timestamptz NOT NULL,
    customers     bigint,
    pairs         bigint,
    ms            integer,
    error         text
);

-- The last refresh as a whole: when, by whom, the customers it knew (namespaces under `clientes`, customers named in
-- checkpoint metadata or our conversation log, customers the query named), how many have a store and how many have
-- none (visible to no scoped manager: "N clientes sin tienda").
CREATE TABLE IF NOT EXISTS core_customer_store_refresh (
    id             smallint    PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    refreshed_at   timestamptz NOT NULL,
    trigger        text        NOT NULL,
    customers      bigint      NOT NULL,
    with_store     bigint      NOT NULL,
    without_store  bigint      NOT NULL,
    ms             integer     NOT NULL
);

-- A manager refused another store's customer (opened by URL or typed): logged with who looked (migration 085).
ALTER TABLE core_data_views DROP CONSTRAINT IF EXISTS core_data_views_kind_check;
ALTER TABLE core_data_views ADD CONSTRAINT core_data_views_kind_check
    CHECK (kind IN ('namespace', 'thread', 'search', 'access_preview', 'access_export', 'refused'));
