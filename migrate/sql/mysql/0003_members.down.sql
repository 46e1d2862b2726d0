DROP INDEX election_leaders_lease ON election_leaders;

ALTER TABLE election_candidates DROP COLUMN member_id;

DROP TABLE IF EXISTS election_members;
