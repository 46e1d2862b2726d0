ALTER TABLE election_leaders ADD INDEX election_leaders_free (free_at);
ALTER TABLE election_leaders DROP INDEX election_leaders_lapse;
