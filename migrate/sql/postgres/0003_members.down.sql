DROP INDEX IF EXISTS election_leaders_free;

ALTER TABLE IF EXISTS election_leaders DROP COLUMN IF EXISTS free_at;

ALTER TABLE IF EXISTS election_candidates DROP COLUMN IF EXISTS member_id;

DROP TABLE IF EXISTS election_members;
