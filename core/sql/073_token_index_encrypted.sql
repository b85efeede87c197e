-- The token index reads encrypted checkpoint rows (EncryptedSerializer, blob type `<type>+<cipher>`) with the
-- operator's keys, in Python, at the sweep (core/privacy/token_index.py); the plaintext never reaches the database,
-- only token hashes, keyed with the key set for encrypted rows. Per thread it records how many encrypted rows no
-- configured key opened, and the key set it read them with (a fingerprint, never a key), so that a residue scan
-- reads those threads and the ones indexed under other keys (naming what no key opens as not scanned), and a later
-- sweep reads them again only when the keys change.
ALTER TABLE core_thread_tokens ADD COLUMN IF NOT EXISTS encrypted_unread integer NOT NULL DEFAULT 0;
ALTER TABLE core_thread_tokens ADD COLUMN IF NOT EXISTS key_set text;
CREATE INDEX IF NOT EXISTS core_thread_tokens_encrypted_idx ON core_thread_tokens (thread_id)
    WHERE encrypted_unread > 0 OR key_set IS NOT NULL;

-- Threads indexed before this migration: their encrypted rows were indexed as the decoder's marker, not read.
UPDATE core_thread_tokens t SET encrypted_unread = e.n
FROM (SELECT thread_id, count(*)::integer AS n FROM (
          SELECT thread_id FROM checkpoint_writes WHERE type LIKE '%+%'
          UNION ALL
          SELECT thread_id FROM checkpoint_blobs WHERE type LIKE '%+%') r
      GROUP BY thread_id) e
WHERE t.thread_id = e.thread_id;
