DROP INDEX IF EXISTS election_leaders_lease;

ALTER TABLE election_candidates DROP COLUMN member_id;

DROP TABLE IF EXISTS election_members;
