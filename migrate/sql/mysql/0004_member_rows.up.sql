ALTER TABLE election_candidates ADD INDEX election_candidates_member (member_id);
