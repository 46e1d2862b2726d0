CREATE TABLE IF NOT EXISTS election_members (
    member_id         TEXT     NOT NULL PRIMARY KEY,
    hostname          TEXT     NOT NULL DEFAULT '' CHECK (length(CAST(hostname AS BLOB)) <= 255),
    pid               INTEGER  NOT NULL DEFAULT 0,
    label             TEXT     NOT NULL DEFAULT '' CHECK (length(CAST(label AS BLOB)) <= 255),
    registered_at     DATETIME NOT NULL,
    last_heartbeat_at DATETIME NOT NULL,
    expires_at        DATETIME NOT NULL
) WITHOUT ROWID;

ALTER TABLE election_candidates ADD COLUMN member_id TEXT;

ALTER TABLE election_leaders ADD COLUMN free_at DATETIME GENERATED ALWAYS AS (COALESCE(lease_expires_at, updated_at)) VIRTUAL;

CREATE INDEX IF NOT EXISTS election_leaders_free ON election_leaders (free_at);
