CREATE TABLE IF NOT EXISTS election_candidates (
    namespace         text        NOT NULL CHECK (octet_length(namespace) BETWEEN 1 AND 191),
    candidate_id      uuid        NOT NULL,
    registered_at     timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    PRIMARY KEY (namespace, candidate_id)
);

CREATE TABLE IF NOT EXISTS election_leaders (
    namespace        text        NOT NULL PRIMARY KEY CHECK (octet_length(namespace) BETWEEN 1 AND 191),
    leader_id        uuid,
    term             bigint      NOT NULL DEFAULT 0 CHECK (term >= 0),
    lease_expires_at timestamptz,
    acquired_at      timestamptz,
    updated_at       timestamptz NOT NULL,
    CHECK ((leader_id IS NULL) = (lease_expires_at IS NULL))
);
