-- Step 12: an inserted listing's Last-Modified is a second behind the
-- clock, as every later revision's is (sqlstore.nextModified): the first
-- two revisions within any second then both have dates already past, and
-- the gateway sends them at once (RFC 9110 §8.8.2.1: never a date later
-- than the answer's).

DROP TRIGGER listings_modified_insert;

CREATE TRIGGER listings_modified_insert AFTER INSERT ON listings WHEN NEW.modified_at = 0
BEGIN
    UPDATE listings SET modified_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 1000 WHERE id = NEW.id;
END;
