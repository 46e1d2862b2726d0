DROP INDEX IF EXISTS election_candidates_member;
