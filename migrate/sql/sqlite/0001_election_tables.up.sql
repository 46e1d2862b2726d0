CREATE TABLE IF NOT EXISTS election_candidates (
    namespace         TEXT     NOT NULL CHECK (length(CAST(namespace AS BLOB)) BETWEEN 1 AND 191),
    candidate_id      TEXT     NOT NULL,
    registered_at     DATETIME NOT NULL,
    last_heartbeat_at DATETIME NOT NULL,
    expires_at        DATETIME NOT NULL,
    PRIMARY KEY (namespace, candidate_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS election_leaders (
    namespace        TEXT     NOT NULL PRIMARY KEY CHECK (length(CAST(namespace AS BLOB)) BETWEEN 1 AND 191),
    leader_id        TEXT,
    term             INTEGER  NOT NULL DEFAULT 0 CHECK (term >= 0),
    lease_expires_at DATETIME,
    acquired_at      DATETIME,
    updated_at       DATETIME NOT NULL,
    CHECK ((leader_id IS NULL) = (lease_expires_at IS NULL))
) WITHOUT ROWID;
