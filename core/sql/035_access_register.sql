-- The access register (GDPR art. 15): one row per export of what the agents hold about a customer
-- (core/privacy/access.py). Like the erasure register it is the DPO's proof: who exported what about
-- whom and when, with the sha256 of the exact file handed over. It keeps no personal data beyond the
-- customer id (the export itself is never stored).
CREATE TABLE IF NOT EXISTS core_access_register (
    id           bigserial PRIMARY KEY,
    customer_id  text        NOT NULL,
    operator     text        NOT NULL,             -- signed-in e-mail, "local", ...
    exported_at  timestamptz NOT NULL DEFAULT now(),
    format       text        NOT NULL CHECK (format IN ('json', 'html')),
    lang         text        NOT NULL,             -- es / en
    sha256       text        NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    size_bytes   bigint      NOT NULL,
    counts       jsonb       NOT NULL,             -- {source: items exported}
    sources      jsonb       NOT NULL              -- the sources searched, as listed on the cover
);
CREATE INDEX IF NOT EXISTS core_access_register_customer_idx ON core_access_register (customer_id, exported_at);
