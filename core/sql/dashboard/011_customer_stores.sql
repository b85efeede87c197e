-- The dashboard's own database (issue 52), cluster G: which store(s) each customer belongs to, as the sources
-- configured name them (core/memory/customer_stores.py), and the mapping's last refresh. Same tables and indexes as
-- the agents'-side migration 150 left them (pg_dump of a migrated database, tidied). Refreshed by the sweep job and on
-- demand from the agents' rows (the query, checkpoint metadata, the customers' documents); a store manager's every read
-- takes the scope's customers from here (MINE). Logged: small, and an empty mapping shows a manager nothing until the
-- next refresh.

CREATE TABLE core_customer_store_refresh (
    id smallint DEFAULT 1 NOT NULL,
    refreshed_at timestamp with time zone NOT NULL,
    trigger text NOT NULL,
    customers bigint NOT NULL,
    with_store bigint NOT NULL,
    without_store bigint NOT NULL,
    ms integer NOT NULL,
    CONSTRAINT core_customer_store_refresh_id_check CHECK ((id = 1))
);

CREATE TABLE core_customer_store_sources (
    source text NOT NULL,
    rank smallint NOT NULL,
    refreshed_at timestamp with time zone NOT NULL,
    customers bigint,
    pairs bigint,
    ms integer,
    error text
);

CREATE TABLE core_customer_stores (
    source text NOT NULL,
    cliente_id text NOT NULL,
    tienda text NOT NULL,
    rank smallint NOT NULL,
    effective boolean DEFAULT false NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY core_customer_store_refresh
    ADD CONSTRAINT core_customer_store_refresh_pkey PRIMARY KEY (id);

ALTER TABLE ONLY core_customer_store_sources
    ADD CONSTRAINT core_customer_store_sources_pkey PRIMARY KEY (source);

ALTER TABLE ONLY core_customer_stores
    ADD CONSTRAINT core_customer_stores_pkey PRIMARY KEY (source, cliente_id, tienda);

CREATE INDEX core_customer_stores_cliente_idx ON core_customer_stores USING btree (cliente_id);

CREATE INDEX core_customer_stores_tienda_idx ON core_customer_stores USING btree (tienda, cliente_id) WHERE effective;

