DROP TABLE IF EXISTS election_history;

ALTER TABLE election_candidates DROP COLUMN label;

ALTER TABLE election_candidates DROP COLUMN pid;

ALTER TABLE election_candidates DROP COLUMN hostname;
