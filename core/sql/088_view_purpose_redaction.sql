-- The purpose typed when viewing a customer's data (migration 085's core_data_views.purpose, asked for when
-- DATA_VIEWS_PURPOSE is on) is free text: it may hold that customer's personal data ("claim by Ana López, 600 123
-- 456"). An erasure of the customer keeps their views (a proof, like the registers) but redacts the purpose of each
-- one, as migration 056 redacts the erasure register: the value is replaced, and each sealed row gets a record in
-- core_register_redactions (the content hash its link holds, whether the row still hashed to it just before, its
-- content hash right after), itself sealed in the erasure chain; the 'views' chain then verifies through it
-- (core/privacy/chain.py) and lists the redaction. The erasure counts the customer's views with a purpose not
-- redacted among its evidence (`core_data_views.purpose`, core/privacy/evidence.py): 0 after it, and a re-check
-- finds any typed later.

-- The customer's views (theirs by id, and views of the threads the erasure erased) whose purpose is still as typed:
-- purpose replaced by a marker naming the erasure request, each redaction recorded; returns how many. Refuses (and
-- changes nothing) unless `request_id` is an erasure request of `customer`.
CREATE OR REPLACE FUNCTION core_redact_view_purposes(customer text, threads text[], request_id bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v      record;
    was    text;
    marker text := format('[redacted: erasure request #%s]', request_id);
    n      bigint := 0;
BEGIN
    IF customer IS NULL OR btrim(customer) = '' THEN
        RAISE EXCEPTION 'core_redact_view_purposes: a customer id is required' USING ERRCODE = '22023';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM core_erasure_register r WHERE r.id = request_id AND r.customer_id = customer) THEN
        RAISE EXCEPTION 'core_redact_view_purposes: % is not an erasure request of customer %', request_id, customer
            USING ERRCODE = '22023';
    END IF;
    FOR v IN SELECT d.id, c.content_sha256 AS sealed,
                    core_register_link_content(c.table_name, c.row_id, c.sealed_keys) AS content
             FROM core_data_views d
             LEFT JOIN core_register_chain c ON c.table_name = 'core_data_views' AND c.row_id = d.id
             WHERE (d.customer_id = customer OR (d.kind = 'thread' AND d.target = ANY (coalesce(threads, '{}'))))
               AND d.purpose IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM core_register_redactions r
                               WHERE r.table_name = 'core_data_views' AND r.row_id = d.id)
             ORDER BY d.id
             FOR UPDATE OF d LOOP
        was := encode(sha256(convert_to(v.content, 'UTF8')), 'hex');
        UPDATE core_data_views SET purpose = marker WHERE id = v.id;
        IF v.sealed IS NOT NULL THEN  -- sealed on insert: always, unless its link was deleted (the verifier says so)
            INSERT INTO core_register_redactions (table_name, row_id, fields, sealed_sha256, intact, redacted_sha256,
                                                  reason)
            SELECT 'core_data_views', v.id, ARRAY['purpose'], v.sealed, was = v.sealed,
                   encode(sha256(convert_to(core_register_link_content(c.table_name, c.row_id, c.sealed_keys), 'UTF8')),
                          'hex'),
                   format('erasure request #%s: the purpose typed when viewing the customer may hold their personal '
                          'data; replaced by a marker', request_id)
            FROM core_register_chain c WHERE c.table_name = 'core_data_views' AND c.row_id = v.id;
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
REVOKE ALL ON FUNCTION core_redact_view_purposes(text, text[], bigint) FROM PUBLIC;

-- The evidence query (and the DPO's filter by customer) find a customer's thread views by target: an index, so that
-- every erasure and every re-check does not read the whole log (a BitmapOr with core_data_views_customer_idx).
CREATE INDEX IF NOT EXISTS core_data_views_thread_idx ON core_data_views (target) WHERE kind = 'thread';
