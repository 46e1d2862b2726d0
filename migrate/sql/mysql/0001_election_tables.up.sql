CREATE TABLE IF NOT EXISTS election_candidates (
    namespace         VARBINARY(191) NOT NULL,
    candidate_id      CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    registered_at     DATETIME(6) NOT NULL,
    last_heartbeat_at DATETIME(6) NOT NULL,
    expires_at        DATETIME(6) NOT NULL,
    PRIMARY KEY (namespace, candidate_id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS election_leaders (
    namespace        VARBINARY(191) NOT NULL PRIMARY KEY,
    leader_id        CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
    term             BIGINT NOT NULL DEFAULT 0,
    lease_expires_at DATETIME(6) NULL,
    acquired_at      DATETIME(6) NULL,
    updated_at       DATETIME(6) NOT NULL
) ENGINE=InnoDB;
