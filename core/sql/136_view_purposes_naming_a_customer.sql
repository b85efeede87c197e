-- A purpose typed on a view of customer B may name customer A ("llamó por C16"): erasing A redacted only the
-- purposes of A's own views (088). Now also every purpose that names A's id as a word, whoever's view it was
-- (issue 42, item 3): `core_purpose_names`, used here and by the erasure's evidence count
-- (core/privacy/evidence.py VIEW_PURPOSES_COUNT_SQL), so a re-check finds one typed later too. The id as a word:
-- "C1" does not name "C10". Distinctive values (a phone typed into B's purpose) are not matched here: the evidence
-- records its queries verbatim and must not hold the values it proves gone.

CREATE FUNCTION core_purpose_names(purpose text, customer text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT purpose IS NOT NULL AND customer IS NOT NULL AND customer <> ''
       AND strpos(lower(purpose), lower(customer)) > 0  -- cheap test first; then the id as a whole word
       AND purpose ~* ('(^|[^[:alnum:]_])' || regexp_replace(customer, '([].^$*+?(){}|\\[-])', '\\\1', 'g')
                       || '($|[^[:alnum:]_])')
$$;
REVOKE ALL ON FUNCTION core_purpose_names(text, text) FROM PUBLIC;

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
             WHERE (d.customer_id = customer OR (d.kind = 'thread' AND d.target = ANY (coalesce(threads, '{}')))
                    OR core_purpose_names(d.purpose, customer))
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
                          'data (typed on a view of this customer, or naming them); replaced by a marker', request_id)
            FROM core_register_chain c WHERE c.table_name = 'core_data_views' AND c.row_id = v.id;
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;
REVOKE ALL ON FUNCTION core_redact_view_purposes(text, text[], bigint) FROM PUBLIC;
