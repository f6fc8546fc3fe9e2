-- Step 3: listing numbers start at 1. SQLite cannot add a CHECK to a table,
-- so the table is rebuilt with it and its rows, tombstones included, copied
-- over; a row that breaks it stops the upgrade here. Nothing refers to
-- listings, so dropping it with foreign keys on is safe.

CREATE TABLE listings_new (
    id           INTEGER PRIMARY KEY,
    firm_id      INTEGER NOT NULL REFERENCES firms (id),
    no           INTEGER NOT NULL CONSTRAINT listings_no_positive CHECK (no > 0),
    firm_user_id INTEGER NOT NULL REFERENCES firm_users (id),
    is_active    INTEGER NOT NULL,
    revision     INTEGER NOT NULL,
    document     TEXT    NOT NULL,
    deleted      INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
    UNIQUE (firm_id, no)
);

INSERT INTO listings_new (id, firm_id, no, firm_user_id, is_active, revision, document, deleted)
SELECT id, firm_id, no, firm_user_id, is_active, revision, document, deleted FROM listings;

DROP TABLE listings;
ALTER TABLE listings_new RENAME TO listings;

CREATE INDEX listings_firm_user_id ON listings (firm_user_id);
