DROP TABLE IF EXISTS election_history;

ALTER TABLE IF EXISTS election_candidates
    DROP COLUMN IF EXISTS label,
    DROP COLUMN IF EXISTS pid,
    DROP COLUMN IF EXISTS hostname;
