-- The seats that lapse or were vacated lately are found through an index
-- on (lease_expires_at, updated_at): a seat is free from its lease's end,
-- or from its last change while vacant. It replaces the index on the
-- virtual column free_at (the same value). On MariaDB an index on a
-- virtual column makes InnoDB's purge open the table to compute it, and a
-- purge worker was seen looping there while the server's memory grew by
-- some 250 MB a second until the kernel killed it. free_at itself stays,
-- without an index, for the statements of earlier releases.
ALTER TABLE election_leaders ADD INDEX election_leaders_lapse (lease_expires_at, updated_at);
ALTER TABLE election_leaders DROP INDEX election_leaders_free;
