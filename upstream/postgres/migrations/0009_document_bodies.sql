-- Step 9: a row whose document is, byte for byte, its response body (an
-- import's rows: encoding/json wrote the document, and a read would
-- encode the same bytes) keeps it once. document_body_revision is the
-- revision at which that holds, etag then holds its tag, and body and
-- body_revision stay NULL. A read serves the document as the body while
-- document_body_revision = revision; a second copy in body would take the
-- row past the TOAST threshold, so that each import row paid for a
-- compressed out-of-line value (a fifth of PostgreSQL's import CPU).
-- Gateways of earlier steps see no kept body there and encode the row once,
-- as for another writer's row.

ALTER TABLE listings ADD COLUMN document_body_revision BIGINT;
