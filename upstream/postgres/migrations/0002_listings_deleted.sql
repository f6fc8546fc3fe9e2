-- Step 2: tombstones. A deleted listing keeps its row, so that its id and
-- (firm_id, no) are never used again; reads skip it.
ALTER TABLE listings ADD COLUMN deleted BOOLEAN NOT NULL DEFAULT false;
