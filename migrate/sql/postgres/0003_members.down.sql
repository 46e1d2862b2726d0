DROP INDEX IF EXISTS election_leaders_lease;

ALTER TABLE IF EXISTS election_candidates DROP COLUMN IF EXISTS member_id;

DROP TABLE IF EXISTS election_members;
