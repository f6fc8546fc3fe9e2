-- Step 12: an inserted listing's Last-Modified is two seconds behind the
-- clock, as every later revision's is (sqlstore.nextModified): the first
-- two revisions within any second then both have dates that the Date of
-- an answer, which lags the clock by up to a second, has already passed,
-- and the gateway sends them at once (RFC 9110 §8.8.2.1: never a date
-- later than the answer's).

DROP TRIGGER listings_modified_insert;

CREATE TRIGGER listings_modified_insert AFTER INSERT ON listings WHEN NEW.modified_at = 0
BEGIN
    UPDATE listings SET modified_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 2000 WHERE id = NEW.id;
END;
