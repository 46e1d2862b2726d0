DROP TABLE IF EXISTS election_history;

DROP TABLE IF EXISTS election_leaders;

DROP TABLE IF EXISTS election_candidates;
