-- Step 5: the change feed. Every INSERT, UPDATE and DELETE of a listing,
-- whoever makes it (this gateway, another process such as the sqlite3
-- shell, a batch job), is recorded in listing_changes by a trigger, in the
-- writer's own transaction. The gateway that holds the feed applies the
-- records to its caches and marks them applied, then done once the CDN was
-- purged too; done records are pruned after the retention.
--
-- The triggers use only SQL that SQLite 3.40 (Debian 12's sqlite3) knows,
-- so that an older SQLite writing this file still fires them. SQLite cannot
-- change NEW in a BEFORE trigger, so the AFTER triggers raise the revision
-- with an UPDATE of the row. Times are milliseconds since 1970.

CREATE TABLE listing_changes (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    listing_id     INTEGER NOT NULL,
    firm_id        INTEGER NOT NULL,
    no             INTEGER NOT NULL,
    old_firm_id    INTEGER,
    old_no         INTEGER,
    revision       INTEGER NOT NULL,
    visible_before INTEGER NOT NULL,
    visible_after  INTEGER NOT NULL,
    deleted        INTEGER NOT NULL,
    changed_at     INTEGER NOT NULL,
    applied_at     INTEGER,
    done_at        INTEGER,
    replayed       INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX listing_changes_undone ON listing_changes (seq) WHERE done_at IS NULL;

CREATE TABLE listing_graves (
    id        INTEGER PRIMARY KEY,
    revision  INTEGER NOT NULL,
    buried_at INTEGER NOT NULL
);

CREATE TABLE feed_state (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    redis_identity TEXT    NOT NULL DEFAULT '',
    holder         TEXT    NOT NULL DEFAULT '',
    lease_until    INTEGER NOT NULL DEFAULT 0
);
INSERT INTO feed_state (id) VALUES (1);

CREATE TRIGGER listings_change_insert AFTER INSERT ON listings
BEGIN
    UPDATE listings SET revision = (SELECT revision + 1 FROM listing_graves WHERE id = NEW.id)
     WHERE id = NEW.id AND revision <= (SELECT revision FROM listing_graves WHERE id = NEW.id);
    INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
    SELECT id, firm_id, no, revision, 0, is_active AND NOT deleted, deleted,
           CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
      FROM listings WHERE id = NEW.id;
END;

CREATE TRIGGER listings_change_update AFTER UPDATE ON listings
BEGIN
    UPDATE listings SET revision = max(OLD.revision + 1,
                                       coalesce((SELECT revision + 1 FROM listing_graves WHERE id = NEW.id AND NEW.id <> OLD.id), 0))
     WHERE id = NEW.id AND (NEW.revision <= OLD.revision
                            OR NEW.revision <= (SELECT revision FROM listing_graves WHERE id = NEW.id AND NEW.id <> OLD.id));
    INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
    SELECT OLD.id, OLD.firm_id, OLD.no, OLD.revision + 1, OLD.is_active AND NOT OLD.deleted, 0, 1,
           CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
     WHERE NEW.id <> OLD.id;
    INSERT INTO listing_graves (id, revision, buried_at)
    SELECT OLD.id, OLD.revision + 1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
     WHERE NEW.id <> OLD.id
        ON CONFLICT (id) DO UPDATE SET revision = max(revision, excluded.revision), buried_at = excluded.buried_at;
    INSERT INTO listing_changes (listing_id, firm_id, no, old_firm_id, old_no, revision, visible_before, visible_after, deleted, changed_at)
    SELECT id, firm_id, no,
           CASE WHEN NEW.id = OLD.id AND (firm_id <> OLD.firm_id OR no <> OLD.no) THEN OLD.firm_id END,
           CASE WHEN NEW.id = OLD.id AND (firm_id <> OLD.firm_id OR no <> OLD.no) THEN OLD.no END,
           revision,
           CASE WHEN NEW.id = OLD.id THEN OLD.is_active AND NOT OLD.deleted ELSE 0 END,
           is_active AND NOT deleted, deleted,
           CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
      FROM listings WHERE id = NEW.id;
END;

CREATE TRIGGER listings_change_delete AFTER DELETE ON listings
BEGIN
    INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
    VALUES (OLD.id, OLD.firm_id, OLD.no, OLD.revision + 1, OLD.is_active AND NOT OLD.deleted, 0, 1,
            CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
    INSERT INTO listing_graves (id, revision, buried_at)
    VALUES (OLD.id, OLD.revision + 1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
        ON CONFLICT (id) DO UPDATE SET revision = max(revision, excluded.revision), buried_at = excluded.buried_at;
END;
