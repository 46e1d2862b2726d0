ALTER TABLE election_leaders DROP INDEX election_leaders_free;

ALTER TABLE election_leaders DROP COLUMN free_at;

ALTER TABLE election_candidates DROP COLUMN member_id;

DROP TABLE IF EXISTS election_members;
