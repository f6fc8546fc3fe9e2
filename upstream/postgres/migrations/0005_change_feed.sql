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

-- One BEFORE trigger does both jobs, so that a write pays for one call:
-- it raises the revision of writers that do not (an UPDATE gets at least
-- the old revision + 1, and a row inserted under the id of a removed one at
-- least that one's last revision + 1, so that the caches' revision guard
-- lets the new version in; the gateway's own writes raise it themselves and
-- keep their values), and it records the change. A write that then fails
-- takes its record with it. BEFORE triggers run in the order of their
-- names: one of the listing application's that changes firm_id or no
-- should sort before listings_change_feed.
--
-- The function runs as its owner (SECURITY DEFINER), so that a writer's role
-- needs no grant on the feed's tables. A SET search_path clause would make
-- every call save and restore the settings (measured: it doubled the
-- trigger's cost), so instead every table, function and operator the body
-- names is qualified by its schema: a caller's search_path cannot reach it.
DO $do$
BEGIN
EXECUTE format($create$
CREATE FUNCTION %1$I.listings_change_feed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    at BIGINT := pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000);
BEGIN
    -- A removed row, or the old id of an UPDATE that changed it.
    IF TG_OP OPERATOR(pg_catalog.=) 'DELETE'
       OR (TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND NEW.id OPERATOR(pg_catalog.<>) OLD.id) THEN
        INSERT INTO %1$I.listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
        VALUES (OLD.id, OLD.firm_id, OLD.no, OLD.revision OPERATOR(pg_catalog.+) 1,
                OLD.is_active AND NOT OLD.deleted, false, true, at);
        INSERT INTO %1$I.listing_graves AS g (id, revision, buried_at)
        VALUES (OLD.id, OLD.revision OPERATOR(pg_catalog.+) 1, at)
        ON CONFLICT (id) DO UPDATE SET revision = GREATEST(g.revision, EXCLUDED.revision), buried_at = EXCLUDED.buried_at;
        IF TG_OP OPERATOR(pg_catalog.=) 'DELETE' THEN
            RETURN OLD;
        END IF;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' AND NEW.id OPERATOR(pg_catalog.=) OLD.id THEN
        IF NEW.revision OPERATOR(pg_catalog.<=) OLD.revision THEN
            NEW.revision := OLD.revision OPERATOR(pg_catalog.+) 1;
        END IF;
        IF NEW.firm_id OPERATOR(pg_catalog.=) OLD.firm_id AND NEW.no OPERATOR(pg_catalog.=) OLD.no THEN
            INSERT INTO %1$I.listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
            VALUES (NEW.id, NEW.firm_id, NEW.no, NEW.revision, OLD.is_active AND NOT OLD.deleted,
                    NEW.is_active AND NOT NEW.deleted, NEW.deleted, at);
        ELSE
            INSERT INTO %1$I.listing_changes (listing_id, firm_id, no, old_firm_id, old_no, revision, visible_before, visible_after, deleted, changed_at)
            VALUES (NEW.id, NEW.firm_id, NEW.no, OLD.firm_id, OLD.no, NEW.revision, OLD.is_active AND NOT OLD.deleted,
                    NEW.is_active AND NOT NEW.deleted, NEW.deleted, at);
        END IF;
        RETURN NEW;
    END IF;
    -- An INSERT, or the new id of an UPDATE that changed it.
    IF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        NEW.revision := GREATEST(NEW.revision, OLD.revision OPERATOR(pg_catalog.+) 1);
    END IF;
    NEW.revision := GREATEST(NEW.revision,
        (SELECT g.revision OPERATOR(pg_catalog.+) 1 FROM %1$I.listing_graves g WHERE g.id OPERATOR(pg_catalog.=) NEW.id));
    INSERT INTO %1$I.listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
    VALUES (NEW.id, NEW.firm_id, NEW.no, NEW.revision, false, NEW.is_active AND NOT NEW.deleted, NEW.deleted, at);
    RETURN NEW;
END
$fn$
$create$, current_schema());
END
$do$;

CREATE TRIGGER listings_change_feed BEFORE INSERT OR UPDATE OR DELETE ON listings
    FOR EACH ROW EXECUTE FUNCTION listings_change_feed();
