ALTER TABLE election_leaders DROP COLUMN member_id;
