CREATE TABLE IF NOT EXISTS election_members (
    member_id         CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    hostname          VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    pid               BIGINT NOT NULL DEFAULT 0,
    label             VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    registered_at     DATETIME(6) NOT NULL,
    last_heartbeat_at DATETIME(6) NOT NULL,
    expires_at        DATETIME(6) NOT NULL
) ENGINE=InnoDB;

ALTER TABLE election_candidates ADD COLUMN member_id CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL;

ALTER TABLE election_leaders
    ADD COLUMN free_at DATETIME(6) AS (COALESCE(lease_expires_at, updated_at)) VIRTUAL;

ALTER TABLE election_leaders ADD INDEX election_leaders_free (free_at);
