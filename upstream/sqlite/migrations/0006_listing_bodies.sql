-- Schema step 6: each listing keeps its response body (the Listing's JSON
-- as a read answers it) and that body's entity tag, made from revision
-- body_revision. A read serves them while body_revision = revision, and
-- otherwise encodes the row again and stores the result; writers other
-- than the gateway need not know of these columns. Filling them names no
-- column that the change feed watches, so the update trigger now fires only
-- for writes that name one of those (SQLite 3.40 runs this form too).

ALTER TABLE listings ADD COLUMN body BLOB;
ALTER TABLE listings ADD COLUMN etag TEXT;
ALTER TABLE listings ADD COLUMN body_revision INTEGER;

DROP TRIGGER listings_change_update;
CREATE TRIGGER listings_change_update
    AFTER UPDATE OF id, firm_id, no, firm_user_id, is_active, revision, document, deleted ON listings
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
