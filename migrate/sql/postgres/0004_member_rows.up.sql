CREATE INDEX IF NOT EXISTS election_candidates_member ON election_candidates (member_id) WHERE member_id IS NOT NULL;
