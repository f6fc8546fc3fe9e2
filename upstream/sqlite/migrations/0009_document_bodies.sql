-- Step 9: a row whose document is, byte for byte, its response body (an
-- import's rows: encoding/json wrote the document, and a read would
-- encode the same bytes) keeps it once. document_body_revision is the
-- revision at which that holds, etag then holds its tag, and body and
-- body_revision stay NULL. A read serves the document as the body while
-- document_body_revision = revision: an import writes each listing's
-- bytes once.
-- Gateways of earlier steps see no kept body there and encode the row once,
-- as for another writer's row.

ALTER TABLE listings ADD COLUMN document_body_revision INTEGER;
