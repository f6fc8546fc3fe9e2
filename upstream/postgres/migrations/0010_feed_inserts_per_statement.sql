-- Step 10: inserted listings are recorded once per statement. A row
-- trigger ran a PL/pgSQL call and two statements for each inserted row (the
-- removed id's revision, the record): half of PostgreSQL's CPU in an
-- import, and the same for any writer's multi-row INSERT or COPY. Now one
-- AFTER INSERT statement trigger reads the statement's rows from its
-- transition table, records them all with one INSERT ... SELECT, and
-- raises, with one UPDATE, the revision of a row inserted under the id of
-- a removed one above that one's last revision (the rule of step 5: the
-- caches' revision guard then lets the new version in). That UPDATE is a
-- change like any other, so the row trigger records it too; the change
-- feed's consumer reads the rows as committed, which carry the raised
-- revision. Updates and deletes keep the row trigger of step 5 as it was
-- (its insert branch now serves only an UPDATE that changes a row's id).
-- A single-row INSERT costs what it did.
DO $do$
BEGIN
EXECUTE format($create$
CREATE FUNCTION %1$I.listings_insert_feed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $fn$
DECLARE
    at BIGINT := pg_catalog.floor(pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000);
BEGIN
    INSERT INTO %1$I.listing_changes (listing_id, firm_id, no, revision, visible_before, visible_after, deleted, changed_at)
    SELECT n.id, n.firm_id, n.no, GREATEST(n.revision, g.revision OPERATOR(pg_catalog.+) 1), false,
           n.is_active AND NOT n.deleted, n.deleted, at
    FROM inserted n LEFT JOIN %1$I.listing_graves g ON g.id OPERATOR(pg_catalog.=) n.id;
    UPDATE %1$I.listings l SET revision = g.revision OPERATOR(pg_catalog.+) 1
    FROM inserted n JOIN %1$I.listing_graves g ON g.id OPERATOR(pg_catalog.=) n.id
    WHERE l.id OPERATOR(pg_catalog.=) n.id AND l.revision OPERATOR(pg_catalog.<=) g.revision;
    RETURN NULL;
END
$fn$
$create$, current_schema());
END
$do$;

DROP TRIGGER listings_change_feed ON listings;
CREATE TRIGGER listings_change_feed
    BEFORE DELETE OR UPDATE OF id, firm_id, no, firm_user_id, is_active, revision, document, deleted
    ON listings
    FOR EACH ROW EXECUTE FUNCTION listings_change_feed();

CREATE TRIGGER listings_insert_feed AFTER INSERT ON listings
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION listings_insert_feed();
