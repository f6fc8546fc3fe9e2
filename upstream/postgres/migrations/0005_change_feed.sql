-- Step 5: the change feed. Every INSERT, UPDATE and DELETE of a listing,
-- whoever makes it (this gateway, the listing application, an operator's
-- SQL, a batch job), is recorded in listing_changes by a trigger, in the
-- writer's own transaction. One gateway at a time applies the records to
-- every cache tier and marks them applied, then done once the CDN was
-- purged too; done records are pruned after the retention.
--
-- Times are milliseconds since 1970 by the database's clock. changed_at is
-- taken when the row is written, inside the writer's transaction (the
-- commit follows). The functions run as their owner (SECURITY DEFINER,
-- with this step's search_path), so a writer's role needs no grant on the
-- feed's tables.

CREATE TABLE listing_changes (
    seq            BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    listing_id     BIGINT  NOT NULL,
    firm_id        BIGINT  NOT NULL,
    no             BIGINT  NOT NULL,
    old_firm_id    BIGINT,
    old_no         BIGINT,
    revision       BIGINT  NOT NULL,
    visible_before BOOLEAN NOT NULL,
    visible_after  BOOLEAN NOT NULL,
    deleted        BOOLEAN NOT NULL,
    changed_at     BIGINT  NOT NULL,
    applied_at     BIGINT,
    done_at        BIGINT,
    -- replayed: applied again to a Redis that lost it; the CDN needs no
    -- second purge.
    replayed       BOOLEAN NOT NULL DEFAULT false
);

-- What the consumer reads, and what gateways wait for, is the small set of
-- records not yet done.
CREATE INDEX listing_changes_undone ON listing_changes (seq) WHERE done_at IS NULL;

-- The last revision of listings whose rows were removed, so that a row
-- inserted again under the same id continues above every cached copy.
CREATE TABLE listing_graves (
    id        BIGINT PRIMARY KEY,
    revision  BIGINT NOT NULL,
    buried_at BIGINT NOT NULL
);

-- The consumer's shared state: the Redis its applied marks refer to, and
-- who holds the feed (for operators; PostgreSQL's holder holds an advisory
-- lock).
CREATE TABLE feed_state (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    redis_identity TEXT    NOT NULL DEFAULT '',
    holder         TEXT    NOT NULL DEFAULT '',
    lease_until    BIGINT  NOT NULL DEFAULT 0
);
INSERT INTO feed_state (id) VALUES (1);

-- A writer that does not raise the revision still wins over every cached
-- copy: an UPDATE gets at least the old revision + 1, and a row inserted
-- under the id of a removed one at least that one's last revision + 1.
-- Writes that raise it themselves (the gateway's) keep their value.
CREATE FUNCTION listings_raise_revision() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.revision <= OLD.revision THEN
        NEW.revision := OLD.revision + 1;
    END IF;
    IF TG_OP = 'INSERT' OR NEW.id <> OLD.id THEN
        NEW.revision := GREATEST(NEW.revision, (SELECT revision + 1 FROM listing_graves WHERE id = NEW.id));
    END IF;
    RETURN NEW;
END
$$;

CREATE FUNCTION listings_record_change() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    at BIGINT := floor(extract(epoch FROM clock_timestamp()) * 1000);
BEGIN
    -- A removed row, or the old id of an UPDATE that changed it.
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND NEW.id <> OLD.id) THEN
        INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
        VALUES (OLD.id, OLD.firm_id, OLD.no, OLD.revision + 1, OLD.is_active AND NOT OLD.deleted, false, true, at);
        INSERT INTO listing_graves (id, revision, buried_at) VALUES (OLD.id, OLD.revision + 1, at)
        ON CONFLICT (id) DO UPDATE SET revision = GREATEST(listing_graves.revision, EXCLUDED.revision), buried_at = EXCLUDED.buried_at;
        IF TG_OP = 'DELETE' THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        INSERT INTO listing_changes (listing_id, firm_id, no, old_firm_id, old_no, revision, visible_before, visible_after, deleted, changed_at)
        VALUES (NEW.id, NEW.firm_id, NEW.no,
                CASE WHEN NEW.firm_id <> OLD.firm_id OR NEW.no <> OLD.no THEN OLD.firm_id END,
                CASE WHEN NEW.firm_id <> OLD.firm_id OR NEW.no <> OLD.no THEN OLD.no END,
                NEW.revision, OLD.is_active AND NOT OLD.deleted, NEW.is_active AND NOT NEW.deleted, NEW.deleted, at);
    ELSE
        INSERT INTO listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
        VALUES (NEW.id, NEW.firm_id, NEW.no, NEW.revision, false, NEW.is_active AND NOT NEW.deleted, NEW.deleted, at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER listings_revision BEFORE INSERT OR UPDATE ON listings
    FOR EACH ROW EXECUTE FUNCTION listings_raise_revision();
CREATE TRIGGER listings_change AFTER INSERT OR UPDATE OR DELETE ON listings
    FOR EACH ROW EXECUTE FUNCTION listings_record_change();
