-- Step 11: each listing's Last-Modified. modified_at is when, by SQLite's
-- clock in milliseconds, the gateway recorded the listing's current
-- revision: its insert (the trigger below), a write of the gateway, or the
-- first read of a revision that another writer made (the read that makes
-- its response body; see sqlstore.nextModified). A new revision's time is
-- always in a later second than the one before it, so that an HTTP date,
-- which has whole seconds, tells any two revisions apart. Rows that exist
-- now take the time of this step: none was ever answered with a
-- Last-Modified. SQLite cannot give an added column the clock as its
-- default, so an insert that leaves it 0 gets it from the trigger; naming
-- no column the change feed watches, that records no change.

ALTER TABLE listings ADD COLUMN modified_at INTEGER NOT NULL DEFAULT 0;

UPDATE listings SET modified_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER);

CREATE TRIGGER listings_modified_insert AFTER INSERT ON listings WHEN NEW.modified_at = 0
BEGIN
    UPDATE listings SET modified_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) WHERE id = NEW.id;
END;
