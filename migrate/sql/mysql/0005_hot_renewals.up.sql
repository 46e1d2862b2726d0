-- The seat's member mark, which PostgreSQL's Group rounds keep (there, a
-- Group's renewals change no indexed column). MySQL, MariaDB and TiDB
-- leave it NULL; the column keeps the tables alike on every database.
ALTER TABLE election_leaders ADD COLUMN member_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;
