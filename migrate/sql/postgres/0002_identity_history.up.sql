CREATE TABLE IF NOT EXISTS election_history (
    namespace   text        NOT NULL CHECK (octet_length(namespace) BETWEEN 1 AND 191),
    term        bigint      NOT NULL CHECK (term >= 1),
    leader_id   uuid        NOT NULL,
    hostname    text        NOT NULL DEFAULT '' CHECK (octet_length(hostname) <= 255),
    pid         bigint      NOT NULL DEFAULT 0,
    label       text        NOT NULL DEFAULT '' CHECK (octet_length(label) <= 255),
    acquired_at timestamptz NOT NULL,
    ended_at    timestamptz,
    end_reason  text        CHECK (end_reason IN ('resigned', 'unregistered', 'expired', 'vacated')),
    PRIMARY KEY (namespace, term),
    CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);

CREATE INDEX IF NOT EXISTS election_history_ended ON election_history (namespace, ended_at);

ALTER TABLE election_candidates
    ADD COLUMN IF NOT EXISTS hostname text   NOT NULL DEFAULT '' CHECK (octet_length(hostname) <= 255),
    ADD COLUMN IF NOT EXISTS pid      bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS label    text   NOT NULL DEFAULT '' CHECK (octet_length(label) <= 255);
