CREATE TABLE IF NOT EXISTS election_history (
    namespace   VARBINARY(191) NOT NULL,
    term        BIGINT NOT NULL,
    leader_id   CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    hostname    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    pid         BIGINT NOT NULL DEFAULT 0,
    label       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    acquired_at DATETIME(6) NOT NULL,
    ended_at    DATETIME(6) NULL,
    end_reason  VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL,
    PRIMARY KEY (namespace, term),
    KEY election_history_ended (namespace, ended_at)
) ENGINE=InnoDB;

ALTER TABLE election_candidates
    ADD COLUMN hostname VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    ADD COLUMN pid      BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN label    VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '';
