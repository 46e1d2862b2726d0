DROP TABLE IF EXISTS election_history;

ALTER TABLE election_candidates
    DROP COLUMN label,
    DROP COLUMN pid,
    DROP COLUMN hostname;
