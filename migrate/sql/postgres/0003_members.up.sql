CREATE TABLE IF NOT EXISTS election_members (
    member_id         uuid        NOT NULL PRIMARY KEY,
    hostname          text        NOT NULL DEFAULT '' CHECK (octet_length(hostname) <= 255),
    pid               bigint      NOT NULL DEFAULT 0,
    label             text        NOT NULL DEFAULT '' CHECK (octet_length(label) <= 255),
    registered_at     timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL
);

ALTER TABLE election_candidates ADD COLUMN IF NOT EXISTS member_id uuid;

ALTER TABLE election_leaders ADD COLUMN IF NOT EXISTS free_at timestamptz
    GENERATED ALWAYS AS (COALESCE(lease_expires_at, updated_at)) STORED;

CREATE INDEX IF NOT EXISTS election_leaders_free ON election_leaders (free_at);
