-- The schema.sql of the release before schema versioning, frozen: what
-- data/gateway.db files made by that release hold (at user_version 0).
-- Applied at every Open, so every statement is idempotent.

CREATE TABLE IF NOT EXISTS firms (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT    NOT NULL,
    key_digest BLOB    NOT NULL UNIQUE,
    created_at TEXT    NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

CREATE TABLE IF NOT EXISTS firm_users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    firm_id       INTEGER NOT NULL REFERENCES firms (id),
    email         TEXT    NOT NULL,
    password_hash TEXT    NOT NULL DEFAULT '',
    UNIQUE (firm_id, email)
);

-- document is the encoding/json of upstream.Listing, kept verbatim; the
-- other columns carry what is searched and checked.
CREATE TABLE IF NOT EXISTS listings (
    id           INTEGER PRIMARY KEY,
    firm_id      INTEGER NOT NULL REFERENCES firms (id),
    no           INTEGER NOT NULL,
    firm_user_id INTEGER NOT NULL REFERENCES firm_users (id),
    is_active    INTEGER NOT NULL,
    revision     INTEGER NOT NULL,
    document     TEXT    NOT NULL,
    UNIQUE (firm_id, no)
);

CREATE INDEX IF NOT EXISTS listings_firm_user_id ON listings (firm_user_id);
