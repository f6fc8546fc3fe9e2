-- Step 8: a counter of listing numbers per firm. A listing created without
-- a number gets the first number from next_no up that no listing of the
-- firm has (numbers that clients gave, other writers' rows and tombstones
-- are skipped), and next_no moves past it; past the largest allowed number
-- (2^53 - 1) the search starts again from 1. A given number never moves the
-- counter, so one listing created with the largest number does not leave
-- the firm without numbers to assign, as max + 1 did. Existing firms
-- continue above their largest number below the bound, as max + 1 would
-- have numbered them.

ALTER TABLE firms ADD COLUMN next_no BIGINT NOT NULL DEFAULT 1;

UPDATE firms SET next_no = COALESCE(
    (SELECT MAX(l.no) + 1 FROM listings l WHERE l.firm_id = firms.id AND l.no < 9007199254740991), 1);
